"""Table specs several test files share, one definition each (YAML text, as a spec file holds it)."""

from __future__ import annotations

import json

#: demo.fruit: an INT key, a DOUBLE and a STRING, two buckets (the CLI and apply-service tests).
FRUIT = """name: demo.fruit
columns:
  - {name: k, type: INT}
  - {name: price, type: DOUBLE}
  - {name: name, type: STRING}
primary_key: [k]
options: {bucket.num: 2}
"""


def kv(name: str = "t.kv", **options: object) -> str:
    """A two-column key/value table (``k`` INT, ``v`` STRING), two buckets unless ``options`` say otherwise;
    ``options`` are table options by their Fluss names (``**{"table.delete.behavior": "disable"}``)."""
    merged = {"bucket.num": 2, **options}
    return (
        f"name: {name}\ncolumns:\n  - {{name: k, type: INT}}\n  - {{name: v, type: STRING}}\nprimary_key: [k]\n"
        f"options: {json.dumps(merged)}\n"
    )
