"""Defaults that work from an installed wheel: the dbt project and the marts' expectations travel in the wheel
(pyproject's force-include), and config picks the checkout's folders only when it runs from a checkout."""

from __future__ import annotations

import tomllib

from changelake import config
from tests.helpers import REPO


def test_the_wheel_carries_every_file_the_defaults_need():
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    included = build["force-include"]
    for source, target in included.items():
        assert (REPO / source).exists(), source
        assert target.startswith("changelake/_project/"), target
    folders = {target.split("/")[2] for target in included.values()}
    assert folders == {"dbt_project", "expectations"}
    # dbt needs the project file, the profile, the models and the macros; the quality app the marts
    assert {s.removeprefix("dbt_project/") for s in included if s.startswith("dbt_project/")} >= {
        "dbt_project.yml", "profiles.yml", "models", "macros"
    }  # fmt: skip
    assert "expectations/marts.yaml" in included


def test_defaults_point_at_the_checkout_here_and_at_the_package_when_installed(tmp_path, monkeypatch):
    assert config._project_folder("dbt_project") == REPO / "dbt_project"
    # installed: the package's parents[2] is site-packages' lib/python3.x, no checkout there
    monkeypatch.setattr(config, "CHECKOUT", tmp_path)
    (tmp_path / "dbt_project").mkdir()  # a folder of that name alone does not make a checkout
    bundled = config._project_folder("dbt_project")
    assert bundled == (REPO / "src" / "changelake" / "_project" / "dbt_project").resolve()
    settings = config.load_settings(home=tmp_path / "home")
    assert settings.expectations_dir == (REPO / "src" / "changelake" / "_project" / "expectations").resolve()
