"""The GX file project under ``$CHANGELAKE_HOME/quality/gx``: written atomically, rebuilt when broken.

changelake generates this project (its configuration here, its suites, validation definitions and
checkpoints in :mod:`changelake.quality.runner` on every run), so nothing in it is precious except the
validation results the Data Docs list. GX writes its files with ``open(path, "w")``: a process stopped
mid-write (``make airflow-stop`` during a quality run) left ``great_expectations.yml`` at 0 bytes, and every
later run failed to load it. Here:

* every file GX writes goes through :mod:`changelake.atomic` (a temporary file renamed over the target):
  ``great_expectations.yml`` through :class:`AtomicFileDataContext`, the stores (suites, validation
  definitions, checkpoints, validation results) and the Data Docs pages through
  :class:`AtomicTupleFilesystemStoreBackend`, which the generated configuration names;
* :func:`open_context` checks the project before GX loads it. An empty or unparsable configuration, a store
  file that is not JSON or a damaged store id is replaced (configuration) or removed (the rest is written
  again by the run), with a :class:`GXProjectRepaired` warning naming the file.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from great_expectations.data_context.data_context.file_data_context import FileDataContext
from great_expectations.data_context.store.tuple_store_backend import TupleFilesystemStoreBackend

from changelake.atomic import atomic_open, atomic_write_text, remove_stale_temporaries

GX_YML = "great_expectations.yml"
#: The store directories (relative to the project) and whether GX keeps a ``.ge_store_backend_id`` there.
STORES = {
    "expectations_store": ("ExpectationsStore", "expectations/"),
    "validation_results_store": ("ValidationResultsStore", "uncommitted/validations/"),
    "checkpoint_store": ("CheckpointStore", "checkpoints/"),
    "validation_definition_store": ("ValidationDefinitionStore", "validation_definitions/"),
}
DATA_DOCS_DIR = "uncommitted/data_docs/local_site/"
_STORE_ID = re.compile(r"store_backend_id = [0-9a-f-]{36}\s*")


class GXProjectRepaired(UserWarning):
    """A damaged file of the generated GX project was replaced or removed."""


class AtomicTupleFilesystemStoreBackend(TupleFilesystemStoreBackend):
    """GX's file store backend, each file written to a temporary name and renamed over the target."""

    def _set(self, key, value, **kwargs):
        if not isinstance(key, tuple):
            key = key.to_tuple()
        filepath = Path(self.full_base_directory, self._convert_key_to_filepath(key))
        filepath.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(filepath, "wb") as f:
            f.write(value.encode("utf-8") if isinstance(value, str) else value)
        return str(filepath)


class AtomicFileDataContext(FileDataContext):
    """A file data context whose ``great_expectations.yml`` is replaced atomically on every save."""

    def _save_project_config(self) -> None:
        # GX builds the path from GX_YML and opens it with "w" (truncating first): pointed at a temporary
        # name for the duration of its own save (so its serialization is unchanged), then renamed.
        final = Path(self.root_directory, GX_YML)
        tmp = final.with_name(f".{GX_YML}.{os.getpid()}-saving.tmp")  # a name remove_stale_temporaries knows
        self.__dict__["GX_YML"] = tmp.name  # shadows the class attribute for this instance only
        try:
            super()._save_project_config()
        finally:
            del self.__dict__["GX_YML"]
        if not tmp.exists():  # GX could not write (it logs a PermissionError and carries on)
            return
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)


def project_config(show_how_to_buttons: bool = False) -> dict[str, Any]:
    """The project configuration changelake generates: GX's defaults with the atomic store backend, and
    no how-to buttons in the Data Docs (they link to GX's web site; the docs are meant to work offline)."""

    def backend(base_directory: str, **extra: Any) -> dict[str, Any]:
        return {
            "module_name": __name__,
            "class_name": AtomicTupleFilesystemStoreBackend.__name__,
            "base_directory": base_directory,
            **extra,
        }

    stores: dict[str, Any] = {
        name: {"class_name": cls, "store_backend": backend(base)} for name, (cls, base) in STORES.items()
    }
    stores["checkpoint_store"]["store_backend"]["suppress_store_backend_id"] = True
    return {
        "config_version": 4.0,
        "stores": stores,
        "expectations_store_name": "expectations_store",
        "validation_results_store_name": "validation_results_store",
        "checkpoint_store_name": "checkpoint_store",
        "data_docs_sites": {
            "local_site": {
                "class_name": "SiteBuilder",
                "show_how_to_buttons": show_how_to_buttons,
                "store_backend": backend(DATA_DOCS_DIR),
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            }
        },
        "progress_bars": {"globally": False, "metric_calculations": False},
    }


