"""Changelog JSON decoded column-wise (``decode._json_columns``) equals the per-message path, or is not taken.

Every range goes through ``decode._decode_lines`` twice, with the column-wise path on and off: the staged
records, the message count, the dead letters (quarantine) and the error (fail) must be identical. The lines
mix the plain forms the column-wise path takes with forms it must leave to the per-message path (numbers in
other spellings, out-of-range values, zones, duplicate keys, NaN literals, lone carriage returns, ...).
No Spark here."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changelake.errors import BadRecordError
from changelake.inputs import decode
from changelake.inputs.records import DecodedBatch, batch_arrow_schema
from changelake.spec import TableSpec

COLUMNS = {
    "k": "BIGINT",
    "s": "STRING",
    "i": "INT",
    "t": "TINYINT",
    "b": "BOOLEAN",
    "f": "FLOAT",
    "d": "DOUBLE",
    "dec": "DECIMAL(10,3)",
    "day": "DATE",
    "tm": "TIME",
    "ts": "TIMESTAMP(6)",
    "tz": "TIMESTAMP_LTZ(6)",
    "c": "CHAR(4)",
    "nn": "INT",
}


def _spec(quarantine: bool) -> TableSpec:
    columns = [{"name": n, "type": t} for n, t in COLUMNS.items()]
    columns[-1]["nullable"] = False
    return TableSpec.from_dict(
        {
            "name": "j.t",
            "columns": columns,
            "primary_key": ["k", "s"],
            "options": {"bucket.num": 3},
            "source": {"on-bad-record": "quarantine"} if quarantine else {},
        }
    )


def _not_negative_zero(value: float) -> bool:
    return value != 0 or math.copysign(1, value) > 0


def flink_decimal(value: decimal.Decimal) -> str:
    """A DECIMAL as Flink's JSON format writes it by default: a JSON number, Jackson's node of the BigDecimal
    without trailing zeros (``encode.decimal-as-plain-number`` off), so ``1.2E+3`` for 1200.000 and ``0`` for
    zero. Python's str of a Decimal follows the same rule as Java's ``BigDecimal.toString``."""
    return "0" if not value else str(value.normalize())


def flink_fraction(text: str) -> str:
    """A time's text with its fraction as Flink's formats write it: 0 to 9 digits, no trailing zeros."""
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}" if fraction else whole


def flink_timestamp(value: dt.datetime, sep: str = " ") -> str:
    """TIMESTAMP in Flink's SQL form (``timestamp-format.standard`` SQL, the default) or ISO-8601 (``T``)."""
    return flink_fraction(value.isoformat(sep=sep, timespec="microseconds"))


