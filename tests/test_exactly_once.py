"""Crash (kill -9) at each stage of an apply, then re-run: exactly one application. Racing appliers too.

These run the real CLI in subprocesses (a JVM each), so they are the slowest tests of the suite.
"""

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SPEC = """name: t.kv
columns:
  - {name: k, type: INT}
  - {name: v, type: STRING}
primary_key: [k]
options: {bucket.num: 2}
"""


def land(home, batches):
    landing = home / "landing" / "t.kv"
    landing.mkdir(parents=True, exist_ok=True)
    for batch_id, records in batches.items():
        (landing / f"{batch_id:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def run_cli(env, *args, fault=None):
    env = dict(env, **({"CHANGELAKE_FAULT": fault} if fault else {}))
    return subprocess.run(
        [sys.executable, "-m", "changelake.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


def read_state(home):
    """Rows and changelog read with pyiceberg alone (no Spark): what a consumer would see."""
    from changelake.config import load_settings
    from changelake.storage import Storage

    storage = Storage(load_settings(home=home, tables_dir=home / "tables"))
    rows = storage.catalog.load_table("t.kv").scan().to_arrow()
    log = storage.catalog.load_table("t.kv__changelog").scan().to_arrow().sort_by("_log_offset")
    return (
        sorted(zip(rows.column("k").to_pylist(), rows.column("v").to_pylist(), strict=True)),
        list(
            zip(
                log.column("_log_offset").to_pylist(),
                log.column("_change_type").to_pylist(),
                log.column("k").to_pylist(),
                log.column("_batch_id").to_pylist(),
                strict=True,
            )
        ),
    )


BATCHES = {
    1: [{"op": "+I", "data": {"k": 1, "v": "a"}}, {"op": "+I", "data": {"k": 2, "v": "b"}}],
    2: [{"op": "+U", "data": {"k": 1, "v": "a2"}}, {"op": "-D", "data": {"k": 2}}],
}
EXPECTED = (
    [(1, "a2")],
    [(0, "+I", 1, 1), (1, "+I", 2, 1), (2, "-U", 1, 2), (3, "+U", 1, 2), (4, "-D", 2, 2)],
)


@pytest.mark.parametrize("fault", ["after-data-files", "after-pk-commit", "before-changelog-commit"])
def test_kill_9_at_each_stage_then_rerun_converges_to_one_application(lake, home, cli_env, fault):
    (home / "tables" / "t.kv.yaml").write_text(SPEC)
    land(home, BATCHES)
    crashed = run_cli(cli_env, "apply", "t.kv", fault=fault)  # a real process, killed with SIGKILL mid-apply
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    # Batch 1 is all-or-nothing: before the PK commit nothing is visible; after it, the rows are, and the
    # changelog (committed second) is still empty until a re-run rolls it forward.
    pk_committed = fault != "after-data-files"
    assert read_state(home) == ([(1, "a"), (2, "b")] if pk_committed else [], [])
    # Recovery runs in this process's warm Spark; the protocol is the same as the CLI's.
    lake.apply_pending("t.kv")
    assert read_state(home) == EXPECTED
    replay = lake.apply("t.kv", file=home / "landing/t.kv/0002.jsonl", batch_id=2)
    assert replay.status == "already-applied"
    assert read_state(home) == EXPECTED


def test_two_racing_appliers_apply_each_batch_once(home, cli_env):
    (home / "tables" / "t.kv.yaml").write_text(SPEC)
    land(
        home,
        {
            b: [{"op": "+I", "data": {"k": b, "v": f"v{b}"}}, {"op": "+U", "data": {"k": 0, "v": f"v{b}"}}]
            for b in range(1, 5)
        },
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "changelake.cli", "apply", "t.kv"],
            env=cli_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n---\n".join(o[1][-2500:] for o in outs)
    rows, log = read_state(home)
    assert rows == [(0, "v4"), (1, "v1"), (2, "v2"), (3, "v3"), (4, "v4")]
    # 4 batches x (+I new key, and +I or -U/+U for key 0): gapless offsets, each batch exactly once
    assert [entry[0] for entry in log] == list(range(len(log)))
    assert [entry[3] for entry in log] == [1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]


def test_out_of_order_batch_id_is_refused(lake, home):
    from changelake.errors import BatchRefusedError

    (home / "tables" / "t.kv.yaml").write_text(SPEC)
    land(home, {1: BATCHES[1], 3: BATCHES[2]})
    with pytest.raises(
        BatchRefusedError, match="batch 3 skips ahead; the last applied batch is 1, so the next must be 2"
    ):
        lake.apply_pending("t.kv")
    assert read_state(home)[0] == [(1, "a"), (2, "b")]
