"""formats.debezium: reading messages (values, envelopes, refusals with offsets), netting them into
operations on the source's rows before the batch (and the checks the messages need of those rows;
tests/flow/test_debezium.py runs them against a flow's rows), and writing a view's delta as messages."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest

from freshview.formats import debezium as dbz
from freshview.schema import WEIGHT, SqlType, schema_from_ddl

KEYED = schema_from_ddl("id INT, name TEXT, amount NUMERIC(10,2)", ["id"])
ALL_TYPES = schema_from_ddl("i2 SMALLINT, i8 BIGINT, f4 REAL, f8 DOUBLE PRECISION, n NUMERIC(12,3), t TEXT, "
                            "b BOOLEAN, d DATE, ts TIMESTAMP, tz TIMESTAMPTZ, iv INTERVAL, arr INTEGER[]")


def one(value, column: str, schema=ALL_TYPES, field=None):
    row = {"op": "c", "after": {**dict.fromkeys(schema.names), column: value}}
    msg = {"schema": {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        dict(field, field=column)]}]}, "payload": row} if field else row
    change = dbz.read([msg], schema)[0]
    return change.after[schema.names.index(column)]


def test_values_as_the_json_converter_renders_them():
    assert one(-7, "i2") == -7 and one("12", "i8") == 12
    assert one(1.5, "f4") == 1.5 and one("NaN", "f8") != one("NaN", "f8") and one("-Infinity", "f8") == float("-inf")
    assert one(3, "n") == decimal.Decimal("3.000") and one("-1.2345", "n") == decimal.Decimal("-1.235")
    assert one({"scale": 2, "value": base64.b64encode((-1234).to_bytes(2, "big", signed=True)).decode()}, "n") \
        == decimal.Decimal("-12.340")
    precise = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "3"}}
    assert one(base64.b64encode((123456).to_bytes(3, "big", signed=True)).decode(), "n", field=precise) \
        == decimal.Decimal("123.456")
    assert one("x", "t") == "x" and one(True, "b") is True
    assert one(19_000, "d") == dt.date(2022, 1, 8) and one("2024-02-29", "d") == dt.date(2024, 2, 29)
    assert one(1_000_000, "ts") == dt.datetime(1970, 1, 1, 0, 0, 1)  # MicroTimestamp by default
    assert one(1_000, "ts", field={"type": "int64", "name": "io.debezium.time.Timestamp"}) == \
        dt.datetime(1970, 1, 1, 0, 0, 1)
    assert one(2_000_000_000, "ts", field={"type": "int64", "name": "io.debezium.time.NanoTimestamp"}) == \
        dt.datetime(1970, 1, 1, 0, 0, 2)
    assert one("2024-01-02T03:04:05.123456", "ts") == dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
    assert one("2024-01-02T03:04:05+02:00", "tz") == dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=dt.timezone.utc)
    assert one("2024-01-02T03:04:05Z", "tz") == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert one(90_000_000, "iv") == pa.MonthDayNano([0, 0, 90_000_000_000])
    assert one("P1Y2M3DT4H5M6.5S", "iv") == pa.MonthDayNano([14, 3, (4 * 3600 + 5 * 60 + 6.5) * 10 ** 9])
    assert one("-P1D", "iv") == pa.MonthDayNano([0, -1, 0])
    assert one([1, None, 3], "arr") == [1, None, 3]


@pytest.mark.parametrize("message, reason", [
    ("{not json", "not JSON"),
    (b"\xff", "not UTF-8"),
    ([1, 2], "JSON object"),
    ({"op": "x", "after": {}}, "op is 'x'"),
    ({"op": "c"}, "no 'after' row"),
    ({"op": "d", "after": {"id": 1, "name": "a", "amount": 1}}, "no 'before' row"),
    ({"op": "c", "after": {"id": 1, "name": "a", "amount": 1, "extra": 2}}, "column 'extra'"),
    ({"op": "c", "after": {"id": 1, "name": "a"}}, "no column 'amount'"),
    ({"op": "c", "after": {"id": "one", "name": "a", "amount": 1}}, "column 'id' .*'one' is not an integer"),
    ({"op": "c", "after": {"id": 2 ** 31, "name": "a", "amount": 1}}, "out of range"),
    ({"op": "c", "after": {"id": 1, "name": 5, "amount": 1}}, "not text"),
    ({"op": "c", "after": {"id": 1, "name": "a", "amount": "1e9"}}, r"does not fit numeric\(10,2\)"),
    ({"op": "c", "after": {"id": 1, "name": "a", "amount": "abc"}}, "not a decimal"),
    ({"op": "c", "after": {"id": 1, "name": "a", "amount": 1}, "ts_ms": "soon"}, "ts_ms"),
])
def test_a_message_that_does_not_fit_is_refused_with_its_offset(message, reason):
    good = {"op": "c", "after": {"id": 9, "name": "ok", "amount": 1}}
    with pytest.raises(dbz.MessageError, match=f"source 'orders', message 2: .*{reason}") as caught:
        dbz.read([good, None, message], KEYED, "orders")  # (a tombstone at 1 still counts as an offset)
    assert caught.value.offset == 2


def test_not_null_columns_refuse_null():
    schema = schema_from_ddl("id INT NOT NULL, v INT", ["id"])
    with pytest.raises(dbz.MessageError, match="NOT NULL"):
        dbz.read([{"op": "c", "after": {"id": None, "v": 1}}], schema)


def test_envelopes_and_tombstones():
    payload = {"op": "c", "after": {"id": 1, "name": "a", "amount": "2.5"}, "ts_ms": 5, "source": {"lsn": 7}}
    changes = dbz.read([json.dumps({"schema": {}, "payload": payload}), None, json.dumps(None),
                        json.dumps({"schema": {}, "payload": None}), payload], KEYED)
    assert [c.offset for c in changes] == [0, 4]
    assert changes[0].after == (1, "a", decimal.Decimal("2.50")) and changes[0].ts_ms == 5
    assert changes[0].source == {"lsn": 7}


def D(x):
    return decimal.Decimal(x).quantize(decimal.Decimal("0.01"))


def test_a_keyed_batch_nets_into_upserts_deletes_and_the_checks_it_needs():
    msgs = [{"op": "u", "before": {"id": 1}, "after": {"id": 1, "name": "a2", "amount": 5}},  # partial before
            {"op": "u", "after": {"id": 2, "name": "b2", "amount": 6}},  # no before: the key of after
            {"op": "c", "after": {"id": 3, "name": "c", "amount": 7}},
            {"op": "u", "before": {"id": 3}, "after": {"id": 4, "name": "c", "amount": 7}},  # a key move
            {"op": "d", "before": {"id": 2, "name": None, "amount": None}},
            {"op": "r", "after": {"id": 1, "name": "a3", "amount": 8}}]  # a re-snapshot replaces
    netted = dbz.net(dbz.read(msgs, KEYED), KEYED, "orders")
    assert netted.error is None and not netted.truncate and netted.late == []
    assert sorted(netted.upserts) == [(1, "a3", D(8)), (4, "c", D(7))]
    assert sorted(r[0] for r in netted.deletes) == [2, 3]
    # Each key's first message says what it needs of the rows before the batch; the batch decides the rest.
    assert [(c.image[0], c.at_least, c.at_most, c.offset) for c in netted.checks] == [
        (1, 1, None, 0), (2, 1, None, 1), (3, 0, 0, 2), (4, 0, 0, 3)]
    assert netted.checks[2].reason == "op 'c' for a key that exists (id=3)"


def test_a_message_refused_whatever_the_rows_stops_the_batch():
    msgs = [{"op": "d", "before": {"id": 1}}, {"op": "c", "after": {"id": 7, "name": "x", "amount": 1}},
            {"op": "d", "before": {"id": 1}}]
    netted = dbz.net(dbz.read(msgs, KEYED), KEYED, "orders")
    assert netted.error is not None and netted.error.offset == 2
    assert "op 'd' for a key that does not exist (id=1)" in str(netted.error)
    assert [(c.image[0], c.offset) for c in netted.checks] == [(1, 0), (7, 1)]  # checked first by the flow
    with pytest.raises(dbz.MessageError, match="message 1: primary key column 'id' is null"):
        dbz.net(dbz.read([msgs[0], {"op": "d", "before": {"id": None, "name": "x"}}], KEYED), KEYED, "orders")


def test_lenient_batches_need_no_rows_and_keep_sent_old_rows_as_late_deletes():
    msgs = [{"op": "d", "before": {"id": 1}},
            {"op": "u", "before": {"id": 2, "name": "b", "amount": 5}, "after": {"id": 2, "name": "b", "amount": 6}},
            {"op": "c", "after": {"id": 3, "name": "c", "amount": 1}}]
    netted = dbz.net(dbz.read(msgs, KEYED), KEYED, "orders", lenient=True)
    assert [(c.image[0], c.at_most) for c in netted.checks] == [(3, 0)]  # a c still needs its key absent
    assert netted.late == [(2, "b", D(5))] and netted.upserts == [(2, "b", D(6)), (3, "c", D(1))]


def test_truncate_drops_the_rows_before_and_later_messages_apply():
    msgs = [{"op": "d", "before": {"id": 5}}, {"op": "t"}, {"op": "c", "after": {"id": 2, "name": "b", "amount": 2}}]
    netted = dbz.net(dbz.read(msgs, KEYED), KEYED)
    assert netted.truncate and netted.upserts == [(2, "b", D(2))] and netted.deletes == []
    assert [(c.image[0], c.offset) for c in netted.checks] == [(5, 0)]  # (after the truncate: nothing to check)


def test_sources_without_a_key_net_copies():
    schema = schema_from_ddl("k TEXT, v INT")
    msgs = [{"op": "d", "before": {"k": "a", "v": 1}}, {"op": "c", "after": {"k": "a", "v": 1}},
            {"op": "u", "before": {"k": "b", "v": None}, "after": {"k": "c", "v": 3}},
            {"op": "c", "after": {"k": "c", "v": 3}}, {"op": "d", "before": {"k": "c", "v": 3}}]
    netted = dbz.net(dbz.read(msgs, schema), schema)
    assert sorted(zip(netted.inserts, netted.insert_counts)) == [(("a", 1), 1), (("c", 3), 1)]
    assert sorted(zip(netted.deletes, netted.delete_counts), key=repr) == [(("a", 1), 1), (("b", None), 1)]
    assert [(c.image, c.at_least, c.offset) for c in netted.checks] == [(("a", 1), 1, 0), (("b", None), 1, 2)]
    twice = dbz.net(dbz.read(msgs[:1] * 3, schema), schema)  # the j-th delete of a row needs j copies
    assert [(c.at_least, c.offset) for c in twice.checks] == [(1, 0), (2, 1), (3, 2)]
    assert "of a row that is not present" in twice.checks[2].reason
    netted = dbz.net(dbz.read([{"op": "u", "after": {"k": "a", "v": 2}}], schema), schema)
    assert netted.error is not None and "without 'before'" in str(netted.error)


COLUMNS = (("g", SqlType("text")), ("total", SqlType.numeric(12, 2)), ("d", SqlType("date")))


def view_delta(rows):
    return pa.table({"g": [r[0] for r in rows], "total": pa.array([r[1] for r in rows], pa.decimal128(12, 2)),
                     "d": pa.array([r[2] for r in rows], pa.date32()), WEIGHT: [r[3] for r in rows]})


def test_a_keyed_view_writes_one_message_per_changed_key():
    day = dt.date(1970, 1, 11)
    delta = view_delta([("a", D(1), day, -1), ("a", D(3), day, 1), ("b", D(2), day, 1), ("c", D(5), None, -1)])
    msgs = dbz.encode(delta, COLUMNS, (0,), False, "totals", 4, 1000, decimal_handling="string", schemas=False)
    by_op = {m["op"]: m for m in msgs}
    assert sorted(by_op) == ["c", "d", "u"] and len(msgs) == 3
    assert by_op["u"]["before"] == {"g": "a", "total": "1.00", "d": 10} and by_op["u"]["after"]["total"] == "3.00"
    assert by_op["c"]["before"] is None and by_op["d"]["after"] is None and by_op["d"]["before"]["d"] is None
    assert by_op["u"]["source"] == {"view": "totals", "step": 4} and by_op["u"]["ts_ms"] == 1000


def test_a_counted_view_carries_the_multiplicity():
    day = dt.date(2000, 1, 1)
    delta = view_delta([("a", D(1), day, 2), ("b", D(1), day, -1), ("c", D(1), day, -2)])
    after = {"a": 3, "b": 0, "c": 1}
    msgs = dbz.encode(delta, COLUMNS, (0, 1, 2), True, "v", 1, 0,
                      counts_after=lambda rows, weights: [after[r[0]] for r in rows], schemas=False)
    assert [(m["op"], m["before"] and m["before"]["_fv_count"], m["after"] and m["after"]["_fv_count"])
            for m in msgs] == [("u", 1, 3), ("d", 1, None), ("u", 3, 1)]


def test_written_messages_read_back_with_their_schema():
    """Precise decimals (base64) and every rendered type come back as they went out."""
    columns = tuple((c.name, c.type) for c in ALL_TYPES.columns)
    row = (-3, 2 ** 40, 1.5, float("inf"), decimal.Decimal("-12.345"), "é", False, dt.date(1969, 12, 31),
           dt.datetime(2024, 5, 6, 7, 8, 9, 10), dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.timezone.utc),
           pa.MonthDayNano([0, 2, 3_000]), [1, None])
    delta = pa.Table.from_arrays([pa.array([v], c.type.arrow) for v, c in zip(row, ALL_TYPES.columns)]
                                 + [pa.array([1], pa.int64())], schema=ALL_TYPES.arrow(with_weight=True))
    for handling in dbz.DECIMAL_HANDLING:
        envelope = dbz.encode(delta, columns, (0,), False, "v", 1, 0, decimal_handling=handling)[0]
        assert envelope["schema"] == dbz.connect_schema(columns, "v", decimal_handling=handling)
        back = dbz.read([json.dumps(envelope)], ALL_TYPES)[0].after
        assert back[:4] == row[:4] and back[5:10] == row[5:10] and back[11] == row[11], handling
        assert back[10] == pa.MonthDayNano([0, 0, 2 * 86_400 * 10 ** 9 + 3_000])  # MicroDuration: one number
        assert back[4] == row[4] if handling != "double" else float(back[4]) == float(row[4])


def test_decimal_handling_is_checked():
    with pytest.raises(ValueError, match="decimal_handling"):
        dbz.encode(view_delta([]), COLUMNS, (0,), False, "v", 1, 0, decimal_handling="exact")


# ---------------------------------------------------------------- the Kafka Connect envelope a consumer decodes
Dec = decimal.Decimal
DECIMALS = schema_from_ddl("id INT, price NUMERIC(10,2), rate NUMERIC(38,10), any_n NUMERIC, prices NUMERIC(6,3)[]",
                           ["id"])
DECIMAL_ROWS = [
    (1, Dec("12345678.91"), Dec("1234567890123456789012345678.0123456789"), Dec("0.000001"), [Dec("1.5"), None]),
    (2, Dec("-0.01"), Dec("-0.0000000001"), Dec("-98765.4321"), [Dec("-999.999")]),
    (3, Dec("0.00"), Dec("0E-10"), Dec("0"), []),
]


def decimal_delta(rows, schema=DECIMALS):
    arrays = [pa.array([r[i] for r in rows], c.type.arrow) for i, c in enumerate(schema.columns)]
    return pa.Table.from_arrays(arrays + [pa.array([1] * len(rows), pa.int64())], schema=schema.arrow(with_weight=True))


def connect_decimal(text: str, field: dict) -> decimal.Decimal:
    """What a Kafka Connect consumer does with a Decimal field: base64 of the big-endian two's-complement
    unscaled value, scaled by the schema's ``scale`` parameter (nothing of freshview used)."""
    assert field["name"] == "org.apache.kafka.connect.data.Decimal" and field["type"] == "bytes"
    unscaled = int.from_bytes(base64.b64decode(text), "big", signed=True)
    return decimal.Context(prec=100).scaleb(Dec(unscaled), -int(field["parameters"]["scale"]))


