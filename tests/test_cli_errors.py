"""Every command of the CLI fed bad arguments: each refusal exits with its kind's code (docs/cli.md "Exit
codes"), says what was given and what was expected, and lets no parser's, library's or Java API's text through
(``Expecting value: line 1 column 1``, ``Lookuper without lookupBy``, a traceback). In this process, no JVM."""

from __future__ import annotations

import json
import re
import shutil

# Imported before any read command runs in this process (see tests/test_cli.py).
import pyarrow  # noqa: F401
import pytest

from tests.helpers import REPO
from tests.test_docs import cli_parser, subcommands

#: Text that is not the user's words: parsers' and libraries' messages, Java API names, Python internals.
LEAKS = re.compile(
    r"Traceback|Expecting value|line \d+ column \d+ \(char|Lookuper|lookupBy|insertIfNotExists|"
    r"invalid int value|invalid float value|<class |Errno|Exception\b|pyiceberg|sqlglot|py4j|java\.|"
    r"org\.apache|``|:func:|NoneType|KeyError|object has no attribute|Unexpected token|Required keyword"
)

#: (arguments, exit code, words the message must hold). A command's usage errors are argparse's, exit 2.
CASES = [
    (["scan", "shop.orders", "--limit", "x"], 2, ["--limit", "'x'", "whole number"]),
    (["scan", "shop.orders", "--limit", "-3"], 2, ["--limit", "at least 0", "-3"]),
    (["scan", "shop.orders", "--at-batch", "0"], 2, ["--at-batch", "at least 1"]),
    (["scan", "shop.orders", "--at-batch", "99"], 2, ["batch 99", "not in the table's history"]),
    (["scan", "a.b.c"], 2, ["'a.b.c'", "<namespace>.<table>"]),
    (["scan", "shop.or-ders"], 2, ["'or-ders'", "letters, digits"]),
    (["scan", "nope"], 4, ["nope", "no table of that name", "shop.orders"]),
    (["scan", "shop.nope"], 4, ["shop.nope", "known"]),
    (["scan", "shop.orders", "--format", "xml"], 2, ["'xml'", "table", "jsonl"]),
    (["changelog", "shop.orders", "--from-batch", "abc"], 2, ["--from-batch", "'abc'", "whole number"]),
    (["changelog", "shop.orders", "--to-batch", "1.5"], 2, ["--to-batch", "'1.5'"]),
    (["changelog", "orders", "--limit", "many"], 2, ["--limit", "'many'"]),
    (["lookup", "shop.orders", "order_id=abc"], 2, ["order_id", "BIGINT", "'abc'", "whole number"]),
    (["lookup", "orders", "order_id=22", "--prefix"], 2, ["prefix", "[order_id]", "without --prefix"]),
    (["lookup", "shop.orders"], 2, ["needs the key", "order_id="]),
    (["lookup", "shop.orders", "order_id"], 2, ["'order_id'", "column=value"]),
    (["lookup", "shop.orders", "=3"], 2, ["'=3'", "column=value"]),
    (["lookup", "shop.orders", "order_id=1", "order_id=2"], 2, ["order_id", "twice"]),
    (["lookup", "shop.orders", "status=PAID"], 2, ["primary key", "order_id", "status"]),
    (["lookup", "shop.orders", "order_id=1", "--prefix", "--insert-if-not-exists"], 2, ["--prefix"]),
    (["lookup", "shop.orders", "--keys-file", "{not_json}"], 2, ["not_json.jsonl:1", "JSON object"]),
    (["lookup", "shop.orders", "--keys-file", "{missing}"], 2, ["missing.jsonl", "No such file"]),
    (["lookup", "web.uid_mapping", "user_id=", "--limit", "1"], 2, ["--limit"]),
    (["dead-letters", "shop.orders", "--batch-id", "first"], 2, ["--batch-id", "'first'"]),
    (["dead-letters", "nope"], 4, ["nope"]),
    (["status", "--format", "yaml"], 2, ["'yaml'"]),
    (["status", "--wdie"], 2, ["--wdie"]),
    (["create", "nope"], 4, ["nope"]),
    (["create", "--spec", "{missing}"], 2, ["missing.jsonl", "no such file"]),
    (["create", "--spec", "{not_json}"], 3, ["not_json.jsonl", "mapping"]),
    (["apply", "nope"], 4, ["nope"]),
    (["apply", "shop.orders", "--file", "{not_json}"], 2, ["--file", "--batch-id"]),
    (["apply", "shop.orders", "--file", "{missing}", "--batch-id", "2"], 2, ["missing.jsonl"]),
    (["apply", "shop.orders", "--batch-id", "0", "--file", "x"], 2, ["--batch-id", "at least 1"]),
    (["apply", "shop.orders", "--up-to", "last"], 2, ["--up-to", "'last'"]),
    (["apply", "shop.orders", "--file", "{not_json}", "--batch-id", "2", "--format", "xml"], 2, ["'xml'"]),
    (["datagen", "nope"], 4, ["nope"]),
    (["datagen", "shop.nope"], 4, ["shop.nope"]),
    (["datagen", "shop.orders", "--batches", "0"], 2, ["--batches", "at least 1"]),
    (["datagen", "shop.orders", "--redelivery", "2"], 2, ["--redelivery", "between 0 and 1"]),
    (["datagen", "shop.orders", "--format", "nope"], 2, ["'nope'", "changelog-json"]),
    (["maintain", "nope"], 4, ["nope"]),
    (["maintain", "shop.orders", "--orphans-older-than", "5"], 2, ["'5'", "1 d"]),
    (["compact", "shop.nope"], 4, ["shop.nope"]),
    (["repair", "shop.nope"], 4, ["shop.nope"]),
    (["repair", "shop.orders", "--on-collision", "newest"], 2, ["--on-collision", "'newest'", "refuse"]),
    (["stream", "nope"], 4, ["nope", "no table of that name"]),
    (["stream", "shop.orders", "--every", "soon"], 2, ["--every", "'soon'", "30 min"]),
    (["stream", "shop.orders", "--every", "0 s"], 2, ["--every", "'0 s'"]),
    (["stream", "shop.orders", "--for", "-1 h"], 2, ["--for", "'-1 h'"]),
    (["sql"], 2, ["statement", "-f FILE"]),
    (["sql", "SELEC 1"], 2, ["line 1, column 7", "SELEC 1", "INSERT INTO"]),
    (["sql", "DELETE FROM shop.orders WHERE"], 2, ["line 1", "WHERE", "DELETE FROM"]),
    (["sql", "UPDATE shop.orders SET status = 'x WHERE order_id = 1"], 2, ["not closed"]),
    (["sql", "DELETE FROM nope WHERE x = 1"], 4, ["nope", "no table of that name"]),
    # Flink's own words for a comparison its types refuse (the literal is a CHAR(3))
    (["sql", "DELETE FROM shop.orders WHERE order_id = 'abc'"], 2, ["order_id", "BIGINT", "CHAR(3)"]),
    (["sql", "-f", "{missing}"], 2, ["missing.jsonl", "No such file"]),
    (["sql", "--batch-id", "-1", "DELETE FROM shop.orders WHERE order_id = 1"], 2, ["--batch-id"]),
    (["quality", "--max-redelivery-share", "2"], 2, ["between 0 and 1", "'2'"]),
    (["quality", "--drift-threshold", "lots"], 2, ["at least 0", "'lots'"]),
    (["sacn", "shop.orders"], 2, ["'sacn'", "scan"]),
]
#: Commands whose arguments are not changelake's: ``dbt`` hands them to dbt.
NOT_CHECKED = {"dbt"}


