"""spark-submit entrypoint: run dbt on changelake's tables in this Spark application.

spark-submit spark_apps/dbt_app.py build            # any dbt arguments; default: build
spark-submit spark_apps/dbt_app.py docs generate

Empty arguments, and options given an empty value (``--select ''``, as a templated Airflow argument
renders when unset), are dropped.
"""

import sys

from changelake import privacy
from changelake.cli import without_empty_args
from changelake.runtime.dbt_runner import main

if __name__ == "__main__":
    privacy.restrict()  # its files are this user's alone, whatever umask spark-submit or Airflow gave it
    sys.exit(main(without_empty_args(sys.argv[1:])))