def _write_config(path: Path) -> None:
    import yaml

    atomic_write_text(path, yaml.safe_dump(project_config(), sort_keys=False))


def _config_problem(path: Path) -> str | None:
    """Why ``path`` cannot be this project's configuration (None: it can)."""
    import yaml

    text = path.read_bytes()
    if not text.strip():
        return f"{len(text)} bytes"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return f"not YAML ({str(e).splitlines()[0]})"
    if not isinstance(data, dict):
        return f"not a mapping ({type(data).__name__})"
    missing = [k for k in ("config_version", "stores", "data_docs_sites") if k not in data]
    if missing:
        return f"no {', '.join(missing)} (cut short?)"
    backends = [
        s.get("store_backend", {}) for s in (data.get("stores") or {}).values() if isinstance(s, dict)
    ]
    if set(STORES) - set(data["stores"] or {}) or any(
        b.get("class_name") != AtomicTupleFilesystemStoreBackend.__name__ for b in backends
    ):
        return "written by an older changelake or by hand (stores not the generated ones)"
    return None


def _store_file_problem(path: Path) -> str | None:
    text = path.read_bytes()
    if path.name == ".ge_store_backend_id":
        return (
            None
            if _STORE_ID.fullmatch(text.decode("utf-8", "replace"))
            else f"not a store id ({len(text)} bytes)"
        )
    try:
        value = json.loads(text)
    except ValueError as e:
        return f"not JSON ({len(text)} bytes: {e})"
    return None if isinstance(value, dict) else "not a JSON object"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _warn(message: str, progress: Callable[[str], None]) -> None:
    # Both: the warning for code that filters or records warnings (GX routes them to logging, where they can
    # go unseen), the progress line for the person reading the run's output.
    warnings.warn(message, GXProjectRepaired, stacklevel=3)
    progress(f"[quality] WARNING: {message}")


def repair_project(gx_dir: Path, progress: Callable[[str], None] = _stderr) -> list[str]:
    """Check the project in ``gx_dir`` and mend what a killed writer or a hand edit broke.

    Writes the generated configuration when it is missing, empty, unparsable or not the generated one (the
    old file's problem in a :class:`GXProjectRepaired` warning, also passed to ``progress``, unless it was
    just missing), removes store files that are not valid and leftover temporary files. Returns the
    warnings given.
    """
    gx_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(gx_dir)
    given = []

    def warn(message: str) -> None:
        given.append(message)
        _warn(message, progress)

    config = gx_dir / GX_YML
    problem = _config_problem(config) if config.exists() else "missing"
    if problem:
        if problem != "missing":
            warn(f"{config}: {problem}; rebuilt from code (the GX project is generated)")
        _write_config(config)
    for _cls, base in STORES.values():
        store = gx_dir / base
        if not store.is_dir():
            continue
        for path in sorted(store.rglob("*")):
            if not path.is_file() or not (path.suffix == ".json" or path.name == ".ge_store_backend_id"):
                continue
            why = _store_file_problem(path)
            if why:
                lost = (
                    "a validation result: the Data Docs no longer list it"
                    if base == STORES["validation_results_store"][1] and path.suffix == ".json"
                    else "this run writes it again"
                )
                warn(f"{path}: {why}; removed ({lost})")
                path.unlink()
    return given


def open_context(project_root: Path, progress: Callable[[str], None] | None = None):
    """The GX file context of ``project_root`` (its project in ``project_root/gx``), mended first, and
    made GX's current context (objects such as ``gx.Checkpoint`` resolve their stores through it).
    Repairs are reported to ``progress`` (default: stderr)."""
    from great_expectations.data_context import set_context

    progress = progress or _stderr
    gx_dir = project_root / "gx"
    repair_project(gx_dir, progress)
    try:
        context = AtomicFileDataContext(context_root_dir=str(gx_dir))
    except Exception as e:  # noqa: BLE001 - any load failure: the project is generated, so rebuild it
        _warn(
            f"{gx_dir / GX_YML}: GX could not load the project ({type(e).__name__}: {e}); rebuilt from code",
            progress,
        )
        _write_config(gx_dir / GX_YML)
        context = AtomicFileDataContext(context_root_dir=str(gx_dir))
    set_context(context)
    return context