def test_messages_carry_kafka_connects_schema_by_default():
    columns = tuple((c.name, c.type) for c in DECIMALS.columns)
    out = dbz.encode(decimal_delta(DECIMAL_ROWS), columns, (0,), False, "prices", 3, 99)
    assert len(out) == 3 and all(set(m) == {"schema", "payload"} for m in out)
    schema = out[0]["schema"]
    assert schema["type"] == "struct" and schema["name"] == "freshview.prices.Envelope"
    assert [f["field"] for f in schema["fields"]] == ["before", "after", "op", "ts_ms", "source"]
    after = next(f for f in schema["fields"] if f["field"] == "after")
    price = next(f for f in after["fields"] if f["field"] == "price")
    assert price == {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                     "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "price",
                     "optional": True}
    bare = dbz.encode(decimal_delta(DECIMAL_ROWS), columns, (0,), False, "prices", 3, 99, schemas=False)
    assert bare == [m["payload"] for m in out] and bare[0]["op"] == "c" and bare[0]["source"] == {"view": "prices",
                                                                                                    "step": 3}
    assert dbz.encode(decimal_delta([]), columns, (0,), False, "prices", 3, 99) == []


def test_a_consumer_decodes_precise_decimals_exactly_with_the_schemas_scale():
    columns = tuple((c.name, c.type) for c in DECIMALS.columns)
    out = [json.loads(json.dumps(m)) for m in dbz.encode(decimal_delta(DECIMAL_ROWS), columns, (0,), False, "p", 1, 0)]
    for message, row in zip(out, DECIMAL_ROWS):
        row_schema = next(f for f in message["schema"]["fields"] if f["field"] == "after")
        fields = {f["field"]: f for f in row_schema["fields"]}
        after = message["payload"]["after"]
        assert connect_decimal(after["price"], fields["price"]) == row[1]
        assert connect_decimal(after["rate"], fields["rate"]) == row[2]
        assert connect_decimal(after["any_n"], fields["any_n"]) == row[3]
        assert [None if v is None else connect_decimal(v, fields["prices"]["items"]) for v in after["prices"]] == row[4]
        # every scale is the column's, so the digits a consumer gets are the view's own
        assert str(connect_decimal(after["price"], fields["price"])) == str(row[1].quantize(Dec("0.01")))
    back = dbz.read([json.dumps(m) for m in out], DECIMALS)  # and freshview's own reader (tick_debezium)
    assert [c.after for c in back] == [tuple(r) for r in DECIMAL_ROWS]


