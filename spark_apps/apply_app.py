"""spark-submit entrypoint: apply pending changelog batches exactly once.

spark-submit spark_apps/apply_app.py [namespace.table] [--up-to N] [--from-batch N]
spark-submit spark_apps/apply_app.py shop.orders --file batch.jsonl --batch-id 7

An option given an empty value (``--up-to ''``, as a templated Airflow argument renders when unset) is
dropped, so orchestrators can pass optional ranges positionally.
"""

import sys

from changelake import privacy
from changelake.cli import main, without_empty_args

if __name__ == "__main__":
    privacy.restrict()  # its files are this user's alone, whatever umask spark-submit or Airflow gave it
    sys.exit(main(["apply", *without_empty_args(sys.argv[1:], empty=("", "None"))]))