# Each column: plain JSON text the column-wise path takes, and other text (good or bad) it must leave alone.
PLAIN = {
    "k": st.integers(-(2**63), 2**63 - 1).map(str),
    # Text without "+-": a table with a DECIMAL column leaves a range holding those bytes anywhere to the per-line
    # path (changelog_json._object_lines); VALID has such a text, and the equality test checks it there.
    "s": st.text(max_size=12)
    .filter(lambda v: "+-" not in v)
    .map(lambda v: json.dumps(v, ensure_ascii=False)),
    "i": st.integers(-(2**31), 2**31 - 1).map(str),
    "t": st.integers(-128, 127).map(str),
    "b": st.sampled_from(["true", "false"]),
    "f": st.floats(width=32, allow_nan=False, allow_infinity=False).filter(_not_negative_zero).map(repr),
    "d": st.floats(allow_nan=False, allow_infinity=False).filter(_not_negative_zero).map(repr),
    # as a string, or as Flink writes it: a JSON number, maybe in scientific notation
    "dec": st.decimals(min_value=-9999999, max_value=9999999, places=3).flatmap(
        lambda v: st.sampled_from([json.dumps(str(v)), flink_decimal(v), str(v)])
    ),
    "day": st.dates().map(lambda v: json.dumps(v.isoformat())),
    # with six fraction digits, or as Flink writes it (HH:mm:ss, a fraction only when it is not zero)
    "tm": st.times()
    .flatmap(lambda v: st.sampled_from([v.isoformat(timespec="microseconds"), flink_fraction(v.isoformat())]))
    .map(json.dumps),
    # ISO-8601 or Flink's SQL form, fractions as Python or Flink write them
    "ts": st.datetimes()
    .flatmap(lambda v: st.sampled_from([v.isoformat(), flink_timestamp(v), flink_timestamp(v, "T")]))
    .map(json.dumps),
    "tz": st.datetimes()
    .flatmap(lambda v: st.sampled_from([v.isoformat(), flink_timestamp(v), flink_timestamp(v, "T")]))
    .map(lambda v: json.dumps(v + "Z")),
    "c": st.text(max_size=4).filter(lambda v: "+-" not in v).map(lambda v: json.dumps(v)),
    "nn": st.integers(0, 9).map(str),
}
# Other spellings the per-message path accepts (the column-wise path must take them alike or leave them) ...
VALID = {
    "k": ["5.0", "1e2", "-0"],
    "s": ['"\\u00e9\\u0000"', '"\\ud83d\\ude00"'],
    "i": ["3.0", "-0"],
    "t": ["127", "-128"],
    "b": [],
    "f": ["-0", "-0.0", "3", "1e-50", '"NaN"', '"Infinity"', "16777217", "3.4028235e38"],
    "d": [
        "-0",
        "-0.0",
        "12345678901234567890123",
        '"-Infinity"',
        "1E+2",
        "0.1000000000000000055511151231257827",
    ],
    "dec": ["12.5", '"12.3456"', '"1e2"', '"+1"', '".5"', '"-0.000"', '"0000012.1"', "7"],
    "day": ['"20240131"'],
    "tm": ['"12:34:56"', '"12:34:56.5"'],
    "ts": ['"2024-01-01 01:02:03"', '"2024-01-01T01:02:03.5"', '"2024-01-01T01:02"'],
    "tz": ['"2024-01-01T01:02:03+01:00"', '"2024-01-01T01:02:03"', '"2024-01-01T01:02:03.25Z"'],
    "c": ['"é日本語"', '""', '"+-"'],
    "nn": ["-0"],
}
# ... and ones it refuses (bad records).
BAD = {
    "k": ['"5"', "true", "9223372036854775808", "1.5"],
    "s": ['"\\ud800"', "5"],
    "i": ["2147483648", "-2147483649"],
    "t": ["200", "-129"],
    "b": ["1", '"true"'],
    "f": ["1e39", "NaN", "Infinity"],
    "d": ["1e400", "-Infinity"],
    # pyarrow's reader takes the last three (an exponent "+-", text over 1000 characters): the per-line path not
    "dec": ['"12345678.1"', '"1,5"', "12345678.1", '"1e+-1"', '"5E+-0"', '"' + "0" * 1000 + '1.5"'],
    "day": ['"2024-02-30"', '"0000-01-01"', '"2024-1-5"'],
    "tm": ['"24:00:00.000000"', '"12:34:56.000000+01:00"'],
    "ts": ['"2024-01-01T01:02:03Z"', '"2024-01-01T24:00:00"'],
    "tz": ['"2024-13-01T01:02:03Z"'],
    "c": ['"abcde"', "4"],
    "nn": ["null"],
}


