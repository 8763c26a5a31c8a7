"""Entrypoint of the warm Spark SQL endpoint: Spark Connect and Thrift/JDBC on one Spark application, with
every changelake table, changelog and landed input as global temp views kept at the current snapshot.

python spark_apps/server_app.py [--poll-seconds S]     # foreground; stop with SIGTERM / Ctrl-C
infra/spark_server.sh start|stop|status                # background, as `make sql` / `make sql-stop` run it

Listens on SPARK_THRIFT_HOST (127.0.0.1), SPARK_THRIFT_PORT (10000) and SPARK_CONNECT_PORT (15002); the
master is CHANGELAKE_SPARK_MASTER (the script sets it from SPARK_MASTER).
"""

import sys

from changelake import privacy
from changelake.runtime.server import main

if __name__ == "__main__":
    privacy.restrict()  # its files are this user's alone, whatever umask spark-submit or Airflow gave it
    sys.exit(main(sys.argv[1:]))
