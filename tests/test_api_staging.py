"""Records given to the API are staged as JSON lines the readers accept, NaN and infinities included."""

import math

from changelake import ChangeLake
from changelake.inputs.readers import read_batch


def test_nan_and_infinities_survive_staging(tmp_path):
    lake = ChangeLake(home=tmp_path, tables_dir=tmp_path / "tables", progress=lambda m: None)
    spec = lake.create_table(
        {
            "name": "t.f",
            "columns": [{"name": "k", "type": "INT"}, {"name": "d", "type": "DOUBLE"}],
            "primary_key": ["k"],
        }
    )
    values = [float("nan"), float("inf"), float("-inf"), 1.5]
    records = [{"op": "+I", "data": {"k": i, "d": v}} for i, v in enumerate(values)]
    with lake._staged_records(spec, records) as path:
        got = read_batch([path], spec).records.column("d").to_pylist()
    assert not path.exists()  # a call's staged records go when it returns
    assert math.isnan(got[0]) and got[1:] == [math.inf, -math.inf, 1.5]
