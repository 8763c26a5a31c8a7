"""spark-submit entrypoint: run changelake's Great Expectations suites and rebuild the Data Docs.

spark-submit spark_apps/quality_app.py [--drift-threshold 0] [--max-redelivery-share 0.5]
Exits 1 when an expectation of severity critical fails.
"""

import sys

from changelake import privacy
from changelake.quality.runner import main

if __name__ == "__main__":
    privacy.restrict()  # its files are this user's alone, whatever umask spark-submit or Airflow gave it
    sys.exit(main())
