"""The examples a newcomer copies from the README and docs/ run on the demo's data, and ``make demo``'s closing
hints work when pasted.

The demo lands two batches per table with ``changelake datagen`` (seed 42) and applies them; the examples are
run against the same state, line by line, as a reader would paste them. A read that comes back empty fails
(``(no rows)`` after the demo is what a newcomer met when the example's key had been deleted by batch 3), so
does a write that finds nothing to write or quarantines its record, and the examples' keys are checked to stay
live however often ``make demo`` runs (each run lands two batches). Only ``dbt`` and ``quality``, which need
Spark, are left to tests/runtime and tests/quality."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DEMO_TABLES, REPO

pytestmark = pytest.mark.e2e

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
READS = ("scan", "lookup", "changelog", "status")
#: The commands of docs/cli.md whose examples run here: all but dbt and quality (Spark).
RUNNABLE = ("create", "apply", "sql", "scan", "changelog", "lookup", "status", "maintain", "datagen")


def blocks(markdown: str, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(markdown) if kind == lang]


def section(markdown: str, heading: str) -> str:
    """The text from ``heading`` (a whole line) to the next heading of the same level."""
    level = heading.split(" ", 1)[0]
    start = markdown.index(heading + "\n")
    end = markdown.find(f"\n{level} ", start + len(heading))
    return markdown[start : end if end != -1 else len(markdown)]


def commands(block: str) -> list[str]:
    """The block's command lines, comments dropped; the README's ``export`` of the home is the test's own."""
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "export CHANGELAKE_HOME"))]


def test_the_checkers_see_the_examples():
    """The extraction finds what it must (else the tests below would pass over nothing)."""
    readme = (REPO / "README.md").read_text()
    cli = commands(blocks(section(readme, "### The CLI"), "bash")[0])
    assert any("lookup shop.orders" in c for c in cli) and any(" scan " in c for c in cli)
    doc = (REPO / "docs" / "cli.md").read_text()
    lookups = commands(blocks(section(doc, "## `changelake lookup`"), "bash")[0])
    assert any("--keys-file" in c for c in lookups)
    assert commands("a  # comment\n# only a comment\nexport CHANGELAKE_HOME=x\nb\n") == ["a", "b"]


def test_the_example_keys_stay_live_however_often_the_demo_runs():
    """The key the README and docs look up is in the simulated source after every demo run (two batches
    each), for 30 runs; a key that a later batch deletes would make the example print (no rows)."""
    from changelake.inputs.datagen import Profile, _Source
    from changelake.spec import TableSpec

    text = "\n".join(p.read_text() for p in (REPO / "README.md", REPO / "docs" / "cli.md"))
    text += (REPO / "docs" / "sql-endpoint.md").read_text() + (REPO / "infra" / "demo_summary.py").read_text()
    keys = {int(k) for k in re.findall(r"lookup shop\.orders order_id=(\d+)", text)}
    keys |= {int(k) for k in re.findall(r"shop__orders where order_id = (\d+)", text)}
    sql = "\n".join(p.read_text() for p in (REPO / "docs" / "cli.md", REPO / "docs" / "sql-writes.md"))
    customers = {
        int(k) for k in re.findall(r"(?:UPDATE|DELETE FROM) \S*customers .*?customer_id = (\d+)", sql)
    }
    assert keys and len(customers) >= 3, "no example key found"
    for table, column, wanted in (
        ("shop.orders", "order_id", keys),
        ("shop.customers", "customer_id", customers),
    ):
        spec = TableSpec.from_yaml(REPO / "examples" / "tables" / f"{table}.yaml")
        source = _Source(spec, Profile.of(spec), seed=42)
        for batch in range(1, 61):
            source.batch(batch)
            if batch % 2 == 0:
                live = {k[0] for k in source.rows}
                gone = sorted(wanted - live)
                assert not gone, f"after demo run {batch // 2}, {table} {column} {gone} is deleted"


