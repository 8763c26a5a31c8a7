"""The apply DAG's tables come from the same spec files the loader reads (``*.yaml`` and ``*.yml``), and spec
files whose Airflow task names would collide are refused with a message naming them (issue 12)."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.orchestration.conftest import REPO, airflow_env

SPEC = "name: {name}\ncolumns: [{{name: k, type: INT}}]\nprimary_key: [k]\n"


@pytest.fixture
def common(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(REPO / "dags"))
    monkeypatch.setenv("CHANGELAKE_TABLES", str(tmp_path))
    sys.modules.pop("changelake_dags.common", None)
    from changelake_dags import common

    return common


def test_yml_specs_are_scheduled_like_yaml_specs(common, tmp_path):
    (tmp_path / "shop.a.yaml").write_text(SPEC.format(name="shop.a"))
    (tmp_path / "shop.b.yml").write_text(SPEC.format(name="shop.b"))
    (tmp_path / "README.md").write_text("not a spec")
    assert common.table_names() == ["shop.a", "shop.b"]


@pytest.mark.parametrize(
    ("first", "second"),
    [("a__b.c.yaml", "a.b__c.yml"), ("shop.a.yaml", "shop.a.yml"), ("x.y.yaml", "X.Y.yaml")],
)
def test_spec_files_with_colliding_task_names_are_refused(common, tmp_path, first, second):
    for name in (first, second):
        (tmp_path / name).write_text(SPEC.format(name=name.rsplit(".", 1)[0]))
    with pytest.raises(ValueError, match="give the same task name") as err:
        common.table_names()
    assert first in str(err.value) and second in str(err.value)


def test_no_tables_directory_means_no_tables(common, tmp_path):
    shutil.rmtree(tmp_path)
    assert common.table_names() == []


def test_the_apply_dag_has_tasks_for_a_yml_spec(monkeypatch, tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    shutil.copy(REPO / "examples" / "tables" / "shop.orders.yaml", tables / "shop.orders.yml")
    for key, value in airflow_env(tmp_path / "home", tables).items():  # Airflow's files under tmp_path
        monkeypatch.setenv(key, value)
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.syspath_prepend(str(REPO / "dags"))
    sys.modules.pop("changelake_dags.common", None)
    bag = DagBag(dag_folder=str(REPO / "dags" / "changelake_apply.py"), bundle_path=REPO / "dags")
    assert bag.import_errors == {}
    dag = bag.dags["changelake_apply"]
    assert {"has_batches__shop__orders", "apply__shop__orders"} <= set(dag.task_ids)
    assert dag.get_task("report").trigger_rule == "all_done"
