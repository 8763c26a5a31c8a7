"""Spec loading (issue 33, item 8): a YAML alias bomb is refused in milliseconds with an error naming its file,
and a spec that does not load is reported for its table while every other table works: ``status`` lists it,
``apply``/``scan`` of the other tables run, a command addressed to it fails with its error (exit 2).

The CLI runs in subprocesses without a JVM (the batches are small enough to apply in-process), each under a
1 GiB address-space limit: on a loader without limits the bomb fails them fast instead of eating the
machine's memory.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from changelake.errors import SpecError
from changelake.spec import MAX_SPEC_BYTES, TableSpec, load_specs
from tests.helpers import CLI, sparkless_lake

# Nine lists of nine aliases of the list before: 9**9 (387 million) strings once expanded, 600 bytes on disk.
BOMB = (
    "name: shop.bomb\ncolumns: [{name: k, type: INT}]\nprimary_key: [k]\ncomment:\n"
    + '  - &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    + "".join(f"  - &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9))
)
GOOD = "name: shop.good\ncolumns: [{name: k, type: INT}, {name: v, type: STRING}]\nprimary_key: [k]\n"
MEMORY = 1 << 30


def limited() -> None:
    """In the child: at most 1 GiB of address space (the bomb needs several)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, preexec_fn=limited)


def test_an_alias_bomb_is_refused_in_milliseconds_naming_the_file(tmp_path):
    path = tmp_path / "shop.bomb.yaml"
    path.write_text(BOMB)
    assert path.stat().st_size < 1000
    probe = textwrap.dedent(
        """
        import json, sys, time
        from changelake.errors import SpecError
        from changelake.spec import TableSpec
        started = time.monotonic()
        try:
            TableSpec.from_yaml(sys.argv[1])
        except SpecError as e:
            print(json.dumps({"seconds": time.monotonic() - started, "error": str(e)}))
        """
    )
    result = run([sys.executable, "-c", probe, str(path)])
    assert result.returncode == 0, result.stderr[-2000:]
    outcome = json.loads(result.stdout)
    assert outcome["seconds"] < 2, outcome
    assert outcome["error"].startswith(f"{path}: ") and "aliases expand it past" in outcome["error"]


def test_aliases_a_spec_may_use_still_load_and_a_cycle_is_refused(tmp_path):
    path = tmp_path / "shop.t.yaml"
    path.write_text(
        "name: shop.t\ncolumns: [&k {name: k, type: INT}, {<<: *k, name: v}]\nprimary_key: [k]\n"
        "bucket_key: &key [k]\npartition_keys: []\ncomment: &c hello\noptions: {table.delete.behavior: allow}\n"
    )
    assert TableSpec.from_yaml(path).column_names == ("k", "v")
    path.write_text("name: shop.t\ncolumns: &c [*c]\nprimary_key: [k]\n")
    with pytest.raises(SpecError, match=r"refers to a node that contains it") as err:
        TableSpec.from_yaml(path)
    assert str(path) in str(err.value)
    # Wide but honest: a long list without aliases is limited by the file size only.
    path.write_text(GOOD.replace("shop.good", "shop.t") + "comment: [" + "1, " * 20_000 + "1]\n")
    assert path.stat().st_size < MAX_SPEC_BYTES
    assert len(TableSpec.from_yaml(path).comment) > 0


def test_a_spec_that_does_not_load_is_kept_for_its_table_and_the_others_load(tmp_path):
    (tmp_path / "shop.good.yaml").write_text(GOOD)
    (tmp_path / "shop.bomb.yaml").write_text(BOMB)
    (tmp_path / "broken.yml").write_text("name: [unclosed\n")
    (tmp_path / "x.yaml").write_text(GOOD.replace("shop.good", "shop.bad") + "options: {bucket.num: 0}\n")

    specs = load_specs(tmp_path)

    assert sorted(specs) == ["shop.good"] and specs["shop.good"].column_names == ("k", "v")
    assert sorted(specs.problems) == ["broken.yml", "shop.bad", "shop.bomb"]  # declared name, else file
    assert str(tmp_path / "x.yaml") in str(specs.problems["shop.bad"])
    assert "not valid YAML" in str(specs.problems["broken.yml"])
    for lookup in (lambda: "shop.bomb" in specs, lambda: specs["shop.bomb"], lambda: specs.get("shop.bomb")):
        with pytest.raises(SpecError, match="aliases expand it past") as err:
            lookup()
        assert str(tmp_path / "shop.bomb.yaml") in str(err.value)
    assert "shop.other" not in specs and specs.get("shop.other") is None
    with pytest.raises(SpecError, match=r"3 table spec\(s\) did not load") as err:
        specs.check()
    assert all(name in str(err.value) for name in ("broken.yml", "shop.bad", "shop.bomb"))


@pytest.fixture
def lake_home(tmp_path) -> Path:
    """A home with a good table (one landed batch), the bomb, and a file that is not YAML."""
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "shop.good.yaml").write_text(GOOD)
    (tmp_path / "tables" / "shop.bomb.yaml").write_text(BOMB)
    (tmp_path / "tables" / "broken.yaml").write_text("name: [unclosed\n")
    land(tmp_path, 1, {"k": 1, "v": "a"})
    return tmp_path


