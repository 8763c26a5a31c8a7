"""One table, many writers: landed batches, SQL statements, API calls and lookup inserts each keep their own
exactly-once sequence on one table (docs/architecture.md#the-exactly-once-protocol).

A model applies each writer's batches once, in the order the table committed them (read back from its
snapshots), with the semantics of each write (an UPDATE changes a row that is there, a lookup inserts a key that
is missing); the table's rows and its changelog must equal the model's, whatever the interleaving, the replays
and the crashes in between. Crashes here stop the apply at the protocol's fault points by raising (the process
state a kill -9 leaves on disk is the same: nothing after the point ran); tests/engine/test_exactly_once.py kills
real processes.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changelake.engine import apply as apply_module
from changelake.errors import BatchRefusedError
from changelake.storage.iceberg import Storage
from changelake.storage.summary import WriterPosition
from tests.helpers import sparkless_lake
from tests.specs import kv

TABLE = "w.t"
SPEC = kv(TABLE)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tables"

# Each writer's batches, in its own order; keys 1..6 so that the writers keep meeting on the same rows.
LANDED = [
    [{"op": "+I", "data": {"k": 1, "v": "l1"}}, {"op": "+I", "data": {"k": 2, "v": "l1"}}],
    [{"op": "+U", "data": {"k": 2, "v": "l2"}}, {"op": "-D", "data": {"k": 3}}],
    [{"op": "+I", "data": {"k": 4, "v": "l3"}}, {"op": "-D", "data": {"k": 1}}],
]
API_BATCHES = [
    [{"op": "+I", "data": {"k": 3, "v": "a1"}}, {"op": "+I", "data": {"k": 5, "v": "a1"}}],
    [{"op": "-D", "data": {"k": 2}}, {"op": "+U", "data": {"k": 6, "v": "a2"}}],
    [{"op": "+U", "data": {"k": 1, "v": "a3"}}],
]
STATEMENTS = [
    ("s1", "INSERT INTO w.t VALUES (5, 's1'), (6, 's1')"),
    ("s2", "UPDATE w.t SET v = 's2' WHERE k = 1"),
    ("s3", "DELETE FROM w.t WHERE k = 4"),
    ("s4", "UPDATE w.t SET v = 's4' WHERE k = 3"),
]
LOOKUPS = [[7, 1], [3, 4, 5], [6, 8]]  # 7 is no other writer's: the first lookup always inserts
WRITERS = {"landing": LANDED, "api": API_BATCHES, "sql": STATEMENTS, "lookup": LOOKUPS}


class Crash(BaseException):
    """The process ends at a fault point (a BaseException: nothing in the apply catches it)."""


@contextlib.contextmanager
def crash_at(point: str | None):
    def fault(at: str) -> None:
        if at == point:
            raise Crash(at)

    with mock.patch.object(apply_module, "fault", fault):
        yield


def land(home: Path, n: int) -> None:
    """Land the landing writer's batch ``n`` (once: a retry finds it there)."""
    landing = home / "landing" / TABLE
    landing.mkdir(parents=True, exist_ok=True)
    path = landing / f"{n}.jsonl"
    if not path.exists():
        path.write_text("".join(json.dumps(r) + "\n" for r in LANDED[n - 1]))


def run(lake, home: Path, writer: str, n: int) -> None:
    """Batch ``n`` (1-based) of ``writer``, done as that writer does it; a retry is the same call again."""
    if writer == "landing":
        land(home, n)
        lake.apply_pending(TABLE)
    elif writer == "api":
        lake.apply(TABLE, API_BATCHES[n - 1], batch_id=n)
    elif writer == "sql":
        key, statement = STATEMENTS[n - 1]
        lake.sql(statement, idempotency_key=key)
    else:
        lake.lookup_keys(TABLE, [{"k": k} for k in LOOKUPS[n - 1]], insert_if_not_exists=True)


def committed(lake, table: str = TABLE) -> list[tuple[int, WriterPosition]]:
    """The table's batches in commit order: (table batch id, writer position)."""
    pk = lake.storage.pk_table(lake.spec(table))
    return [(b.batch_id, b.position) for _, b in Storage.batch_history(pk)]


