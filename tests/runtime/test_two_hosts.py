"""Two hosts that share no disk, on one machine: a Spark standalone worker in a network namespace of its own
(reached over a veth pair, as another host is over a network) and in a mount namespace where the driver's
directories are covered by an empty file system. The driver applies, compacts and reads a table whose warehouse
and landing zone are on the S3 endpoint, through that worker's executors; the table must equal the same batches
applied in one process, and nothing of it may have been read from the driver's disk by an executor.

Needs root (``ip netns``, ``mount``); skipped elsewhere."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator

import pytest

from changelake.config import load_settings
from changelake.runtime import jvm
from tests.helpers import REPO, running_service

pytestmark = [pytest.mark.slow, pytest.mark.integration]
BIN = REPO / ".venv" / "bin"
#: Spark's own INFO lines, left out of a failure's message.
SPARK_INFO = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ")


def _can_make_hosts() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        return False
    probe = f"clprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return made.returncode == 0


@contextlib.contextmanager
def second_host() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair on a /30 of its own: (namespace, this host's
    address on the link, the other host's address)."""
    tag = os.getpid() % 100000
    namespace, here, there = f"clhost{tag}", f"cla{tag}", f"clb{tag}"
    net = f"10.{200 + (tag >> 8) % 50}.{tag % 256}"
    mine, theirs = f"{net}.1", f"{net}.2"
    steps = [
        ["ip", "netns", "add", namespace],
        ["ip", "link", "add", here, "type", "veth", "peer", "name", there],
        ["ip", "link", "set", there, "netns", namespace],
        ["ip", "addr", "add", f"{mine}/30", "dev", here],
        ["ip", "link", "set", here, "up"],
        ["ip", "netns", "exec", namespace, "ip", "addr", "add", f"{theirs}/30", "dev", there],
        ["ip", "netns", "exec", namespace, "ip", "link", "set", there, "up"],
        ["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"],
    ]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        yield namespace, mine, theirs
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


#: The driver's program: apply what is landed, compact the table whole, read it back through Spark.
DRIVER = textwrap.dedent(
    """
    import json, sys
    from changelake import ChangeLake
    lake = ChangeLake()
    applied = [r.status for r in lake.apply_pending("shop.orders")]
    lake.maintain("shop.orders", full=True, expiry=False)
    files = lake.storage.table_files(lake.storage.pk_table(lake.spec("shop.orders")))
    merged_on_read = [f.path for f in files if f.is_delete or f.path.rsplit("/", 1)[-1].startswith("delta-")]
    rows = lake.rows("shop.orders").collect()
    executors = lake.spark.sparkContext._jsc.sc().getExecutorMemoryStatus().keySet().toString()
    print("RESULT " + json.dumps({"applied": applied, "rows": len(rows), "executors": executors,
                                  "merged_on_read": merged_on_read, "files": len(files)}))
    """
)


