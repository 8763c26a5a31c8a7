"""spark-submit entrypoint: run changelake's Great Expectations suites and rebuild the Data Docs.

spark-submit spark_apps/quality_app.py [--drift-threshold 0] [--max-redelivery-share 0.5]
Exits 1 when an expectation of severity critical fails.
"""

import sys

from changelake.quality.runner import main

if __name__ == "__main__":
    sys.exit(main())
