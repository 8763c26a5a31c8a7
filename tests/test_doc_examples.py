"""The examples a newcomer copies from the README and docs/ return rows after ``make demo``.

The demo lands two batches per table with ``changelake datagen`` (seed 42) and applies them; the examples are
run against the same state, line by line, as a reader would paste them. A read that comes back empty fails
(``(no rows)`` after the demo is what a newcomer met when the example's key had been deleted by batch 3), and
the examples' keys are checked to stay live however often ``make demo`` runs (each run lands two batches)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import DEMO_TABLES, REPO

pytestmark = pytest.mark.e2e

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
READS = ("scan", "lookup", "changelog", "status")


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
    keys = {int(k) for k in re.findall(r"lookup shop\.orders order_id=(\d+)", text)}
    keys |= {int(k) for k in re.findall(r"shop__orders where order_id = (\d+)", text)}
    sql_doc = (REPO / "docs" / "sql-endpoint.md").read_text()
    keys |= {int(k) for k in re.findall(r"shop__orders where order_id = (\d+)", sql_doc)}
    assert keys, "no example key found"
    spec = TableSpec.from_yaml(REPO / "examples" / "tables" / "shop.orders.yaml")
    source = _Source(spec, Profile.of(spec), seed=42)
    for batch in range(1, 61):
        source.batch(batch)
        if batch % 2 == 0:
            live = {k[0] for k in source.rows}
            assert keys <= live, f"after demo run {batch // 2}, order_id {sorted(keys - live)} is deleted"


@pytest.fixture
def demo_home(home, cli_env) -> dict[str, str]:
    """A home as ``make demo`` leaves it for the CLI: every demo table, two datagen batches each, applied."""
    for name in DEMO_TABLES:
        shutil.copy(REPO / "examples" / "tables" / f"{name}.yaml", home / "tables")
    env = {**cli_env, "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    for args in (["datagen", "--batches", "2"], ["apply"]):
        done = subprocess.run(["changelake", *args], env=env, cwd=home, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    return env


def run_examples(lines: list[str], env: dict[str, str], cwd: Path) -> None:
    for line in lines:
        # the README says .venv/bin/changelake (from the repository root); the test runs from its home
        line = line.replace(".venv/bin/changelake", "changelake")
        done = subprocess.run(["bash", "-c", line], env=env, cwd=cwd, capture_output=True, text=True)
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
        words = line.split()
        if words[0] == "changelake" and words[1] in READS:
            assert "(no rows)" not in done.stdout, f"{line} printed no rows"
            assert len(done.stdout.strip().splitlines()) >= 2 or line.endswith("jsonl"), (line, done.stdout)
            assert done.stdout.strip(), f"{line} printed nothing"


def test_readme_cli_examples_return_rows_after_the_demo(demo_home, home):
    readme = (REPO / "README.md").read_text()
    run_examples(commands(blocks(section(readme, "### The CLI"), "bash")[0]), demo_home, home)


@pytest.mark.parametrize("command", ["scan", "changelog", "lookup"])
def test_cli_reference_examples_return_rows_after_the_demo(demo_home, home, command):
    doc = (REPO / "docs" / "cli.md").read_text()
    (example,) = blocks(section(doc, f"## `changelake {command}`"), "bash")
    run_examples(commands(example), demo_home, home)


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
    assert api.lookup("shop.orders", {"order_id": 22}), "the README's demo lookup found nothing"
    assert [s for s in lake.status() if s["table"] in DEMO_TABLES] == demo_state, (
        "the README's Python example changed a demo table"
    )
    doc = (REPO / "docs" / "sql-endpoint.md").read_text()
    (query,) = re.findall(r'-e "(select \* from changelake\.shop\.orders where order_id = \d+)"', doc)
    # This session's catalog over the test's home (the documented name where the session was built for it).
    query = query.replace("changelake.shop.orders", lake.iceberg_table("shop.orders"))
    assert spark.sql(query).count() == 1, query