def stored(env: dict[str, str]) -> tuple[list, list]:
    """The table's rows and changelog as pyiceberg reads them (an engine changelake did not write), in a
    process of its own with ``env``'s settings."""
    script = textwrap.dedent(
        """
        import json
        from changelake.config import load_settings
        from changelake.spec import load_specs
        from changelake.storage.iceberg import Storage
        settings = load_settings()
        storage = Storage(settings)
        spec = load_specs(settings.tables_dir)["shop.orders"]
        rows = storage.pk_table(spec).scan().to_arrow().drop_columns(["_bucket"]).to_pylist()
        log = storage.changelog_table(spec).scan().to_arrow().drop_columns(["_commit_timestamp"]).to_pylist()
        key = lambda r: sorted((k, str(v)) for k, v in r.items())
        rows = sorted(rows, key=key)
        log = sorted(log, key=lambda r: (r["_batch_id"], r["_bucket"], r["_log_offset"]))
        print(json.dumps([rows, log], default=str))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows, log = json.loads(out.stdout)
    return rows, log


@pytest.mark.skipif(not _can_make_hosts(), reason="needs root and `ip netns` (network namespaces)")
def test_a_worker_that_shares_no_disk_or_network_applies_compacts_and_reads_a_table_on_s3(tmp_path):
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    host_a.mkdir()
    host_b.mkdir()
    (host_a / "tables").mkdir()
    shutil.copy(REPO / "examples" / "tables" / "shop.orders.yaml", host_a / "tables")
    (host_a / "driver.py").write_text(DRIVER)
    with second_host() as (namespace, address_a, address_b):
        s3 = {"S3_DIR": str(host_a / "s3"), "S3_HOST": address_a}
        with running_service("s3.sh", s3, host_a / "s3" / "s3.env") as endpoint:
            assert endpoint["AWS_ENDPOINT_URL"].startswith(f"http://{address_a}:")
            prefix = f"s3://changelake/t-{uuid.uuid4().hex[:12]}"
            base = {
                k: v for k, v in os.environ.items() if not k.startswith(("CHANGELAKE_", "AWS_", "SPARK_"))
            }
            base.update({k: v for k, v in endpoint.items() if k.startswith("AWS_")})
            envs = {}
            for run in ("one-process", "cluster"):
                envs[run] = {
                    **base,
                    "CHANGELAKE_HOME": str(host_a / run),
                    "CHANGELAKE_TABLES": str(host_a / "tables"),
                    "CHANGELAKE_WAREHOUSE": f"{prefix}/{run}/warehouse",
                    "CHANGELAKE_LANDING": f"{prefix}/{run}/landing",
                }
                # A large first batch, then a small one that is merged on read (a delta and delete files)
                for records in ("400", "12"):
                    generated = subprocess.run(
                        [sys.executable, "-m", "changelake.cli", "datagen", "--batches", "1", "--records", records],
                        env=envs[run], capture_output=True, text=True, timeout=300,
                    )  # fmt: skip
                    assert generated.returncode == 0, generated.stderr[-3000:]
            one = subprocess.run(
                [sys.executable, "-m", "changelake.cli", "apply"], env=envs["one-process"], capture_output=True,
                text=True, timeout=300,
            )  # fmt: skip
            assert one.returncode == 0, one.stderr[-3000:]

            port = free_port(address_a)
            cluster = {
                **envs["cluster"],
                "SPARK_CLUSTER_DIR": str(host_b / "spark-cluster"),
                "SPARK_MASTER_HOST": address_a,
                "SPARK_WORKER_HOST": address_b,
                "SPARK_WORKER_NETNS": namespace,
                "SPARK_WORKER_HIDE": str(host_a),
                "SPARK_MASTER_PORT": str(port),
                "SPARK_MASTER_WEBUI_PORT": str(free_port(address_a)),
                "SPARK_WORKER_WEBUI_PORT": str(free_port(address_a)),
                "SPARK_WORKER_MEMORY": "2g",
            }
            script = REPO / "infra" / "spark_cluster.sh"
            try:
                subprocess.run(
                    [str(script), "start"], env=cluster, check=True, timeout=180, capture_output=True
                )
                worker = int((host_b / "spark-cluster" / "worker.pid").read_text())
                # The worker's view of the machine: the driver's directory is empty there, and the driver's
                # address on its loopback answers nothing (another host's loopback).
                seen = subprocess.run(
                    ["nsenter", "-t", str(worker), "-m", "-n", "ls", "-A", str(host_a)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                assert seen.stdout.strip() == "", seen.stdout
                python = str(BIN / "python")
                # spark-submit starts the driver's JVM: the pinned jars go in as --jars (docs/operations.md)
                jars = ",".join(str(j) for j in jvm.spark_jars(load_settings()))
                submitted = subprocess.run(
                    [str(BIN / "spark-submit"), "--master", f"spark://{address_a}:{port}",
                     "--conf", f"spark.driver.host={address_a}", "--conf", f"spark.driver.bindAddress={address_a}",
                     "--conf", f"spark.pyspark.python={python}", "--conf", "spark.executor.memory=1g",
                     "--jars", jars, str(host_a / "driver.py")],
                    env={
                        **envs["cluster"],
                        "PYSPARK_PYTHON": python,
                        "CHANGELAKE_LOCAL_APPLY_RECORDS": "0",  # batches decoded and merged in Spark tasks
                        "CHANGELAKE_SPARK_COMPACT_BYTES": "0",  # and the compaction's buckets rewritten there
                    },
                    capture_output=True, text=True, timeout=900,
                )  # fmt: skip
            finally:
                subprocess.run([str(script), "stop"], env=cluster, timeout=60, capture_output=True)
            log = submitted.stdout + submitted.stderr
            (tmp_path / "driver.log").write_text(log)
            errors = [x for x in log.splitlines() if not SPARK_INFO.match(x) and not x.startswith("\tat ")]
            assert submitted.returncode == 0, (
                "\n".join(errors)[-6000:] + f"\n(all of it: {tmp_path}/driver.log)"
            )
            (line,) = [x for x in submitted.stdout.splitlines() if x.startswith("RESULT ")]
            result = json.loads(line.removeprefix("RESULT "))
            assert result["applied"] == ["applied", "applied"], log[-3000:]
            assert "in this process" not in log  # batches and compaction ran in Spark tasks
            # Batch 2 was merged on read; the compaction folded its delta and delete files into the buckets.
            compacted = [x for x in log.splitlines() if "compacted 1 partition(s) whole" in x]
            assert compacted and compacted[-1].endswith("Spark task(s)"), log[-3000:]
            assert result["merged_on_read"] == [] and result["files"] > 0, result
            # The executors ran on the other host: the worker's directory there holds their logs.
            assert address_b in result["executors"], result
            assert any((host_b / "spark-cluster" / "work").glob("app-*/*/stderr"))

            cluster_rows, cluster_log = stored(envs["cluster"])
            local_rows, local_log = stored(envs["one-process"])
            assert result["rows"] == len(local_rows) > 100
            assert cluster_rows == local_rows
            assert cluster_log == local_log and {r["_change_type"] for r in local_log} >= {"+I", "-U", "+U"}