_CONNECT_TYPES = {"int8": int, "int16": int, "int32": int, "int64": int, "float": (float, str), "double": (float, str),
                  "boolean": bool, "string": str, "bytes": str}
_INT_BITS = {"int16": 16, "int32": 32, "int64": 64}


def conforms(value, field: dict) -> bool:
    """A JSON value fits its Kafka Connect field schema (bytes: base64 text; floats may be NaN/±Infinity)."""
    if value is None:
        return field.get("optional", False)
    if field["type"] == "array":
        return isinstance(value, list) and all(conforms(v, field["items"]) for v in value)
    if isinstance(value, bool) != (field["type"] == "boolean") or not isinstance(value, _CONNECT_TYPES[field["type"]]):
        return False
    if field["type"] in _INT_BITS:
        return -2 ** (_INT_BITS[field["type"]] - 1) <= value < 2 ** (_INT_BITS[field["type"]] - 1)
    if field["type"] == "bytes":
        return base64.b64encode(base64.b64decode(value, validate=True)).decode() == value
    if isinstance(value, str) and field["type"] in ("float", "double"):
        return value in ("NaN", "Infinity", "-Infinity")
    return True


EVERY_TYPE = [  # (column type, a value, the field schema's type and logical name)
    ("SMALLINT", -3, "int16", None), ("INTEGER", 2 ** 31 - 1, "int32", None), ("BIGINT", -2 ** 63, "int64", None),
    ("REAL", float("nan"), "float", None), ("DOUBLE PRECISION", 1.5, "double", None),
    ("NUMERIC(7,3)", Dec("-1234.567"), "bytes", "org.apache.kafka.connect.data.Decimal"),
    ("TEXT", "é", "string", None), ("BOOLEAN", False, "boolean", None),
    ("DATE", dt.date(1969, 12, 31), "int32", "io.debezium.time.Date"),
    ("TIMESTAMP", dt.datetime(2024, 5, 6, 7, 8, 9, 10), "int64", "io.debezium.time.MicroTimestamp"),
    ("TIMESTAMPTZ", dt.datetime(2024, 5, 6, 7, 8, tzinfo=dt.timezone.utc), "string", "io.debezium.time.ZonedTimestamp"),
    ("INTERVAL", pa.MonthDayNano([1, 2, 3_000]), "int64", "io.debezium.time.MicroDuration"),
    ("INTEGER[]", [1, None], "array", None), ("FLOAT4[2]", [0.5, -1.0], "array", None),
    ("NUMERIC(4,1)[]", [Dec("-1.5")], "array", None),
    ("TIMESTAMPTZ[]", [dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)], "array", None),
]