@st.composite
def line(draw, mode: str, bad: str | None = None) -> bytes:
    """One line: ``plain`` values only, also ``valid`` other spellings, or ``noisy`` (bad values, bad ops,
    broken envelopes); ``bad`` names a column that gets a bad value."""
    noisy = mode == "noisy"
    values = {}
    for name in COLUMNS:
        # The key and the NOT NULL column are there, but in noisy lines: a missing one refuses the record.
        choice = draw(st.integers(0 if noisy or name not in ("k", "s", "nn") else 2, 12))
        if choice == 0:
            continue  # absent
        if choice == 1:
            values[name] = "null"
        elif choice == 2 and mode != "plain" and (VALID[name] or noisy):
            values[name] = draw(st.sampled_from(VALID[name] + (BAD[name] if noisy else [])))
        else:
            values[name] = draw(PLAIN[name])
        if name == bad:
            values[name] = draw(st.sampled_from(BAD[name]))
    ops = ['"+I"', '"+U"', '"-U"', '"-D"', '"+I"', '"+U"'] + (['"+X"', "null"] if noisy else [])
    op = draw(st.sampled_from(ops))
    body = ",".join(f'"{k}":{v}' for k, v in values.items())
    text = f'{{"op":{op},"data":{{{body}}}}}'
    odd = draw(st.integers(0, 60)) if noisy else 60
    if odd == 0:
        text = text.replace('"op":', '"op":"+I","op":', 1)  # a duplicate key
    elif odd == 1:
        text = f'{{"op":{op},"data":{{{body}}},"extra":1}}'
    elif odd == 2:
        text = text + " " + text  # two objects on one line
    elif odd == 3:
        text = " " + text
    elif odd == 4:
        text = text[:-1]  # not closed
    elif odd == 5:
        text = f'{{"op":{op},"data":null}}'
    elif odd == 6:
        text = f'{{"rowkind":{op},"fields":[1,"a",1,1,true,1.0,1.0,"1",null,null,null,null,null,1]}}'
    raw = text.encode()
    if odd == 7:
        raw = raw.replace(b'"data"', b'"d\xffata"')  # not UTF-8
    if odd == 8:
        raw = raw + b"\r"
    if odd == 9:
        raw = raw[: len(raw) // 2] + b"\r" + raw[len(raw) // 2 :]  # a lone carriage return
    return raw


@st.composite
def ranges(draw) -> bytes:
    mode = draw(st.sampled_from(["plain", "valid", "noisy", "one bad value"]))
    lines = draw(st.lists(line("plain" if mode == "one bad value" else mode), min_size=0, max_size=12))
    if mode == "one bad value":
        # Plain lines but one, with one bad value: the column-wise path must see it.
        at = draw(st.integers(0, len(lines)))
        lines.insert(at, draw(line("plain", bad=draw(st.sampled_from(list(COLUMNS))))))
    blanks = draw(st.lists(st.integers(0, len(lines)), max_size=2))
    for at in sorted(blanks, reverse=True):
        lines.insert(at, draw(st.sampled_from([b"", b"\r"] + ([b"  "] if mode == "noisy" else []))))
    data = b"\n".join(lines)
    if draw(st.booleans()):
        data += b"\n"
    if mode == "noisy" and draw(st.integers(0, 10)) == 0:
        data = b"\xef\xbb\xbf" + data  # a byte order mark on the first line
    return data


def _decode(tmp_path, data: bytes, spec: TableSpec, fast: bool, first_line: int, mapped: bool = False):
    """``mapped``: the range is memory-mapped, as a decode task maps a large one (decode.MAP_MIN_BYTES)."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(data)
    r = decode.Range(3, str(path), "changelog-json", 0, len(data), first_line)
    out = DecodedBatch(batch_arrow_schema(spec).empty_table())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHANGELAKE_FAST_JSON", "1" if fast else "0")
        patch.setattr(decode, "MAP_MIN_BYTES", 0 if mapped else decode.MAP_MIN_BYTES)
        try:
            table = decode._decode_lines(r, spec, out)
        except BadRecordError as e:
            return ("error", str(e), out.messages)
    return ("ok", table, out.messages, out.skipped, out.dead_letters)


@pytest.mark.slow  # 300 examples twice, ~15 s of CPU: make test, not test-unit
@pytest.mark.parametrize("quarantine", [False, True], ids=["fail", "quarantine"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=ranges(), first_line=st.integers(1, 1000), mapped=st.booleans())
def test_column_wise_json_equals_the_per_message_path(tmp_path, quarantine, data, first_line, mapped):
    spec = _spec(quarantine)
    fast = _decode(tmp_path, data, spec, True, first_line, mapped)
    slow = _decode(tmp_path, data, spec, False, first_line)
    if fast[0] == "ok" and slow[0] == "ok":
        # repr: NaN equals NaN, -0.0 differs from 0.0
        assert fast[1].schema == slow[1].schema and repr(fast[1].to_pylist()) == repr(slow[1].to_pylist())
        assert fast[2:] == slow[2:]
    else:
        assert fast == slow


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.fixed_dictionaries({n: PLAIN[n] for n in COLUMNS}), min_size=1, max_size=20))
def test_plain_lines_take_the_column_wise_path(rows):
    spec = _spec(False)
    data = b"\n".join(
        ('{"op":"+I","data":{' + ",".join(f'"{k}":{v}' for k, v in row.items()) + "}}").encode()
        for row in rows
    )
    r = decode.Range(0, "unused", "changelog-json", 0, len(data), 7)
    table = decode._json_columns(data, r, spec)
    assert table is not None and table.num_rows == len(rows)
    assert (table.column("_seq").to_numpy() >> decode.LINE_SHIFT).tolist() == list(range(7, 7 + len(rows)))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"a": 1}\n\n{"a": 2}\n', [5, 7]),  # blank lines take no number
        (b'{"a": 1}\r\n{"a": 2}', [5, 6]),  # CRLF and no final newline
        ('{"a": "é"}\n'.encode(), [5]),  # valid UTF-8 beyond ASCII
        (b'{"a": 1}\r{"a": 2}\n', None),  # a lone carriage return: decided line by line
        (b'{"a": 1}\n{"a": 2}\r', None),  # ... also as the last byte
        (b'{"a": "\xff"}\n', None),  # not UTF-8
        (b'{"a": 1}\n[1]\n', None),  # a line that is not one object
    ],
)
def test_object_lines_numbers_object_lines_and_declines_the_rest(data, expected):
    from changelake.inputs.formats.changelog_json import object_lines

    for text in (data, memoryview(data)):  # a decode task passes a view of the memory-mapped file
        got = object_lines(text, 5)
        assert (None if got is None else got.tolist()) == expected


@pytest.mark.parametrize("start, end", [(0, 0), (0, 9), (4, 23), (23, 36), (30, 99)])
def test_a_large_range_is_mapped_and_a_small_one_read(tmp_path, monkeypatch, start, end):
    """decode._mapped: the range's bytes either way (a range past the end comes back short, as a read does);
    a view of the memory-mapped file only from MAP_MIN_BYTES on."""
    import mmap

    text = b'{"op": "+I"}\n{"op": "-D"}\n{"op": "+U"}\n'
    path = tmp_path / "r.jsonl"
    path.write_bytes(text)
    r = decode.Range(0, str(path), "changelog-json", start, end, 1)
    for least, kind in ((0, mmap.mmap), (1 << 30, bytes)):
        monkeypatch.setattr(decode, "MAP_MIN_BYTES", least)
        view = decode._mapped(r)
        assert bytes(view) == text[start:end]
        assert isinstance(view.obj, kind)


def test_plain_lines_take_the_column_wise_path_from_a_mapped_file(tmp_path, monkeypatch):
    spec = _spec(False)
    lines = [f'{{"op":"+I","data":{{"k":{i},"s":"s{i}","nn":{i}}}}}\n' for i in range(50)]
    data = "".join(lines).encode()
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"{}\n" + data)
    r = decode.Range(0, str(path), "changelog-json", 3, 3 + len(data), 2)
    monkeypatch.setattr(decode, "MAP_MIN_BYTES", 0)
    mapped = decode._json_columns(decode._mapped(r), r, spec)
    assert mapped is not None and mapped.num_rows == 50
    assert mapped.equals(decode._json_columns(data, r, spec))
    assert mapped.column("k").to_pylist() == list(range(50))


def _flink_lines(delete_key_only: bool) -> bytes:
    """Lines as Flink writes a changelog with its JSON format's defaults (Jackson: no spaces; SQL timestamps;
    DECIMAL as a number without trailing zeros), a ``-D`` with its whole row or its key only."""
    lines = []
    for i in range(40):
        stamp = dt.datetime(2026, 1, 9, 9, 58, 40) + dt.timedelta(microseconds=i * 104_350)
        row = {
            "k": i,
            "s": f"s{i}",
            "i": i * 7,
            "t": i - 20,
            "b": i % 2 == 0,
            "f": i / 8,
            "d": i / 3,
            "dec": decimal.Decimal(i * 2500) if i % 5 == 0 else decimal.Decimal(i * 250) / 1000,
            "day": stamp.date().isoformat(),
            "tm": flink_fraction(stamp.time().isoformat()),
            "ts": flink_timestamp(stamp),
            "tz": flink_timestamp(stamp) + "Z",
            "c": "ab",
            "nn": i,
        }
        op = ["+I", "-U", "+U", "-D"][i % 4]
        if op == "-D" and delete_key_only:
            row = {"k": row["k"], "s": row["s"]}
        body = ",".join(
            f'"{k}":{flink_decimal(v) if isinstance(v, decimal.Decimal) else json.dumps(v)}'
            for k, v in row.items()
        )
        lines.append(f'{{"op":"{op}","data":{{{body}}}}}')
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("delete_key_only", [False, True], ids=["delete-whole-row", "delete-key-only"])
def test_flink_default_json_is_decoded_column_wise_as_the_per_message_path_decodes_it(
    tmp_path, delete_key_only
):
    spec = _spec(False)
    data = _flink_lines(delete_key_only)
    assert b"E+" in data and b'"2026-01-09 09:58:40.10435"' in data  # what the test is about
    r = decode.Range(0, "unused", "changelog-json", 0, len(data), 1)
    assert decode._json_columns(data, r, spec) is not None
    fast = _decode(tmp_path, data, spec, True, 1)
    slow = _decode(tmp_path, data, spec, False, 1)
    assert fast[0] == slow[0] == "ok"
    assert fast[1].equals(slow[1]) and fast[2:] == slow[2:]
    # exact, never through a binary float: 0.1 + 0.2 as doubles would not give 0.3
    decoded = dict(zip(fast[1].column("k").to_pylist(), fast[1].column("dec").to_pylist(), strict=True))
    assert decoded[5] == decimal.Decimal("12500.000") and decoded[1] == decimal.Decimal("0.250")
    assert decoded[33] == decimal.Decimal("8.250")


@pytest.mark.parametrize("text", ['"1e+-1"', '"5E+-0"', '"' + "0" * 1000 + '1.5"', '"' + "0" * 997 + '1.5"'])
def test_decimal_text_the_json_reader_takes_and_the_per_line_path_does_not_is_left_to_it(tmp_path, text):
    """pyarrow's reader converts these strings to a DECIMAL; the per-line path refuses all but the last (a
    text of exactly MAX_NUMBER_TEXT characters): the range must be decoded line by line, with its error."""
    spec = _spec(False)
    data = f'{{"op":"+I","data":{{"k":1,"s":"a","nn":1,"dec":{text}}}}}\n'.encode()
    fast = _decode(tmp_path, data, spec, True, 1)
    slow = _decode(tmp_path, data, spec, False, 1)
    assert fast[0] == slow[0] and (fast[0] == "error") == (len(text) != 1002)
    if fast[0] == "error":
        assert fast == slow
