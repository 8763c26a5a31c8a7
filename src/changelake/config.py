"""The one place that holds changelake's configuration.

Layers, later wins: built-in defaults < config file < environment variables < explicit keyword arguments.

=========================  =====================================  ===============================================
environment variable       config-file key                        default
=========================  =====================================  ===============================================
``CHANGELAKE_HOME``        (n/a)                                  found as :func:`find_home` finds it
``CHANGELAKE_CONFIG``      (n/a)                                  ``$CHANGELAKE_HOME/changelake.yaml`` if present
``CHANGELAKE_TABLES``      ``tables_dir``                         ``$CHANGELAKE_HOME/tables``
``CHANGELAKE_LANDING``     ``landing_dir`` (a path or ``s3://…``)  ``$CHANGELAKE_HOME/landing``
``CHANGELAKE_WAREHOUSE``   ``warehouse`` (``file://…``, ``s3://…``)  ``file://$CHANGELAKE_HOME/warehouse``
``CHANGELAKE_CATALOG_URI`` ``catalog_uri``                        ``sqlite:///$CHANGELAKE_HOME/catalog.db``
``CHANGELAKE_CATALOG_TYPE````catalog_type`` (``sql`` | ``rest``)  ``sql``
``CHANGELAKE_SPARK_MASTER````spark_master``                       ``local[2]``
``CHANGELAKE_SPARK_REMOTE````spark_remote`` (``sc://host:port``)    unset: each process starts its own Spark
``CHANGELAKE_DBT_PROJECT`` ``dbt_project_dir``                    the checkout's ``dbt_project/`` (a wheel's copy)
``CHANGELAKE_EXPECTATIONS````expectations_dir``                   the checkout's ``expectations/`` (a wheel's copy)
``CHANGELAKE_JARS``        ``jars_dir``                           the checkout's ``.cache/jars`` (``make setup``)
``CHANGELAKE_MAX_RECORD_BYTES`` (n/a)                             16 MiB: the longest landed line read
(n/a)                      ``spark_conf`` (mapping)               ``{}``
(n/a)                      ``catalog_properties`` (mapping)       ``{}`` (e.g. credentials for a REST catalog)
``AWS_ENDPOINT_URL``, …    ``storage_options`` (mapping)          ``{}``: the object store of ``s3://`` locations
=========================  =====================================  ===============================================

``storage_options`` take the standard AWS names (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``); the environment's variables of those names win over the file
(:func:`changelake.objectstore.storage_options`).

The home, unless ``--home`` or ``CHANGELAKE_HOME`` names it, is found as dbt finds its project: the nearest
directory from the current one up that holds a ``.changelake/`` home or a ``changelake.yaml`` project file
(its settings come first, before the home's own config file), else ``~/.changelake``.

Credentials never live in the repository: pass them through the environment or a config file outside it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from changelake import objectstore
from changelake.errors import ConfigError
from changelake.objectstore import ObjectPath

_ENV_KEYS = {
    "tables_dir": "CHANGELAKE_TABLES",
    "landing_dir": "CHANGELAKE_LANDING",
    "warehouse": "CHANGELAKE_WAREHOUSE",
    "catalog_uri": "CHANGELAKE_CATALOG_URI",
    "catalog_type": "CHANGELAKE_CATALOG_TYPE",
    "spark_master": "CHANGELAKE_SPARK_MASTER",
    "spark_remote": "CHANGELAKE_SPARK_REMOTE",
    "dbt_project_dir": "CHANGELAKE_DBT_PROJECT",
    "expectations_dir": "CHANGELAKE_EXPECTATIONS",
    "dbt_schema": "CHANGELAKE_DBT_SCHEMA",
    "datadocs_assets": "CHANGELAKE_DATADOCS_ASSETS",
    "jars_dir": "CHANGELAKE_JARS",
}

#: The home directory a project keeps beside its files, and the project file that marks a project without one.
HOME_DIR = ".changelake"
PROJECT_FILE = "changelake.yaml"
#: Settings naming directories: a relative path in a config file is relative to the file's directory.
_PATH_KEYS = ("tables_dir", "landing_dir", "dbt_project_dir", "expectations_dir", "datadocs_assets")

#: The checkout this package runs from (``src/changelake/config.py`` -> the repository root), if it runs from one.
CHECKOUT = Path(__file__).resolve().parents[2]


def _project_folder(name: str) -> Path:
    """The default of a project folder (``dbt_project``, ``expectations``): the checkout's when the package runs
    from one, else the copy the wheel carries (``changelake/_project/<name>``, pyproject's force-include)."""
    checkout = CHECKOUT / name
    if (CHECKOUT / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    return Path(__file__).resolve().parent / "_project" / name


@dataclass(frozen=True)
class Settings:
    """Resolved configuration shared by the apps, the CLI, the Python API and the tests."""

    home: Path
    tables_dir: Path
    landing_dir: Path | ObjectPath  # an ObjectPath when the landing zone is s3://…
    warehouse: str
    catalog_uri: str
    catalog_type: str = "sql"
    catalog_name: str = "changelake"
    spark_master: str = "local[2]"
    spark_remote: str = ""  # a warm Spark Connect server (sc://host:port) to run Spark work on instead
    spark_conf: dict[str, str] = field(default_factory=dict)
    catalog_properties: dict[str, str] = field(default_factory=dict, repr=False)
    # the object store of s3:// locations, by AWS names (objectstore.storage_options); may hold credentials
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)
    dbt_project_dir: Path = field(default_factory=lambda: _project_folder("dbt_project"))  # + profiles.yml
    expectations_dir: Path = field(default_factory=lambda: _project_folder("expectations"))  # marts.yaml
    dbt_schema: str = "analytics"  # the schema dbt builds the marts in (dbt's profile reads it too)
    # the npm packages Data Docs load (infra/datadocs_assets.sh); "" = the checkout's .venv/datadocs-assets
    datadocs_assets: str = ""
    # the pinned JVM jars (infra/jars.sh) and changelake's own jar; "" = the checkout's .cache/jars
    jars_dir: str = ""

    # how the home was chosen, for `changelake status` (--home, CHANGELAKE_HOME, found from a directory, default)
    home_from: str = field(default="given", compare=False)

    @property
    def metastore_dir(self) -> Path:
        """Derby metastore and spark-warehouse for dbt's own tables."""
        return self.home / "metastore"

    @property
    def reports_dir(self) -> Path:
        return self.home / "reports"

    @property
    def staging_dir(self) -> Path:
        """Decoded batches waiting for Spark (one file per apply attempt; never read by a later attempt)."""
        return self.home / "staging"


def load_settings(**overrides: Any) -> Settings:
    """Build :class:`Settings` from defaults, the config files, the environment and ``overrides``."""
    given = overrides.pop("home", None)
    project_file = None
    if given:
        home, home_from = Path(given), "given (--home)"
    elif os.environ.get("CHANGELAKE_HOME"):
        home, home_from = Path(os.environ["CHANGELAKE_HOME"]), "$CHANGELAKE_HOME"
    else:
        home, project_file, home_from = find_home(Path.cwd())
    home = home.expanduser().resolve()
    if home.exists() and not home.is_dir():
        raise ConfigError(f"the home {home} ({home_from}) is not a directory")
    values: dict[str, Any] = {
        "tables_dir": home / "tables",
        "landing_dir": home / "landing",
        "warehouse": (home / "warehouse").as_uri(),
        "catalog_uri": f"sqlite:///{home / 'catalog.db'}",
        "dbt_project_dir": _project_folder("dbt_project"),
        "expectations_dir": _project_folder("expectations"),
    }
    if project_file is not None:
        values.update(_read_config_file(project_file, explicit=True))
    config_path = os.environ.get("CHANGELAKE_CONFIG") or home / "changelake.yaml"
    values.update(_read_config_file(Path(config_path), explicit="CHANGELAKE_CONFIG" in os.environ))
    for key, env in _ENV_KEYS.items():
        if os.environ.get(env):
            values[key] = os.environ[env]
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        values["storage_options"] = objectstore.storage_options(values.get("storage_options"))
    except ValueError as e:
        raise ConfigError(f"storage_options: {e}") from None
    for key in ("tables_dir", "landing_dir", "dbt_project_dir", "expectations_dir"):
        if key == "landing_dir" and objectstore.is_object_location(str(values[key])):
            values[key] = objectstore.Store(values["storage_options"]).path(str(values[key]))
            continue
        values[key] = Path(values[key]).expanduser().resolve()
    if values.get("catalog_type", "sql") not in ("sql", "rest"):
        raise ConfigError(f"catalog_type must be 'sql' or 'rest', got {values['catalog_type']!r}")
    return Settings(home=home, home_from=home_from, **values)


def find_home(start: Path) -> tuple[Path, Path | None, str]:
    """The home when neither ``--home`` nor ``CHANGELAKE_HOME`` names one, found as dbt finds its project: the
    nearest directory from ``start`` up that holds a ``.changelake/`` directory or a ``changelake.yaml``
    project file; its ``.changelake/`` is the home (made on first use) and its project file, if any, is read
    before the home's own config file. Inside a ``.changelake/`` directory, that directory is the home.
    Else ``~/.changelake``. Returns the home, the project file (or None) and how the home was found."""
    start = start.resolve()
    for directory in (start, *start.parents):
        if directory.name == HOME_DIR:
            return directory, None, f"found: {start} is inside it"
        project = directory / PROJECT_FILE
        has_project = project.is_file()
        if (directory / HOME_DIR).is_dir() or has_project:
            marker = PROJECT_FILE if has_project else HOME_DIR
            return directory / HOME_DIR, project if has_project else None, f"found: {directory / marker}"
    return Path.home() / HOME_DIR, None, "default: no .changelake/ or changelake.yaml here or above"


_FILE_KEYS = {
    "tables_dir",
    "landing_dir",
    "warehouse",
    "catalog_uri",
    "catalog_type",
    "catalog_name",
    "spark_master",
    "spark_remote",
    "spark_conf",
    "catalog_properties",
    "storage_options",
    "dbt_project_dir",
    "expectations_dir",
    "dbt_schema",
    "datadocs_assets",
    "jars_dir",
}


def _read_config_file(path: Path, explicit: bool) -> dict[str, Any]:
    """The settings of one config file; a relative directory in it is relative to the file's directory (so a
    project file means the same wherever the command runs from)."""
    if not path.exists():
        if explicit:
            raise ConfigError(f"CHANGELAKE_CONFIG points to {path}, which does not exist")
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        mark = getattr(e, "problem_mark", None)  # where YAML stopped understanding the file
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        reason = getattr(e, "problem", None) or getattr(e, "strerror", None) or type(e).__name__
        raise ConfigError(f"{where}: cannot read the settings ({reason})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    unknown = set(data) - _FILE_KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown settings {sorted(unknown)}; known: {sorted(_FILE_KEYS)}")
    for key in ("spark_conf", "catalog_properties", "storage_options"):
        if key in data:
            data[key] = {str(k): str(v) for k, v in (data[key] or {}).items()}
    for key in _PATH_KEYS:
        if isinstance(data.get(key), str) and data[key]:
            data[key] = str(path.parent / Path(data[key]).expanduser())
    return data


# --- tuning: the engine's limits, read when used ------------------------------------------------------------
#: Each limit: (environment variable, default, smallest allowed value). Environment variables, not
#: :class:`Settings` fields: batches are planned, decoded and merged wherever a process applies them (the CLI,
#: the apply service, ``spark-submit`` apps and their Python workers, the API), which all share the
#: environment. Read at each use, never at import, so a test or a long-lived process that sets one sees it.
TUNING: dict[str, tuple[str, int | float, int]] = {
    # a batch of at most this many messages is decoded and merged in the applying process, no Spark job
    "local_apply_records": ("CHANGELAKE_LOCAL_APPLY_RECORDS", 10_000, 0),
    # ... if the buckets it rewrites hold at most this many bytes
    "local_apply_bytes": ("CHANGELAKE_LOCAL_APPLY_BYTES", 64 << 20, 0),
    # ... and the files it must read (beyond the rows this process keeps) at most this many
    "local_read_bytes": ("CHANGELAKE_LOCAL_READ_BYTES", 512 << 20, 0),
    # a compaction whose partitions' files (the rewritten buckets', the merged deltas', their delete files')
    # hold more than this many bytes runs in Spark tasks, one per bucket, when a Spark session is at hand
    "spark_compact_bytes": ("CHANGELAKE_SPARK_COMPACT_BYTES", 512 << 20, 0),
    # the rows of files this process wrote or read, kept for the next merge (MiB; least recently used out)
    "kept_rows_mb": ("CHANGELAKE_KEPT_ROWS_MB", 1024, 0),
    # JSON lines are planned in ranges of about this many bytes ...
    "decode_range_bytes": ("CHANGELAKE_DECODE_RANGE_BYTES", 4 << 20, 1),
    # ... a decode task reads consecutive ranges of its share as one, up to this many bytes
    "decode_max_range_bytes": ("CHANGELAKE_DECODE_MAX_RANGE_BYTES", 64 << 20, 1),
    # a Parquet/Avro file is read in tasks of about this many rows
    "decode_range_rows": ("CHANGELAKE_DECODE_RANGE_ROWS", 1 << 20, 1),
    # the longest landed line (one source message); a longer one is a bad record, found without reading it
    "max_record_bytes": ("CHANGELAKE_MAX_RECORD_BYTES", 16 << 20, 1),
    # 0 turns off the column-wise JSON decode (every record through the per-message reader)
    "fast_json": ("CHANGELAKE_FAST_JSON", 1, 0),
    # quality frames with at most this many rows are validated by GX's pandas engine, larger ones on Spark
    "quality_local_rows": ("CHANGELAKE_QUALITY_LOCAL_ROWS", 100_000, 0),
    # the Data Docs keep the validations of this many quality runs, the latest (older ones are deleted)
    "datadocs_runs": ("CHANGELAKE_DATADOCS_RUNS", 10, 1),
    # the SQL endpoint: 0 skips the dbt build of its warm-up
    "server_warm_dbt": ("CHANGELAKE_SERVER_WARM_DBT", 1, 0),
    # the SQL endpoint: seconds between polls of the tables' snapshots (its views follow new batches)
    "server_poll_seconds": ("CHANGELAKE_SERVER_POLL_SECONDS", 1.0, 0),
    # the SQL endpoint: a Thrift statement running longer is cancelled (seconds; 0: no limit)
    "server_statement_timeout": ("CHANGELAKE_SERVER_STATEMENT_TIMEOUT", 300, 0),
    # the SQL endpoint: the serialized results one statement may collect to the driver (MiB)
    "server_max_result_mb": ("CHANGELAKE_SERVER_MAX_RESULT_MB", 512, 1),
    # the SQL endpoint: 1 = its guard appends every Thrift statement's plan kinds to spark-server/guard-record.tsv
    "server_guard_record": ("CHANGELAKE_SERVER_GUARD_RECORD", 0, 0),
}

#: The longest landed line (one source message) read when ``CHANGELAKE_MAX_RECORD_BYTES`` is unset.
DEFAULT_MAX_RECORD_BYTES = TUNING["max_record_bytes"][1]


def tuned(name: str) -> Any:
    """The limit ``name`` of :data:`TUNING`: its environment variable if set, else its default (an int, or a
    float for a limit whose default is one)."""
    variable, default, smallest = TUNING[name]
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    if isinstance(default, float):
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not smallest <= value < 1e9:  # also refuses nan
            raise ConfigError(f"{variable} must be a number of at least {smallest}, got {text[:40]!r}")
        return value
    if not text.isascii() or not text.isdigit() or not smallest <= int(text) < 2**62:
        raise ConfigError(f"{variable} must be a whole number of at least {smallest}, got {text[:40]!r}")
    return int(text)


def max_record_bytes() -> int:
    """The most bytes one landed line may hold (its newline not counted): ``CHANGELAKE_MAX_RECORD_BYTES``,
    else 16 MiB. A longer line is a bad record, found without reading it whole."""
    return tuned("max_record_bytes")