def model(
    order: list[WriterPosition], calls: dict[WriterPosition, int]
) -> tuple[dict[int, str | None], list[tuple[int, str, int, object]]]:
    """Rows and changelog (batch, change type, key, value) of the writers' batches applied once each in
    ``order``: last-row upserts and deletes, each write's own rule for what it reads. ``calls`` says which call
    a SQL or lookup batch came from (a call that writes nothing -- an UPDATE of a missing key, a lookup that
    finds every key -- takes no number of its writer); a landed or API batch's number is its call's."""
    rows: dict[int, str | None] = {}
    log: list[tuple[int, str, int, object]] = []

    def upsert(batch: int, k: int, v: str | None) -> None:
        if k in rows:
            log.extend([(batch, "-U", k, rows[k]), (batch, "+U", k, v)])
        else:
            log.append((batch, "+I", k, v))
        rows[k] = v

    def delete(batch: int, k: int) -> None:
        if k in rows:
            log.append((batch, "-D", k, rows.pop(k)))

    for batch, position in enumerate(order, start=1):
        n = calls.get(position, position.seq) - 1
        if position.writer in ("landing", "api"):
            for r in (LANDED if position.writer == "landing" else API_BATCHES)[n]:
                upsert(batch, r["data"]["k"], r["data"]["v"]) if r["op"] != "-D" else delete(
                    batch, r["data"]["k"]
                )
        elif position.writer == "lookup":
            for k in LOOKUPS[n]:
                if k not in rows:
                    upsert(batch, k, None)
        else:
            key, statement = STATEMENTS[n]
            if statement.startswith("INSERT"):
                for k in (5, 6):
                    upsert(batch, k, key)
            elif statement.startswith("UPDATE"):
                k = int(statement.rsplit("=", 1)[1])
                if k in rows:
                    upsert(batch, k, key)
            else:
                delete(batch, int(statement.rsplit("=", 1)[1]))
    return rows, log


def table_state(lake) -> tuple[dict[int, str | None], list[tuple[int, str, int, object]]]:
    rows = {r["k"]: r["v"] for r in lake.rows_arrow(TABLE).to_pylist()}
    log = [
        (r["_batch_id"], r["_change_type"], r["k"], r["v"]) for r in lake.changelog_arrow(TABLE).to_pylist()
    ]
    return rows, sorted(log, key=lambda e: (e[0], e[2], "-+".index(e[1][0])))


def check_against_model(lake, calls: dict[WriterPosition, int] | None = None) -> None:
    """Every writer's batches committed exactly once, in a gapless sequence per writer, and the table equal to
    the model of that commit order (``calls``: see :func:`model`)."""
    batches = committed(lake)
    assert [b for b, _ in batches] == list(range(1, len(batches) + 1))
    positions = [p for _, p in batches]
    for writer in WRITERS:
        seqs = [p.seq for p in positions if p.writer == writer]
        assert seqs == list(range(1, len(seqs) + 1)), (writer, positions)
    rows, log = model(positions, calls or {})
    assert table_state(lake) == (rows, sorted(log, key=lambda e: (e[0], e[2], "-+".index(e[1][0])))), (
        positions
    )


def fresh_lake(home: Path):
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    lake = sparkless_lake(home)
    (home / "tables" / f"{TABLE}.yaml").write_text(SPEC)
    lake.create_all()
    return lake


# --- any interleaving, with replays and crashes --------------------------------------------------------------
STEP = st.tuples(
    st.sampled_from(sorted(WRITERS)),
    st.sampled_from([None, None, None, "after-data-files", "after-pk-commit"]),
    st.booleans(),  # replay the writer's last batch right after
)


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=4, max_size=12))
def test_any_interleaving_applies_every_writers_batches_exactly_once(tmp_path, steps):
    home = tmp_path / "home"
    lake = fresh_lake(home)
    done = dict.fromkeys(WRITERS, 0)  # each writer's batches run to the end (committed, or found committed)
    crashed: dict[str, int] = {}  # a batch whose run crashed, run again at the writer's next turn
    calls: dict[WriterPosition, int] = {}  # which call each committed batch of a writer came from

    def note_call(writer: str, n: int, before: int) -> None:
        after = lake.writer_positions(TABLE).get(writer, 0)
        if after > before:
            calls[WriterPosition(writer, after)] = n

    for writer, crash, replay in steps:
        retry = writer in crashed
        n = crashed.pop(writer) if retry else done[writer] + 1
        if n > len(WRITERS[writer]):
            continue
        before = lake.writer_positions(TABLE).get(writer, 0)
        try:
            with crash_at(None if retry else crash):
                run(lake, home, writer, n)
        except Crash:
            crashed[writer] = n
            continue
        finally:
            note_call(writer, n, before)
        done[writer] = n
        if replay:  # the same call again: a no-op
            before = committed(lake)
            run(lake, home, writer, n)
            assert committed(lake) == before
    for writer, n in crashed.items():  # the crashed ones, retried once more
        before = lake.writer_positions(TABLE).get(writer, 0)
        run(lake, home, writer, n)
        note_call(writer, n, before)
    check_against_model(lake, calls)