def land(home: Path, batch_id: int, data: dict) -> None:
    landing = home / "landing" / "shop.good"
    landing.mkdir(parents=True, exist_ok=True)
    (landing / f"{batch_id}.jsonl").write_text(json.dumps({"op": "+I", "data": data}) + "\n")


def changelake(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
    env.update(CHANGELAKE_HOME=str(home), CHANGELAKE_TABLES=str(home / "tables"))
    return run([*CLI, *args], env)


def test_the_cli_reports_a_bad_spec_for_its_table_and_serves_the_others(lake_home):
    bomb = str(lake_home / "tables" / "shop.bomb.yaml")

    status = changelake(lake_home, "status", "--format", "json")
    assert status.returncode == 0, status.stderr[-2000:]
    rows = {r["table"]: r for r in json.loads(status.stdout)}
    assert sorted(rows) == ["broken.yaml", "shop.bomb", "shop.good"]
    assert rows["shop.good"]["problem"] is None and rows["shop.good"]["pending_batches"] == 1
    assert rows["shop.bomb"]["problem"].startswith(f"{bomb}: ") and rows["shop.bomb"]["exists"] is None
    assert "not valid YAML" in rows["broken.yaml"]["problem"]
    assert set(rows["shop.bomb"]) == set(rows["shop.good"])  # the same columns: the DAGs read every row

    applied = changelake(lake_home, "apply", "shop.good", "--json")
    assert applied.returncode == 0, applied.stderr[-2000:]
    assert json.loads(applied.stdout)["applied"] == 1

    for command in (["apply", "shop.bomb"], ["scan", "shop.bomb"], ["create", "shop.bomb"]):
        refused = changelake(lake_home, *command)
        assert refused.returncode == 3, (command, refused.stderr[-2000:])  # SpecError
        assert f"error: {bomb}: " in refused.stderr and "aliases expand it past" in refused.stderr

    # Every table: the good one is applied first, then the command fails naming both bad files.
    land(lake_home, 2, {"k": 2, "v": "b"})
    everything = changelake(lake_home, "apply")
    assert everything.returncode == 3  # SpecError
    assert "2 table spec(s) did not load" in everything.stderr
    assert bomb in everything.stderr and "broken.yaml" in everything.stderr
    scan = changelake(lake_home, "scan", "shop.good", "--format", "json")
    assert scan.returncode == 0, scan.stderr[-2000:]
    assert json.loads(scan.stdout) == [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]


def test_the_python_api_status_lists_the_bad_spec(lake_home):
    lake = sparkless_lake(lake_home)
    rows = {r["table"]: r for r in lake.status()}
    assert rows["shop.good"]["pending_batches"] == 1
    assert "aliases expand it past" in rows["shop.bomb"]["problem"]
    with pytest.raises(SpecError, match="aliases expand it past"):
        lake.spec("shop.bomb")


def test_a_spec_directory_is_parsed_again_only_when_a_file_changes(tmp_path, monkeypatch):
    """A process applying batch after batch reads its table's spec each time: files unchanged since an earlier
    load are not parsed again; a changed, added or removed file is; a file changed a moment ago is parsed
    every time (its times could not tell a second change of the same size)."""
    import changelake.spec as spec_module
    from changelake.lru import BoundedLRU

    monkeypatch.setattr(spec_module, "_LOADED", BoundedLRU(8))
    parsed = []
    read_yaml = spec_module.read_yaml
    monkeypatch.setattr(spec_module, "read_yaml", lambda p: parsed.append(p.name) or read_yaml(p))
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    assert list(load_specs(tmp_path)) == ["shop.good"]
    assert list(load_specs(tmp_path)) == ["shop.good"] and parsed == ["good.yaml", "good.yaml"]  # racy: new
    old = 1_000_000_000
    os.utime(good, ns=(old, old))  # long unchanged (the ctime is now, but older than the racy window soon)
    monkeypatch.setattr(spec_module, "_RACY_NS", -(10**18))  # judge every file old enough
    parsed.clear()
    first = load_specs(tmp_path)
    second = load_specs(tmp_path)
    assert parsed == ["good.yaml"] and first == second and first is not second
    second["shop.other"] = first["shop.good"]  # a caller's copy: the next load does not see it
    assert list(load_specs(tmp_path)) == ["shop.good"] and parsed == ["good.yaml"]
    good.write_text(GOOD.replace("STRING", "BIGINT"))  # changed: read again
    assert str(load_specs(tmp_path)["shop.good"].columns[1].type) == "BIGINT" and parsed[-1] == "good.yaml"
    (tmp_path / "bad.yaml").write_text("name: [")  # added, broken: its problem reported
    assert list(load_specs(tmp_path).problems) == ["bad.yaml"]
    (tmp_path / "bad.yaml").unlink()  # removed
    assert list(load_specs(tmp_path).problems) == []