@pytest.fixture(scope="module")
def demo_image(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A home as ``make demo`` leaves it for the CLI (every demo table, two datagen batches each, applied),
    made once, and a copy of it beside it: each test gets the home back as it was (same path, so the
    catalog's absolute file locations stay right) for the price of a copy, not of a demo."""
    home = tmp_path_factory.mktemp("demo") / "home"
    (home / "tables").mkdir(parents=True)
    for name in DEMO_TABLES:
        shutil.copy(REPO / "examples" / "tables" / f"{name}.yaml", home / "tables")
    (home / "examples").symlink_to(REPO / "examples")  # the docs' paths are the checkout's
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
    env.update(CHANGELAKE_HOME=str(home), CHANGELAKE_TABLES=str(home / "tables"))
    env["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"
    for args in (["datagen", "--batches", "2"], ["apply"]):
        done = subprocess.run(["changelake", *args], env=env, cwd=home, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    shutil.copytree(home, home.with_name("image"), symlinks=True)
    return home, env


@pytest.fixture
def demo_home(demo_image) -> tuple[Path, dict[str, str]]:
    """The demo's home as the demo left it (whatever an earlier test's examples wrote), and its environment."""
    home, env = demo_image
    shutil.rmtree(home)
    shutil.copytree(home.with_name("image"), home, symlinks=True)
    return home, env


def run_examples(lines: list[str], env: dict[str, str], cwd: Path) -> None:
    """Each line as a reader pastes it: it succeeds, a read shows rows, a write writes (nothing quarantined,
    no key missing)."""
    assert lines, "no example found"
    for line in lines:
        # the README says .venv/bin/changelake (from the repository root); the test runs from its home
        line = line.replace(".venv/bin/changelake", "changelake")
        if "| jq" in line and shutil.which("jq") is None:
            line = line.split("| jq", 1)[0]
        if line.startswith("changelake stream ") and "--for" not in line:
            line += " --for 2s"  # it runs until stopped
        done = subprocess.run(["bash", "-c", line], env=env, cwd=cwd, capture_output=True, text=True)
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
        words = line.split()
        if words[0] == "changelake" and words[1] in READS:
            assert "(no rows)" not in done.stdout, f"{line} printed no rows"
            assert len(done.stdout.strip().splitlines()) >= 2 or "json" in line, (line, done.stdout)
            assert done.stdout.strip(), f"{line} printed nothing"
        if words[0] == "changelake" and words[1] in ("sql", "apply"):
            said = done.stdout + done.stderr
            assert "nothing to write" not in said and "quarantined" not in said, f"{line}\n{said[-3000:]}"


def test_readme_cli_examples_return_rows_after_the_demo(demo_home):
    home, env = demo_home
    readme = (REPO / "README.md").read_text()
    run_examples(commands(blocks(section(readme, "### The CLI"), "bash")[0]), env, home)


@pytest.mark.parametrize("command", RUNNABLE)
def test_cli_reference_examples_run_on_the_demo_data(demo_home, command):
    home, env = demo_home
    doc = (REPO / "docs" / "cli.md").read_text()
    examples = blocks(section(doc, f"## `changelake {command}`"), "bash")
    run_examples(
        [c for example in examples for c in commands(example)] or [f"changelake {command}"], env, home
    )


def test_sql_writes_examples_run_on_the_demo_data(demo_home):
    home, env = demo_home
    doc = (REPO / "docs" / "sql-writes.md").read_text()
    run_examples(commands(blocks(doc, "bash")[0]), env, home)


def test_the_demo_summary_is_tables_and_its_hints_work_when_pasted(demo_home):
    """infra/demo_summary.py after the demo: tables, not Python dicts; each `changelake` hint, pasted in the
    repository root with no CHANGELAKE_* variable set, reads this demo's tables."""
    home, env = demo_home
    run = home / "demo" / "run"
    run.mkdir(parents=True)
    script = [sys.executable, str(REPO / "infra" / "demo_summary.py"), "--run-dir", str(run)]
    done = subprocess.run(script, env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "{'" not in done.stdout and re.search(r"^table +engine +applied now", done.stdout, re.MULTILINE)
    hints = [line.strip() for line in done.stdout.split("next (paste from", 1)[1].splitlines()[1:]]
    cli = [h for h in hints if ".venv/bin/changelake" in h]
    assert len(cli) >= 3 and all(h.startswith("CHANGELAKE_HOME=") for h in cli), hints
    bare = {k: v for k, v in env.items() if not k.startswith("CHANGELAKE_")}
    for hint in cli:
        pasted = subprocess.run(["bash", "-c", hint], env=bare, cwd=REPO, capture_output=True, text=True)
        assert pasted.returncode == 0, f"{hint}\n{pasted.stderr[-3000:]}"
        assert "shop.orders" in pasted.stdout or re.search(r"^ +\d+ ", pasted.stdout, re.MULTILINE), (
            pasted.stdout
        )


def test_readme_python_api_example_runs_on_its_own_table_and_the_documented_sql_returns_rows(
    lake, spark, home, monkeypatch
):
    """The README's Python block, as pasted, after the demo: it writes only its own table, and the query
    docs/sql-endpoint.md runs through beeline finds its row in the views the block registers."""
    from tests.helpers import land_and_apply_demo

    land_and_apply_demo(lake, batches=2, records=None)
    demo_state = [s for s in lake.status() if s["table"] in DEMO_TABLES]
    monkeypatch.setenv("CHANGELAKE_HOME", str(home))
    monkeypatch.setenv("CHANGELAKE_TABLES", str(home / "tables"))
    readme = (REPO / "README.md").read_text()
    (block,) = blocks(section(readme, "### The Python API"), "python")
    scope: dict = {}
    exec(compile(block, "README.md (The Python API)", "exec"), scope)  # noqa: S102 - our own documentation
    api = scope["lake"]
    assert api.lookup("example.t", {"k": 1}) == [{"k": 1, "v": "b"}]
    assert api.input_arrow("shop.orders").num_rows > 0, "the README shows the input of a table that has none"
    assert api.lookup("shop.orders", {"order_id": 22}), "the README's demo lookup found nothing"
    assert [s for s in lake.status() if s["table"] in DEMO_TABLES] == demo_state, (
        "the README's Python example changed a demo table"
    )
    doc = (REPO / "docs" / "sql-endpoint.md").read_text()
    (query,) = re.findall(r'-e "(select \* from changelake\.shop\.orders where order_id = \d+)"', doc)
    # This session's catalog over the test's home (the documented name where the session was built for it).
    query = query.replace("changelake.shop.orders", lake.iceberg_table("shop.orders"))
    assert spark.sql(query).count() == 1, query
