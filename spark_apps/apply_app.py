"""spark-submit entrypoint: apply pending changelog batches exactly once.

spark-submit spark_apps/apply_app.py [namespace.table] [--up-to N]
spark-submit spark_apps/apply_app.py shop.orders --file batch.jsonl --batch-id 7
"""

import sys

from changelake.cli import main

if __name__ == "__main__":
    sys.exit(main(["apply", *sys.argv[1:]]))
