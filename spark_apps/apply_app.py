"""spark-submit entrypoint: apply pending changelog batches exactly once.

spark-submit spark_apps/apply_app.py [namespace.table] [--up-to N] [--from-batch N]
spark-submit spark_apps/apply_app.py shop.orders --file batch.jsonl --batch-id 7

An option given an empty value (``--up-to ''``, as a templated Airflow argument renders when unset) is
dropped, so orchestrators can pass optional ranges positionally.
"""

import sys

from changelake.cli import main


def _without_empty_options(args: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(args):
        if args[i].startswith("--") and i + 1 < len(args) and args[i + 1] in ("", "None"):
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


if __name__ == "__main__":
    sys.exit(main(["apply", *_without_empty_options(sys.argv[1:])]))
