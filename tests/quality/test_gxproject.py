"""The GX project of the quality app survives a crash, and its Data Docs work as ``file://`` without a network.

These run the quality app's own code path (project, validation, Data Docs) on GX's pandas engine, which the
runner picks for small frames anyway, so they need no JVM; the end-to-end run on Spark is in test_quality.
"""

from __future__ import annotations

import builtins
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from changelake.config import load_settings
from changelake.quality import datadocs, suites
from changelake.quality.gxproject import GX_YML, GXProjectRepaired, repair_project
from changelake.quality.runner import _context, _validate, build_data_docs, forget_old_runs
from tests.quality.browser import DATA_DOCS_PROBES, SHOW_MORE_INFO, chromium, open_pages

pytestmark = pytest.mark.integration  # imports and runs Great Expectations: seconds, not the unit loop


class Frame:
    """What the runner asks of a frame it validates locally (``limit(n).toPandas()``), over pandas."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame

    def limit(self, n: int) -> Frame:
        return Frame(self.frame.head(n))

    def toPandas(self) -> pd.DataFrame:  # noqa: N802 - Spark's name
        return self.frame


GOOD = Frame(pd.DataFrame({"k": [1, 2], "v": ["a", "b"]}))
BAD = Frame(pd.DataFrame({"k": [1, 2, 2], "v": ["a", "b", "c"]}))


@pytest.fixture
def settings(home, monkeypatch):
    monkeypatch.setenv("CHANGELAKE_HOME", str(home))
    monkeypatch.setenv("CHANGELAKE_TABLES", str(home / "tables"))
    return load_settings()


def quality_run(settings, messages: list[str]) -> dict:
    """Validate a clean and a bad table and publish the Data Docs, as run_quality does."""
    context = _context(settings, messages.append)
    good = _validate(context, suites.pk_uniqueness("q.good", GOOD, ["k"]))
    bad = _validate(context, suites.pk_uniqueness("q.bad", BAD, ["k"]))
    docs = build_data_docs(context, messages.append)
    return {"good": good, "bad": bad, "docs": Path(docs.removeprefix("file://"))}


def gx_dir(settings) -> Path:
    return settings.home / "quality" / "gx"


def assert_works(run: dict) -> None:
    assert run["good"]["success"] and run["good"]["engine"] == "pandas"
    assert not run["bad"]["success"]
    unique = next(e for e in run["bad"]["expectations"] if e["type"] == "expect_column_values_to_be_unique")
    assert sorted(k["k"] for k in unique["offending_keys"]) == [2, 2]
    assert "pk_uniqueness__q.bad" in run["docs"].read_text()


def test_runs_are_named_by_what_they_checked_and_the_docs_keep_the_latest(settings):
    """Each validation is stored under a run named for its table and batch (GX's default is ``__none__``);
    a run is one run time, and the Data Docs keep the latest runs only, their pages and their results."""
    context = _context(settings, lambda m: None)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for batch in (1, 2, 3):
        check = suites.pk_uniqueness("q.bad", BAD, ["k"])
        check.checked = f"q.bad at batch {batch}"
        _validate(context, check, start + dt.timedelta(minutes=batch))
    messages: list[str] = []
    assert forget_old_runs(context, 2, messages.append) == 1
    docs = Path(build_data_docs(context, messages.append).removeprefix("file://"))
    pages = sorted(p.relative_to(docs.parent).parts[3] for p in docs.parent.glob("validations/**/*.html"))
    assert pages == ["q.bad at batch 2", "q.bad at batch 3"], pages
    index = docs.read_text()
    assert "q.bad at batch 3" in index and "q.bad at batch 1" not in index and "__none__" not in index
    assert len(context.validation_results_store.list_keys()) == 2
    assert any("1 older run(s) deleted, the latest 2 kept" in m for m in messages)
    assert forget_old_runs(context, 2, messages.append) == 0  # nothing more to delete


@pytest.mark.parametrize("keep", [0.0, 0.5], ids=["0 bytes", "half"])
def test_a_config_cut_short_is_rebuilt_with_a_warning(settings, keep):
    first: list[str] = []
    assert_works(quality_run(settings, first))
    assert not [m for m in first if "WARNING" in m]
    config = gx_dir(settings) / GX_YML
    data = config.read_bytes()
    config.write_bytes(data[: int(len(data) * keep)])  # what `make airflow-stop` mid-save left

    messages: list[str] = []
    with pytest.warns(GXProjectRepaired, match=re.escape(str(config))):
        run = quality_run(settings, messages)
    assert_works(run)
    (warning,) = [m for m in messages if "WARNING" in m]
    assert str(config) in warning and "rebuilt from code" in warning
    assert yaml.safe_load(config.read_text())["stores"]  # whole again
    # The run after it finds nothing to repair.
    again: list[str] = []
    assert_works(quality_run(settings, again))
    assert not [m for m in again if "WARNING" in m]


def test_truncated_store_files_and_missing_dirs_are_rebuilt(settings):
    assert_works(quality_run(settings, []))
    project = gx_dir(settings)
    suite = project / "expectations" / "pk_uniqueness__q" / "good.json"
    text = suite.read_bytes()
    suite.write_bytes(text[: len(text) // 2])
    (project / "expectations" / ".ge_store_backend_id").write_bytes(b"")
    (result,) = (project / "uncommitted" / "validations").rglob("changelake-local-q.bad.json")
    result.write_bytes(b"")
    shutil.rmtree(project / "checkpoints")
    shutil.rmtree(project / "validation_definitions")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    leftover = project / f".{GX_YML}.{int(dead.stdout)}-saving.tmp"  # a save killed before its rename
    leftover.write_text("config_vers")
    os.utime(leftover, (0, 0))

    messages: list[str] = []
    with pytest.warns(GXProjectRepaired):
        run = quality_run(settings, messages)
    assert_works(run)
    warned = "\n".join(m for m in messages if "WARNING" in m)
    assert f"{suite}: not JSON" in warned and "this run writes it again" in warned
    assert f"{result}: not JSON (0 bytes" in warned and "the Data Docs no longer list it" in warned
    assert ".ge_store_backend_id: not a store id (0 bytes)" in warned
    assert json.loads(suite.read_text())["name"] == "pk_uniqueness__q.good"  # written again by the run
    assert not leftover.exists()
    assert sorted(p.name for p in (project / "checkpoints").iterdir()) == [
        "pk_uniqueness__q.bad.json",
        "pk_uniqueness__q.good.json",
    ]


def test_a_config_of_an_older_changelake_is_replaced(settings):
    """A project GX scaffolded itself (before this change) writes non-atomically: it is replaced."""
    import great_expectations as gx

    gx.get_context(mode="file", project_root_dir=str(settings.home / "quality"))
    config = gx_dir(settings) / GX_YML
    assert "AtomicTupleFilesystemStoreBackend" not in config.read_text()
    with pytest.warns(GXProjectRepaired, match="older changelake"):
        assert repair_project(gx_dir(settings), progress=lambda m: None)
    assert "AtomicTupleFilesystemStoreBackend" in config.read_text()


def test_gx_never_opens_its_config_or_a_store_file_for_writing_in_place(settings, monkeypatch):
    """Every write of the project goes to a temporary name that is renamed: opening a real file of the
    project with "w" (which truncates it first) fails here."""
    assert_works(quality_run(settings, []))
    project = gx_dir(settings)
    real_open = builtins.open
    opened: list[str] = []

    def guarded(file, mode="r", *args, **kwargs):
        path = Path(str(file)) if isinstance(file, (str, Path)) else None
        if path is not None and "w" in mode and project in path.parents:
            opened.append(path.name)
            if not path.name.endswith(".tmp"):
                raise AssertionError(f"{path} opened with {mode!r}: not atomic")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    context = _context(settings, lambda m: None)
    context.data_sources.add_or_update_pandas(name="a-new-source")  # GX saves great_expectations.yml
    assert_works(
        {
            "good": _validate(context, suites.pk_uniqueness("q.good", GOOD, ["k"])),
            "bad": _validate(context, suites.pk_uniqueness("q.bad", BAD, ["k"])),
            "docs": Path(context.get_docs_sites_urls()[0]["site_url"].removeprefix("file://")),
        }
    )
    monkeypatch.setattr(builtins, "open", real_open)
    assert any(name.startswith(f".{GX_YML}.") for name in opened)  # the config went through a temporary
    assert "a-new-source" in (project / GX_YML).read_text()
    assert not list(project.rglob("*.tmp"))


def test_a_store_write_that_fails_leaves_the_previous_file(settings, monkeypatch):
    assert_works(quality_run(settings, []))
    suite = gx_dir(settings) / "expectations" / "pk_uniqueness__q" / "good.json"
    before = suite.read_bytes()

    def crash(fd):
        raise OSError("disk gone")

    monkeypatch.setattr("changelake.atomic.os.fsync", crash)
    context = _context(settings, lambda m: None)
    changed = suites.pk_uniqueness("q.good", GOOD, ["k", "v"])
    with pytest.raises(OSError, match="disk gone"):
        _validate(context, changed)
    assert suite.read_bytes() == before


# -- Data Docs offline ----------------------------------------------------------------------------------


def fake_assets(root: Path) -> Path:
    """A node_modules with every file the Data Docs need (contents irrelevant to the static checks)."""
    for relative in datadocs.CDN_ASSETS.values():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(f"/* {relative} */\n")
    (root / datadocs.WEBFONTS).mkdir(parents=True)
    (root / datadocs.WEBFONTS / "fa-solid-900.woff2").write_bytes(b"font")
    return root


REMOTE_ATTR = re.compile(r"""\s(?:src|href)\s*=\s*["']\s*(?:https?:)?//""", re.IGNORECASE)


def static_problems(site: Path) -> list[str]:
    """Every remote src/href/url(), integrity/crossorigin attribute and local reference to a missing file."""
    problems = []
    for page in sorted(site.rglob("*.html")):
        if "vendor" in page.parts:
            continue
        html = page.read_text()
        name = page.relative_to(site)
        problems += [f"{name}: remote {m.group(0).strip()}" for m in REMOTE_ATTR.finditer(html)]
        problems += [f"{name}: remote {u}" for u in datadocs.remote_references(html)]
        problems += [f"{name}: {a}" for a in re.findall(r"\s(integrity|crossorigin)\b", html, re.IGNORECASE)]
        for ref in re.findall(r"""\s(?:src|href)\s*=\s*["']([^"'#]+)["']""", html):
            if not re.match(r"^[a-z]+:", ref) and not (page.parent / ref.split("?")[0]).exists():
                problems.append(f"{name}: {ref} does not exist")
    for css in sorted((site / "static" / "styles").glob("*.css")):
        problems += [f"{css.name}: remote {u}" for u in datadocs.remote_references(css.read_text())]
    return problems


def test_localized_data_docs_load_nothing_remote_and_nothing_with_integrity(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("CHANGELAKE_DATADOCS_ASSETS", str(fake_assets(tmp_path / "node_modules")))
    messages: list[str] = []
    run = quality_run(settings, messages)
    site = run["docs"].parent
    assert static_problems(site) == []
    assert any("Data Docs work offline" in m for m in messages)
    (page,) = site.glob("validations/pk_uniqueness__q/bad/*/*/*.html")
    html = page.read_text()
    # Five levels below the site: the favicon GX wrote four ../ up now resolves.
    assert 'href="../../../../../static/images/favicon.ico"' in html
    assert 'src="../../../../../static/vendor/bootstrap/dist/js/bootstrap.min.js">' in html
    assert 'src="../../../../../static/images/logo-long.png"' in html

    # The check itself catches each problem the issue found.
    page.write_text(
        html.replace(
            'bootstrap.min.js">', 'bootstrap.min.js" integrity="sha384-x" crossorigin="anonymous">'
        ).replace("../../../../../static/images/favicon.ico", "../../../../static/images/favicon.ico")
        + '<img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png">'
        + "<style>a { background: url('//cdn.example/x.png') }</style>"
    )
    found = "\n".join(static_problems(site))
    for problem in (
        "integrity",
        "crossorigin",
        "favicon.ico does not exist",
        "remote https://great",
        "//cdn.",
    ):
        assert problem in found
    # ... and a second run rewrites the page back (GX rebuilt it; localizing is idempotent).
    build_data_docs(_context(settings, lambda m: None), lambda m: None)
    assert static_problems(site) == []


def test_without_the_npm_assets_the_run_says_the_docs_need_internet(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("CHANGELAKE_DATADOCS_ASSETS", str(tmp_path / "nothing-here"))
    messages: list[str] = []
    run = quality_run(settings, messages)
    (warning,) = [m for m in messages if "Data Docs" in m]
    assert "need internet" in warning and "infra/datadocs_assets.sh" in warning and "npm" in warning
    index = run["docs"].read_text()
    assert "https://code.jquery.com/jquery-3.7.1.min.js" in index  # kept: the pages still work online
    assert "static/images/logo-long.png" in index and "great-expectations-web-assets" not in index


REAL_ASSETS = datadocs.default_assets()


@pytest.mark.skipif(chromium() is None, reason="no chromium on PATH (apt-get install chromium)")
@pytest.mark.skipif(
    not (REAL_ASSETS / "jquery").is_dir(),
    reason=f"no Data Docs assets in {REAL_ASSETS} (infra/datadocs_assets.sh)",
)
def test_data_docs_open_as_file_urls_in_chromium_without_network(settings, monkeypatch):
    """Headless Chromium, every request not to a file sent to a proxy nobody listens on: the index and a
    validation page log no error, request nothing off the machine, and Bootstrap's modal (the "Show more
    info" button) and bootstrap-table are there."""
    monkeypatch.setenv("CHANGELAKE_DATADOCS_ASSETS", str(REAL_ASSETS))
    run = quality_run(settings, [])
    site = run["docs"].parent
    (validation,) = site.glob("validations/pk_uniqueness__q/bad/*/*/*.html")
    reports = open_pages([run["docs"], validation], DATA_DOCS_PROBES)
    for report in reports:
        assert report.errors == [], report.url
        assert report.remote_requests == [], report.url
        assert report.requests > 10  # the page did load its scripts, styles and images
        assert set(report.probes.values()) == {"function"}, report.probes
    (clicked,) = open_pages([validation], (SHOW_MORE_INFO,))
    assert clicked.probes[SHOW_MORE_INFO] == "opened" and clicked.errors == []
