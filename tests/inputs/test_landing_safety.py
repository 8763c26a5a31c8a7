"""Issue 33, the landing zone and dead letters: nothing is read through a link, nothing is lost quietly.

- A link in the landing directory (to a file or a directory outside it) is refused, naming it, and never read:
  no secret reaches a table or its dead letters.
- Dead letters are 0600 in a 0700 directory whatever the umask; the CLI writes every file private.
- The completion rule: a JSON-lines file without its final newline (a Parquet file without its footer) is
  waited for, not applied, while its producer is still writing; temporary and dot names are not batches; a
  file that changes while it is read is not committed; an applied file that changes afterwards is reported by
  ``apply`` (exit 2) and ``status`` with both checksums.
- Dead letters belong to the commit: two appliers racing on one batch id with different inputs never leave
  the rows of one and the dead letters of the other; the loser's file is an orphan the sweep removes.

No Spark: every batch here is small enough to be applied in the test's process.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changelake import ChangeLake
from changelake.engine.apply import Applier
from changelake.errors import BatchRefusedError, ChangelakeError
from changelake.inputs import decode, landing
from changelake.inputs import landing as landing_module
from changelake.inputs.landing import changed_inputs, scan_landing
from changelake.storage.iceberg import Storage
from changelake.storage.maintenance import remove_orphans
from changelake.storage.summary import BatchSummary
from tests.helpers import CLI, NoSpark, local

TABLE = "t.safe"


def spec_of(name: str = TABLE) -> dict:
    return {
        "name": name,
        "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
        "primary_key": ["k"],
        "source": {"on-bad-record": "quarantine"},
    }


def record(k: int, v: str) -> str:
    return json.dumps({"op": "+I", "data": {"k": k, "v": v}})


@pytest.fixture
def lake(tmp_path) -> ChangeLake:
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / f"{TABLE}.yaml").write_text(json.dumps(spec_of()))
    messages: list[str] = []
    instance = ChangeLake(
        home=tmp_path, tables_dir=tmp_path / "tables", spark=NoSpark(), progress=messages.append
    )
    instance.messages = messages  # type: ignore[attr-defined]
    (instance.settings.landing_dir / TABLE).mkdir(parents=True)
    return instance


def landing_of(lake: ChangeLake) -> Path:
    return lake.settings.landing_dir / TABLE


def rows(lake: ChangeLake, table: str = TABLE) -> list[tuple]:
    return sorted((r["k"], r["v"]) for r in lake.rows_arrow(table).to_pylist())


def last_batch(lake: ChangeLake, table: str = TABLE) -> int:
    return Storage.state(lake.storage.pk_table(lake.spec(table))).last_batch


def cli(home: Path, *args: str, umask: int | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGELAKE_")}
    env.update(CHANGELAKE_HOME=str(home), CHANGELAKE_TABLES=str(home / "tables"))
    return subprocess.run(
        [*CLI, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )


def files_under(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, names in os.walk(root) for f in names]


# --- links ------------------------------------------------------------------------------------------------
def test_a_link_out_of_the_landing_directory_is_refused_with_exit_2_and_never_read(lake, tmp_path):
    secret = tmp_path / "environ"
    secret.write_text("AWS_SECRET_ACCESS_KEY=hunter2\n")  # not a record: quarantined, i.e. copied, if read
    landing = landing_of(lake)
    (landing / "1.jsonl").write_text(record(1, "a") + "\n")
    (landing / "2.jsonl").symlink_to(secret)
    (landing / "3.jsonl").write_text(record(3, "c") + "\n")

    done = cli(tmp_path, "apply", TABLE)
    assert done.returncode == 2, done.stderr
    assert f"{landing / '2.jsonl'}: a batch must be a regular file" in done.stderr
    assert f"symbolic link (to '{secret}', outside the landing directory)" in done.stderr
    assert rows(lake) == [(1, "a")]  # the batch below it applied; it and the ones after it did not
    assert not any(b"hunter2" in p.read_bytes() for p in files_under(tmp_path / "warehouse"))
    status = json.loads(cli(tmp_path, "status", "--format", "json").stdout)
    assert "2.jsonl: a batch must be a regular file" in status[0]["problem"]


def test_a_linked_table_directory_or_batch_directory_is_not_followed(lake, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "1.jsonl").write_text("SECRET=1\n" + record(1, "a") + "\n")
    landing = landing_of(lake)
    landing.rmdir()
    landing.symlink_to(outside, target_is_directory=True)
    scan = scan_landing(lake.settings.landing_dir, lake.spec(TABLE), after=0)
    assert scan.batches == {} and scan.blocked_from == 0
    assert "the table's landing directory is a symbolic link" in str(scan.error())
    with pytest.raises(ChangelakeError, match="landing directory is a symbolic link"):
        lake.apply_pending(TABLE)
    assert last_batch(lake) == 0 and lake.dead_letters(TABLE) == []

    # A link named as a batch to a directory, and one to a file inside the landing directory: both refused.
    landing.unlink()
    landing.mkdir()
    (landing / "1.jsonl").write_text(record(1, "a") + "\n")
    (landing / "2.jsonl").symlink_to(outside, target_is_directory=True)
    (lake.settings.landing_dir / "t.other").mkdir()
    (lake.settings.landing_dir / "t.other" / "3.jsonl").write_text(record(3, "c") + "\n")
    (landing / "3.jsonl").symlink_to(Path("..") / "t.other" / "3.jsonl")
    scan = scan_landing(lake.settings.landing_dir, lake.spec(TABLE), after=0)
    assert scan.batches == {1: landing / "1.jsonl"}
    assert [(p.batch_id, p.path.name) for p in scan.problems] == [(2, "2.jsonl"), (3, "3.jsonl")]
    assert "outside the landing directory" in scan.problems[0].message
    assert "symbolic link (to '../t.other/3.jsonl')" in scan.problems[1].message
    assert "outside" not in scan.problems[1].message


def test_a_file_swapped_for_a_link_after_the_scan_is_refused_before_it_is_read(lake, tmp_path, monkeypatch):
    secret = tmp_path / "environ"
    secret.write_text("AWS_SECRET_ACCESS_KEY=hunter2\n")
    landing = landing_of(lake)
    for batch_id in (1, 2):
        (landing / f"{batch_id}.jsonl").write_text(record(batch_id, "x") + "\n")
    apply_files = Applier.apply_files

    def swap_then_apply(self, spec, position, paths, *args, **kwargs):
        if position.seq == 2:  # scanned as a regular file; a link by the time its turn comes
            paths[0].unlink()
            paths[0].symlink_to(secret)
        return apply_files(self, spec, position, paths, *args, **kwargs)

    monkeypatch.setattr(Applier, "apply_files", swap_then_apply)
    with pytest.raises(
        ChangelakeError, match="2.jsonl: a batch must be a regular file, and this is a symbolic"
    ):
        lake.apply_pending(TABLE)
    assert last_batch(lake) == 1
    assert not any(b"hunter2" in p.read_bytes() for p in files_under(tmp_path / "warehouse"))


# --- modes ------------------------------------------------------------------------------------------------
def test_dead_letters_are_0600_in_a_0700_directory_whatever_the_umask(lake):
    (landing_of(lake) / "1.jsonl").write_text(record(1, "a") + "\nnot json\n")
    old = os.umask(0o022)
    try:
        (result,) = lake.apply_pending(TABLE)
    finally:
        os.umask(old)
    path = Path(local(result.dead_letter))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [d["raw"] for d in lake.dead_letters(TABLE)] == ["not json"]


def test_every_file_the_cli_writes_is_private(lake, tmp_path):
    (landing_of(lake) / "1.jsonl").write_text(record(1, "a") + "\nnot json\n")
    done = cli(tmp_path, "apply", TABLE, umask=0o022)
    assert done.returncode == 0, done.stderr
    written = files_under(tmp_path / "warehouse")
    assert any("dead-letter" in str(p) for p in written) and any(p.suffix == ".parquet" for p in written)
    open_to_others = [(str(p), oct(p.stat().st_mode)) for p in written if p.stat().st_mode & 0o077]
    assert open_to_others == []
    dirs = [Path(d) for d, _, _ in os.walk(tmp_path / "warehouse" / "t")]
    assert [str(d) for d in dirs if d.stat().st_mode & 0o077] == []


# --- the completion rule ----------------------------------------------------------------------------------
def test_temporary_and_dot_names_are_not_batches(lake):
    landing = landing_of(lake)
    for name in (".1.jsonl", "1.jsonl.tmp", ".1.jsonl.tmp", "1.jsonl~", ".2.parquet"):
        (landing / name).write_text(record(1, "a") + "\n")
    scan = scan_landing(lake.settings.landing_dir, lake.spec(TABLE), after=0)
    assert (scan.batches, scan.problems, scan.waiting) == ({}, [], [])
    assert lake.apply_pending(TABLE) == []


def test_a_file_still_being_written_is_waited_for_and_applied_whole_once(lake):
    """A producer appends batch 1 slowly (its final newline last) and lands batch 2 by a temporary name and
    a rename, while applies run in a loop: each record is in the table exactly once, and applies ran while
    batch 1 was being written (they said they were waiting for it)."""
    landing = landing_of(lake)
    first = [record(k, f"v{k}") for k in range(30)]
    second = [record(k, f"w{k}") for k in range(25, 40)]  # updates 25..29, inserts 30..39
    written: dict[str, float] = {}

    def produce() -> None:
        written["start"] = time.monotonic()
        with open(landing / "1.jsonl", "wb", buffering=0) as out:
            for i, line in enumerate(first):
                out.write(b"\n" * (i > 0) + line[:10].encode())  # half a record: never a complete file
                time.sleep(0.01)
                out.write(line[10:].encode())
                time.sleep(0.01)
            out.write(b"\n")
        written["first"] = time.monotonic()
        tmp = landing / ".2.jsonl.tmp"
        with open(tmp, "wb", buffering=0) as out:
            for line in second:
                out.write(line.encode() + b"\n")  # complete lines: only the rename makes it a batch
                time.sleep(0.01)
        tmp.rename(landing / "2.jsonl")
        written["end"] = time.monotonic()

    producer = threading.Thread(target=produce)
    producer.start()
    applies: list[tuple[float, list[str], list[int]]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (written.get("end") and last_batch(lake) == 2):
        lake.messages.clear()
        at = time.monotonic()
        applied = [r.batch_id for r in lake.apply_pending(TABLE)]
        applies.append((at, list(lake.messages), applied))
    producer.join()

    waited = [
        at
        for at, messages, _ in applies
        if any("waiting for landed batch 1" in m and "does not end with a newline" in m for m in messages)
    ]
    # Applies that saw batch 1 (so ran after it was created) and started before it was complete: they overlapped.
    assert waited and min(waited) < written["first"], (written, applies[:3])
    assert [b for _, _, applied in applies for b in applied] == [1, 2]  # each batch applied once, in order
    expected = {k: f"v{k}" for k in range(30)} | {k: f"w{k}" for k in range(25, 40)}
    assert rows(lake) == sorted(expected.items())
    summary = BatchSummary.of_batch(
        lake.storage.snapshot_for_batch(lake.storage.pk_table(lake.spec(TABLE)), 1)
    )
    assert summary.source["messages"] == 30 and summary.source["quarantined"] == 0


def test_status_shows_the_batch_a_table_waits_for(lake):
    landing = landing_of(lake)
    (landing / "1.jsonl").write_text(record(1, "a") + "\n")
    (landing / "2.jsonl").write_text(record(2, "b"))  # no newline yet
    (landing / "3.jsonl").write_text(record(3, "c") + "\n")
    assert [r.batch_id for r in lake.apply_pending(TABLE)] == [1]
    assert any(
        "waiting for landed batch 2" in m and "does not end with a newline" in m for m in lake.messages
    )
    (row,) = lake.status()
    assert "2.jsonl: incomplete: does not end with a newline" in row["incomplete"]
    assert row["problem"] is None
    with open(landing / "2.jsonl", "a") as out:
        out.write("\n")
    assert [r.batch_id for r in lake.apply_pending(TABLE)] == [2, 3]
    (row,) = lake.status()
    assert row["incomplete"] is None and rows(lake) == [(1, "a"), (2, "b"), (3, "c")]


def test_a_parquet_file_is_complete_when_its_footer_is_there(lake):
    buffer = io.BytesIO()
    pq.write_table(pa.table({"op": ["+I", "+I"], "k": [1, 2], "v": ["a", "b"]}), buffer)
    data = buffer.getvalue()
    path = landing_of(lake) / "1.parquet"
    for cut in (3, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        assert lake.apply_pending(TABLE) == [], cut
        scan = scan_landing(lake.settings.landing_dir, lake.spec(TABLE), after=0)
        assert [p.batch_id for p in scan.waiting] == [1] and scan.problems == []
    path.write_bytes(data)
    assert [r.batch_id for r in lake.apply_pending(TABLE)] == [1]
    assert rows(lake) == [(1, "a"), (2, "b")]


def test_a_file_that_changes_while_it_is_read_is_not_committed(lake, monkeypatch):
    path = landing_of(lake) / "1.jsonl"
    path.write_text(record(1, "a") + "\n")
    plan = decode.plan_batch

    def plan_then_append(paths, *args):
        planned = plan(paths, *args)
        planned.checksum  # noqa: B018 - the hash of the file as planned
        with open(path, "a") as out:  # a producer still appending complete lines
            out.write(record(2, "b") + "\n")
        return planned

    monkeypatch.setattr(decode, "plan_batch", plan_then_append)
    assert lake.apply_pending(TABLE) == []
    assert any(
        "waiting for landed batch 1" in m and "changed while it was being read" in m for m in lake.messages
    )
    assert last_batch(lake) == 0
    monkeypatch.setattr(decode, "plan_batch", plan)
    assert [r.batch_id for r in lake.apply_pending(TABLE)] == [1]
    assert rows(lake) == [(1, "a"), (2, "b")]


def test_an_applied_file_that_changes_is_reported_with_both_checksums(lake, tmp_path):
    path = landing_of(lake) / "1.jsonl"
    original = record(1, "a") + "\n"
    path.write_text(original)
    lake.apply_pending(TABLE)
    recorded = Storage.state(lake.storage.pk_table(lake.spec(TABLE))).checksum
    with open(path, "a") as out:  # the producer was not done after all
        out.write(record(2, "b") + "\n")
    current = landing.batch_checksum([path], None, None)
    assert current != recorded

    with pytest.raises(BatchRefusedError, match="changed after batch 1 was applied") as refused:
        lake.apply_pending(TABLE)
    assert recorded in str(refused.value) and current in str(refused.value)
    done = cli(tmp_path, "apply", TABLE)
    assert done.returncode == 2
    assert (
        f"{path}: changed after batch 1 was applied from it (checksum at the apply {recorded}, now {current})"
        in (done.stderr)
    )
    (row,) = json.loads(cli(tmp_path, "status", "--format", "json").stdout)
    assert str(path) in row["problem"] and recorded in row["problem"] and current in row["problem"]

    path.write_text(original)  # restored (a new modification time, the same bytes): nothing to report
    assert lake.apply_pending(TABLE) == []
    (row,) = lake.status()
    assert row["problem"] is None and rows(lake) == [(1, "a")]


def test_an_expired_batchs_file_is_checked_when_it_changed_after_the_retained_batches(lake):
    landing = landing_of(lake)
    for batch_id in (1, 2):
        (landing / f"{batch_id}.jsonl").write_text(record(batch_id, "x") + "\n")
    lake.apply_pending(TABLE)
    table = lake.storage.pk_table(lake.spec(TABLE))
    first, second = (BatchSummary.of_batch(s) for s in Storage.batch_snapshots(table))
    scan = scan_landing(lake.settings.landing_dir, lake.spec(TABLE), after=2)
    asked: list[set[int]] = []

    def expired(ids: set[int]) -> list[BatchSummary]:
        asked.append(ids)
        return [first]

    # Batch 1 as if expired (only batch 2 retained): unchanged since, so its summary is not even read.
    assert changed_inputs(lake.settings.landing_dir, lake.spec(TABLE), scan, 2, [second], expired) == []
    assert asked == []
    time.sleep(0.01)
    (landing / "1.jsonl").write_text(record(1, "changed") + "\n")
    (change,) = changed_inputs(lake.settings.landing_dir, lake.spec(TABLE), scan, 2, [second], expired)
    assert asked == [{1}] and (change.batch_id, change.recorded) == (1, first.checksum)


# --- dead letters belong to the commit --------------------------------------------------------------------
def racing_inputs(lake: ChangeLake, table: str) -> dict[str, Path]:
    directory = lake.settings.home / "inputs" / table
    directory.mkdir(parents=True)
    paths = {}
    for name in ("A", "B"):
        paths[name] = directory / f"{name}.jsonl"
        paths[name].write_text(record(1, name) + f"\nbad record of {name}\n")
    return paths


def race(home: Path, table: str, inputs: dict[str, Path]) -> dict[str, object]:
    """Applier A and B (each its own ChangeLake) apply batch 1 of ``table`` from their own input at once."""
    outcome: dict[str, object] = {}
    start = threading.Barrier(2)

    def apply(name: str) -> None:
        applier = ChangeLake(home=home, tables_dir=home / "tables", spark=NoSpark(), progress=lambda m: None)
        start.wait()
        try:
            outcome[name] = applier.apply(table, file=inputs[name], batch_id=1).status
        except BatchRefusedError as e:
            outcome[name] = e

    threads = [threading.Thread(target=apply, args=(name,), name=name) for name in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcome


def committed_letters(lake: ChangeLake, table: str) -> tuple[str, list[str]]:
    ((_, v),) = rows(lake, table)
    return v, [d["raw"].strip() for d in lake.dead_letters(table)]


def test_racing_appliers_cannot_pair_one_inputs_rows_with_the_others_dead_letters(lake, monkeypatch):
    """B writes its dead letters after A and commits after A: A's commit wins. With one dead-letter path per
    batch, B's file replaced A's under A's commit; now each attempt's file is its own, and the commit names it."""
    lake.create_table(spec_of("t.race"))
    inputs = racing_inputs(lake, "t.race")
    a_written, b_written, a_committed = threading.Event(), threading.Event(), threading.Event()
    write, commit = Applier._write, Applier._commit

    def ordered_write(self, plan, merged):
        if threading.current_thread().name == "B":
            assert a_written.wait(60)
        written = write(self, plan, merged)
        (a_written if threading.current_thread().name == "A" else b_written).set()
        return written

    def ordered_commit(self, plan, written):
        if threading.current_thread().name == "A":
            assert b_written.wait(60)
            try:
                return commit(self, plan, written)
            finally:
                a_committed.set()
        assert a_committed.wait(60)
        return commit(self, plan, written)

    monkeypatch.setattr(Applier, "_write", ordered_write)
    monkeypatch.setattr(Applier, "_commit", ordered_commit)
    outcome = race(lake.settings.home, "t.race", inputs)
    assert outcome["A"] == "applied" and isinstance(outcome["B"], BatchRefusedError), outcome
    assert committed_letters(lake, "t.race") == ("A", ["bad record of A"])

    # B's file is an orphan: the sweep removes it, never the file the committed batch names.
    table = lake.storage.pk_table(lake.spec("t.race"))
    named = Path(local(BatchSummary.of_batch(table.current_snapshot()).dead_letter))
    letters = sorted(named.parent.iterdir())
    assert len(letters) == 2 and named in letters
    remove_orphans(table, older_than_s=0)
    assert sorted(named.parent.iterdir()) == [named]
    assert committed_letters(lake, "t.race") == ("A", ["bad record of A"])


def test_free_running_racing_appliers_always_leave_the_committed_inputs_dead_letters(lake):
    for attempt in range(4):
        table = f"t.race{attempt}"
        lake.create_table(spec_of(table))
        outcome = race(lake.settings.home, table, racing_inputs(lake, table))
        assert sorted(type(o).__name__ for o in outcome.values()) == ["BatchRefusedError", "str"], outcome
        winner = next(name for name, o in outcome.items() if o == "applied")
        assert committed_letters(lake, table) == (winner, [f"bad record of {winner}"])


def test_a_batch_number_landed_again_under_another_extension_is_reported_like_a_changed_file(lake):
    landing = landing_of(lake)
    (landing / "1.jsonl").write_text(record(1, "a") + "\n")
    assert [r.writer_seq for r in lake.apply_pending(TABLE)] == [1]
    (landing / "1.jsonl").unlink()  # cleaned up after its apply: allowed
    table = pa.table({"op": ["+I"], "k": pa.array([7], pa.int32()), "v": ["other rows"]})
    pq.write_table(table, landing / "1.parquet")
    expected = "1.parquet: landed batch 1 was applied from 1.jsonl, not from this file"
    with pytest.raises(BatchRefusedError, match=expected):
        lake.apply_pending(TABLE)
    (row,) = lake.status()
    assert expected in row["problem"] and rows(lake) == [(1, "a")]


def test_a_pending_batch_that_cannot_be_read_is_a_status_problem(lake, monkeypatch):
    landing = landing_of(lake)
    (landing / "1.jsonl").write_text(record(1, "a") + "\n")
    (landing / "2.jsonl").write_text(record(2, "b") + "\n")
    real_open = os.open

    def unreadable(path, flags, *args, **kwargs):  # mode 000 as a user who is not root
        if str(path).endswith("2.jsonl"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(landing_module.os, "open", unreadable)
    (row,) = lake.status()
    assert "2.jsonl: cannot read the batch file: Permission denied" in row["problem"]
    with pytest.raises(ChangelakeError, match="2.jsonl: cannot read the batch file"):
        lake.apply_pending(TABLE)  # batch 1 below it still applies
    assert rows(lake) == [(1, "a")]