@pytest.fixture(scope="module")
def lake_home(tmp_path_factory):
    """A home with two demo tables, one batch each, applied in this process (no JVM)."""
    from changelake.cli import main

    home = tmp_path_factory.mktemp("errors")
    (home / "tables").mkdir()
    for name in ("shop.orders", "web.uid_mapping"):
        shutil.copy(REPO / "examples" / "tables" / f"{name}.yaml", home / "tables")
    (home / "not_json.jsonl").write_text("order_id=1\n")
    base = ["--home", str(home), "--tables", str(home / "tables")]
    for args in (["datagen", "--batches", "1", "--records", "20"], ["apply"]):
        assert main([*base, *args]) == 0
    return home


def run(home, capfd, args: list[str]) -> tuple[int, str]:
    """``changelake <args>`` in this process: its exit code and what it wrote to stderr."""
    from changelake.cli import main

    args = [a.format(not_json=home / "not_json.jsonl", missing=home / "missing.jsonl") for a in args]
    capfd.readouterr()
    try:
        code = main(["--home", str(home), "--tables", str(home / "tables"), *args])
    except SystemExit as e:  # argparse's refusal of a bad argument
        code = e.code
    out, err = capfd.readouterr()
    return code, err


def test_the_leak_pattern_catches_what_it_must():
    for text in (
        "error: lookup value for column 'order_id': Expecting value: line 1 column 1 (char 0)",
        "Please use primary key lookup (Lookuper without lookupBy) instead.",
        "argument --limit: invalid int value: 'x'",
        "Required keyword: 'this' missing for <class 'sqlglot.expressions.query.Where'>",
        "cannot read: [Errno 2] No such file or directory",
        "``changelake`` command line",
    ):
        assert LEAKS.search(text), text
    assert not LEAKS.search("error: lookup value for column 'order_id' (BIGINT): 'abc' is not a whole number")


def test_every_command_is_fed_bad_arguments():
    assert set(subcommands(cli_parser())) - NOT_CHECKED == {args[0] for args, _, _ in CASES} - {"sacn"}


@pytest.mark.parametrize(
    ("args", "code", "words"), CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_bad_arguments_are_refused_in_the_users_words(lake_home, capfd, args, code, words):
    got, err = run(lake_home, capfd, args)
    message = err.strip().splitlines()[-1] if err.strip() else ""
    assert got == code, err[-2000:]
    assert message.startswith(("error: ", "changelake")), err[-2000:]
    assert not LEAKS.search(err), err[-2000:]
    missing = [w for w in words if w not in message]
    assert missing == [], message


def test_the_refusals_wrote_nothing(lake_home, capfd):
    """The bad SQL and apply arguments above changed no table: each still has its one batch."""
    from changelake.cli import main

    capfd.readouterr()
    assert main(["--home", str(lake_home), "--tables", str(lake_home / "tables"), "status", "--json"]) == 0
    rows = json.loads(capfd.readouterr().out)
    assert {r["table"]: (r["last_batch"], r["pending_batches"]) for r in rows} == {
        "shop.orders": (1, 0),
        "web.uid_mapping": (1, 0),
    }


def test_help_has_no_markup():
    parser = cli_parser()
    for command in (parser, *subcommands(parser).values()):
        text = command.format_help()
        assert not LEAKS.search(text), text


def test_durations_are_typed_where_they_are_parsed():
    """An age may be 0 (every unreferenced file) or off; a period must be more than 0 (a loop, not a spin)."""
    parser = cli_parser()
    assert parser.parse_args(["maintain", "--orphans-older-than", "0s"]).orphans_older_than == 0.0
    assert parser.parse_args(["maintain", "--orphans-older-than", "off"]).orphans_older_than is None
    assert parser.parse_args(["maintain"]).orphans_older_than == 86_400.0
    assert parser.parse_args(["stream", "t", "--every", "500 ms"]).every == 0.5