# --- every pair of writers, a real kill -9 between ------------------------------------------------------------
def cli(env: dict[str, str], *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = dict(env, **({"CHANGELAKE_FAULT": fault} if fault else {}))
    return subprocess.run(
        [sys.executable, "-m", "changelake.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


def cli_run(env: dict[str, str], home: Path, writer: str, n: int, fault: str | None = None):
    """:func:`run` through the command line, in a process of its own."""
    if writer == "landing":
        land(home, n)
        return cli(env, "apply", TABLE, fault=fault)
    if writer == "api":
        path = home / f"api-{n}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in API_BATCHES[n - 1]))
        return cli(env, "apply", TABLE, "--file", str(path), "--batch-id", str(n), fault=fault)
    if writer == "sql":
        key, statement = STATEMENTS[n - 1]
        return cli(env, "sql", statement, "--idempotency-key", key, fault=fault)
    keys = home / f"keys-{n}.jsonl"
    keys.write_text("".join(json.dumps({"k": k}) + "\n" for k in LOOKUPS[n - 1]))
    return cli(env, "lookup", TABLE, "--keys-file", str(keys), "--insert-if-not-exists", fault=fault)


PAIRS = [(a, b) for a in sorted(WRITERS) for b in sorted(WRITERS) if a < b]


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_two_writers_with_a_kill_9_between_converge_to_one_application(home, cli_env, first, second):
    (home / "tables" / f"{TABLE}.yaml").write_text(SPEC)
    lake = sparkless_lake(home)
    calls: dict[WriterPosition, int] = {}

    def step(writer: str, n: int, fault: str | None = None) -> subprocess.CompletedProcess | None:
        """One call: the killed one through the command line in a process of its own, the others here."""
        before = lake.writer_positions(TABLE).get(writer, 0) if lake.storage.exists(lake.spec(TABLE)) else 0
        done = cli_run(cli_env, home, writer, n, fault) if fault else run(lake, home, writer, n)
        after = lake.writer_positions(TABLE).get(writer, 0)
        if after > before:
            calls[WriterPosition(writer, after)] = n
        return done

    step(first, 1)
    # The second writer is killed after its table commit, before its changelog commit; the first writer's
    # next batch rolls that changelog forward and takes the next table batch, then the killed one is re-run.
    killed = step(second, 1, fault="after-pk-commit")
    assert killed is not None and killed.returncode == -9, killed and killed.stderr[-2000:]
    for writer, n in ((first, 2), (second, 1), (second, 2), (first, 1)):  # (first, 1) again: a replay
        step(writer, n)
    positions = [p for _, p in committed(lake)]
    assert positions[:3] == [WriterPosition(first, 1), WriterPosition(second, 1), WriterPosition(first, 2)]
    check_against_model(lake, calls)


# --- the reproductions of issue 41, on the demo's shop.orders -----------------------------------------------
@pytest.fixture
def orders(home):
    """shop.orders as the demo has it (Debezium, ordered by source.lsn, quarantine) with landed batches 1-4
    applied, and 5-8 landed, not applied yet."""
    from changelake.inputs.datagen import generate

    shutil.copy(EXAMPLES / "shop.orders.yaml", home / "tables")
    lake = sparkless_lake(home)
    spec = lake.specs()["shop.orders"]
    generate(spec, home / "landing", 4)
    lake.apply_pending("shop.orders")
    generate(spec, home / "landing", 4)
    return lake


def test_a_sql_write_on_a_table_ordered_by_a_source_field_applies_and_never_quarantines(orders):
    lake = orders
    key = next(r["order_id"] for r in lake.rows_arrow("shop.orders").to_pylist())
    (deleted,) = lake.sql(f"DELETE FROM shop.orders WHERE order_id = {key}")
    assert (deleted.status, deleted.counts["deleted"], deleted.writer_seq) == ("applied", 1, 1)
    assert lake.lookup("shop.orders", {"order_id": key}) == []
    other = next(r["order_id"] for r in lake.rows_arrow("shop.orders").to_pylist())
    (updated,) = lake.sql(f"UPDATE shop.orders SET status = 'REFUNDED' WHERE order_id = {other}")
    assert updated.counts["updated"] == 1
    assert lake.lookup("shop.orders", {"order_id": other})[0]["status"] == "REFUNDED"
    (inserted,) = lake.sql(
        "INSERT INTO shop.orders VALUES (999001, 1, 2, 3, 4.50, 'x', 'CREATED', TIMESTAMP '2026-01-01 00:00:00')"
    )
    assert inserted.counts["inserted"] == 1 and lake.lookup("shop.orders", {"order_id": 999001})
    # Nothing was quarantined: the statements' records are applied in their own order, after the table's
    # batches, not ordered by the landed input's source.lsn.
    assert lake.dead_letters("shop.orders") == []
    # A DELETE of a key that is not there commits nothing, and says so as an UPDATE of it does.
    last = committed(lake, "shop.orders")
    (gone,) = lake.sql(f"DELETE FROM shop.orders WHERE order_id = {key}")
    (not_there,) = lake.sql(f"UPDATE shop.orders SET status = 'x' WHERE order_id = {key}")
    assert (gone.status, not_there.status) == ("nothing to write", "nothing to write")
    assert gone.note == not_there.note and committed(lake, "shop.orders") == last


def test_landed_batches_are_not_shadowed_by_sql_statements(orders):
    lake = orders
    for key in [r["order_id"] for r in lake.rows_arrow("shop.orders").to_pylist()][:3]:
        lake.sql(f"DELETE FROM shop.orders WHERE order_id = {key}")
    assert lake.writer_positions("shop.orders") == {"landing": 4, "sql": 3}
    (row,) = [r for r in lake.status() if r["table"] == "shop.orders"]
    assert row["pending_batches"] == 4 and row["last_batch"] == 7 and row["problem"] is None
    results = lake.apply_pending("shop.orders")
    assert [(r.writer, r.writer_seq, r.batch_id) for r in results] == [
        ("landing", n, n + 3) for n in range(5, 9)
    ]
    (row,) = [r for r in lake.status() if r["table"] == "shop.orders"]
    assert row["pending_batches"] == 0 and row["writers"] == {"landing": 8, "sql": 3}
    # A replay of the landed range is a no-op per batch, never "already applied from a different input".
    again = lake.apply_pending("shop.orders", from_batch=1)
    assert [r.status for r in again] == ["already-applied"] * 8
    assert [r.batch_id for r in again] == [1, 2, 3, 4, 8, 9, 10, 11]


def test_datagen_numbers_after_the_landing_writers_own_last_batch(home):
    from changelake.inputs.datagen import generate

    shutil.copy(EXAMPLES / "shop.customers.yaml", home / "tables")
    lake = sparkless_lake(home)
    spec = lake.specs()["shop.customers"]
    generate(spec, home / "landing", 2)
    lake.apply_pending("shop.customers")
    for n in range(3, 7):  # SQL batches: table batches 3..6, the sql writer's 1..4
        lake.sql(f"INSERT INTO shop.customers (customer_id, name) VALUES ({n}, 'n{n}')")
    for path in (home / "landing" / "shop.customers").glob("*.jsonl"):
        path.unlink()  # producers may clean up applied files: numbering goes on after the applied ones
    landed = generate(spec, home / "landing", 3, applied=lake.writer_positions("shop.customers")["landing"])
    assert [g.batch_id for g in landed] == [3, 4, 5]
    results = lake.apply_pending("shop.customers")
    assert [(r.writer_seq, r.batch_id) for r in results] == [(3, 7), (4, 8), (5, 9)]


def test_apply_options_of_one_file_need_the_file(home, cli_env, capfd):
    from changelake.cli import main

    (home / "tables" / f"{TABLE}.yaml").write_text(SPEC)
    base = ["--home", str(home), "--tables", str(home / "tables"), "apply", TABLE]
    for extra in (["--batch-id", "3"], ["--writer", "etl"], ["--target-columns", "k,v"]):
        assert main([*base, *extra]) == 2
        assert "go(es) with --file" in capfd.readouterr().err
    assert main([*base, "--file", str(home / "x.jsonl"), "--up-to", "2", "--batch-id", "1"]) == 2
    assert "do not go with --file" in capfd.readouterr().err


def test_writer_names_and_numbers_are_checked(home):
    lake = sparkless_lake(home)
    (home / "tables" / f"{TABLE}.yaml").write_text(SPEC)
    record = [{"op": "+I", "data": {"k": 1, "v": "x"}}]
    for reserved in ("sql", "lookup", "kafka"):
        with pytest.raises(Exception, match="reserved for changelake's own write paths"):
            lake.apply(TABLE, record, batch_id=1, writer=reserved)
    with pytest.raises(Exception, match="a writer name is"):
        lake.apply(TABLE, record, batch_id=1, writer="Bad Name")
    with pytest.raises(BatchRefusedError, match="etl batch 2 skips ahead; the last applied etl batch is 0"):
        lake.apply(TABLE, record, batch_id=2, writer="etl")
    assert lake.apply(TABLE, record, batch_id=1, writer="etl").writer_seq == 1
    assert lake.apply(TABLE, record, batch_id=1, writer="backfill").batch_id == 2  # a sequence of its own
    assert lake.writer_positions(TABLE) == {"etl": 1, "backfill": 1}
    # Staged API records go once the call returns: nothing under staging/ grows with the batches.
    assert not any(p.is_file() for p in (home / "staging").rglob("*"))