@pytest.mark.parametrize("ddl,value,connect_type,logical", EVERY_TYPE, ids=[t[0] for t in EVERY_TYPE])
@pytest.mark.parametrize("handling", dbz.DECIMAL_HANDLING)
def test_every_type_has_a_field_schema_its_values_conform_to(ddl, value, connect_type, logical, handling):
    schema = schema_from_ddl(f"k INT, v {ddl}", ["k"])
    columns = tuple((c.name, c.type) for c in schema.columns)
    delta = pa.Table.from_arrays([pa.array([1], pa.int32()), pa.array([value], schema.columns[1].type.arrow),
                                  pa.array([1], pa.int64())], schema=schema.arrow(with_weight=True))
    message = json.loads(json.dumps(dbz.encode(delta, columns, (0,), False, "v", 1, 0, decimal_handling=handling)[0]))
    after = next(f for f in message["schema"]["fields"] if f["field"] == "after")
    field = next(f for f in after["fields"] if f["field"] == "v")
    if "NUMERIC" not in ddl or handling == "precise":
        assert (field["type"], field.get("name")) == (connect_type, logical)
    else:
        assert (field.get("items", field)["type"]) == {"string": "string", "double": "double"}[handling]
    assert conforms(message["payload"]["after"]["v"], field), (message["payload"]["after"], field)
    assert message["payload"]["source"] == {"view": "v", "step": 1}
    back = dbz.read([json.dumps(message)], schema)[0].after[1]  # the envelope reads back
    if handling == "precise" or "NUMERIC" not in ddl:
        if ddl == "INTERVAL":
            assert back == pa.MonthDayNano([0, 0, int((30.4375 + 2) * 86_400 * 10 ** 9) + 3_000])
        elif ddl == "REAL":
            assert back != back
        else:
            assert back == value


def test_the_source_struct_declares_ts_ms():
    columns = (("k", SqlType("int4")),)
    delta = pa.table({"k": pa.array([1], pa.int32()), WEIGHT: [1]})
    message = dbz.encode(delta, columns, (0,), False, "v", 1, 0, source_ts_ms=5)[0]
    source = next(f for f in message["schema"]["fields"] if f["field"] == "source")
    assert [f["field"] for f in source["fields"]] == list(message["payload"]["source"]) == ["view", "step", "ts_ms"]
