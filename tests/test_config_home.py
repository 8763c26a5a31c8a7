"""Where the home is (docs/configuration.md "Where the home is"): --home, then CHANGELAKE_HOME, then the nearest
``.changelake/`` or ``changelake.yaml`` from the current directory up, as dbt finds its project, then
~/.changelake. No Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from changelake.config import find_home, load_settings
from changelake.errors import ConfigError
from tests.helpers import REPO


@pytest.fixture
def nowhere(tmp_path, monkeypatch) -> Path:
    """A directory tree with no project in it, a fake user home, and no CHANGELAKE_* settings."""
    for name in ("CHANGELAKE_HOME", "CHANGELAKE_TABLES", "CHANGELAKE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    work = tmp_path / "work" / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    return tmp_path / "work"


def test_without_a_project_the_home_is_the_users(nowhere):
    settings = load_settings()
    assert settings.home == (nowhere.parent / "user" / ".changelake").resolve()
    assert settings.home_from.startswith("default")


def test_a_changelake_directory_in_a_parent_is_the_home(nowhere):
    (nowhere / ".changelake").mkdir()
    settings = load_settings()
    assert settings.home == (nowhere / ".changelake").resolve()
    assert settings.tables_dir == settings.home / "tables"
    assert settings.home_from == f"found: {(nowhere / '.changelake').resolve()}"


def test_the_nearest_project_wins_and_a_project_file_names_the_specs(nowhere):
    (nowhere / ".changelake").mkdir()
    inner = nowhere / "a"
    (inner / "changelake.yaml").write_text("tables_dir: specs\n")
    settings = load_settings()
    assert settings.home == (inner / ".changelake").resolve()  # made on first use
    assert settings.tables_dir == (inner / "specs").resolve()  # relative to the file, not to the cwd
    assert "changelake.yaml" in settings.home_from


def test_the_homes_own_config_file_comes_after_the_project_file(nowhere):
    (nowhere / "changelake.yaml").write_text("tables_dir: specs\nlanding_dir: landed\n")
    (nowhere / ".changelake").mkdir()
    (nowhere / ".changelake" / "changelake.yaml").write_text("landing_dir: /srv/landing\n")
    settings = load_settings()
    assert settings.tables_dir == (nowhere / "specs").resolve()
    assert settings.landing_dir == Path("/srv/landing")


def test_inside_a_home_that_home_is_used(nowhere):
    home = nowhere / ".changelake"
    (home / "landing").mkdir(parents=True)
    (home / "changelake.yaml").write_text("tables_dir: /srv/specs\n")  # the home's file, not a project file
    assert find_home(home / "landing")[0] == home.resolve()
    assert find_home(home / "landing")[1] is None


def test_an_explicit_home_is_not_searched_for(nowhere, monkeypatch):
    (nowhere / "changelake.yaml").write_text("tables_dir: specs\n")
    assert (
        load_settings(home=nowhere / "elsewhere").tables_dir == (nowhere / "elsewhere" / "tables").resolve()
    )
    monkeypatch.setenv("CHANGELAKE_HOME", str(nowhere / "env"))
    settings = load_settings()
    assert settings.home == (nowhere / "env").resolve() and settings.home_from == "$CHANGELAKE_HOME"
    assert settings.tables_dir == (nowhere / "env" / "tables").resolve()  # the project file is not read


def test_a_home_that_is_a_file_and_a_broken_project_file_are_config_errors(nowhere):
    (nowhere / "file").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        load_settings(home=nowhere / "file")
    (nowhere / "changelake.yaml").write_text("tables_dir: [unclosed\n")
    with pytest.raises(ConfigError, match=r"changelake\.yaml:\d+: cannot read the settings"):
        load_settings()


def test_this_checkout_is_a_project_of_the_demo(monkeypatch):
    """Run anywhere in the checkout, the CLI uses ./.changelake and the demo's specs, as make does."""
    monkeypatch.delenv("CHANGELAKE_HOME", raising=False)
    monkeypatch.delenv("CHANGELAKE_TABLES", raising=False)
    monkeypatch.delenv("CHANGELAKE_CONFIG", raising=False)
    monkeypatch.chdir(REPO / "docs")
    settings = load_settings()
    assert settings.home == REPO / ".changelake"
    assert settings.tables_dir == REPO / "examples" / "tables"
