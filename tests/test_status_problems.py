"""`status` names a table's landing problem and goes on with the other tables (no Spark, no JVM)."""

import json

from changelake.config import load_settings
from changelake.inputs.landing import landing_status
from changelake.storage.fastread import FastReader


def _spec(name: str) -> dict:
    return {
        "name": name,
        "columns": [{"name": "k", "type": "INT"}, {"name": "v", "type": "STRING"}],
        "primary_key": ["k"],
    }


def test_status_reports_a_bad_landed_file_for_its_table_only(tmp_path):
    settings = load_settings(home=tmp_path, tables_dir=tmp_path / "tables", landing_dir=tmp_path / "landing")
    settings.tables_dir.mkdir()
    for name in ("a.bad", "a.good"):
        (settings.tables_dir / f"{name}.yaml").write_text(json.dumps(_spec(name)))
        (settings.landing_dir / name).mkdir(parents=True)
    line = json.dumps({"op": "+I", "data": {"k": 1, "v": "x"}}) + "\n"
    for file in ("1.jsonl", "2.jsonl", "02.jsonl"):  # batch 2 landed twice
        (settings.landing_dir / "a.bad" / file).write_text(line)
    (settings.landing_dir / "a.good" / "1.jsonl").write_text(line)
    (settings.landing_dir / "a.good" / "٣.jsonl").write_text(line)  # not ASCII digits: not a batch

    reader = FastReader(settings, lambda m: None)
    rows = {r["table"]: r for r in landing_status(reader, reader.status())}
    assert rows["a.bad"]["pending_batches"] == 1  # batch 1 is usable, 2 on are blocked
    assert "batch 2 is landed twice" in rows["a.bad"]["problem"]
    assert rows["a.good"]["problem"] is None and rows["a.good"]["pending_batches"] == 1
