"""spark-submit entrypoint: run dbt on changelake's tables in this Spark application.

spark-submit spark_apps/dbt_app.py build            # any dbt arguments; default: build
spark-submit spark_apps/dbt_app.py docs generate

Empty arguments, and options given an empty value (``--select ''``, as a templated Airflow argument
renders when unset), are dropped.
"""

import sys

from changelake.dbt_runner import main


def _without_empty(args: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(args):
        if args[i] == "":
            i += 1
        elif args[i].startswith("--") and i + 1 < len(args) and args[i + 1] == "":
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


if __name__ == "__main__":
    sys.exit(main(_without_empty(sys.argv[1:])))
