"""MySQL column types to freshview types, and driver values to Arrow (no server)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from freshview.connectors.mysql.types import UnsupportedTypeError, column_type, to_arrow
from freshview.schema import SqlType


@pytest.mark.parametrize("data, full, precision, scale, expected", [
    ("tinyint", "tinyint(1)", 3, 0, SqlType("int2")),
    ("tinyint", "tinyint(3) unsigned", 3, 0, SqlType("int2")),
    ("smallint", "smallint(6)", 5, 0, SqlType("int2")),
    ("smallint", "smallint(5) unsigned", 5, 0, SqlType("int4")),
    ("mediumint", "mediumint(8) unsigned", 7, 0, SqlType("int4")),
    ("int", "int(11)", 10, 0, SqlType("int4")),
    ("int", "int(10) unsigned", 10, 0, SqlType("int8")),
    ("bigint", "bigint(20)", 19, 0, SqlType("int8")),
    ("bigint", "bigint(20) unsigned", 20, 0, SqlType.numeric(20, 0)),
    ("decimal", "decimal(12,3)", 12, 3, SqlType.numeric(12, 3)),
    ("decimal", "decimal(38,10) unsigned", 38, 10, SqlType.numeric(38, 10)),
    ("float", "float", 12, None, SqlType("float4")),
    ("double", "double", 22, None, SqlType("float8")),
    ("bit", "bit(10)", 10, None, SqlType("int8")),
    ("year", "year(4)", None, None, SqlType("int2")),
    ("date", "date", None, None, SqlType("date")),
    ("datetime", "datetime(6)", None, None, SqlType("timestamp")),
    ("timestamp", "timestamp", None, None, SqlType("timestamptz")),
    ("time", "time(3)", None, None, SqlType("interval")),
    ("varchar", "varchar(20)", None, None, SqlType("text")),
    ("longtext", "longtext", None, None, SqlType("text")),
    ("enum", "enum('a','b')", None, None, SqlType("text")),
])
def test_column_types(data, full, precision, scale, expected):
    col = column_type("app.t", "c", data, full, precision, scale)
    assert col.type == expected and col.type.kind == expected.kind


def test_text_keeps_its_collation_and_enum_set_their_members():
    col = column_type("app.t", "c", "varchar", "varchar(5)", charset="utf8mb4", collation="utf8mb4_general_ci")
    assert col.type.collation == "utf8mb4_general_ci" and col.type == SqlType("text")
    col = column_type("app.t", "c", "set", "set('x','it''s','a,b?')", collation="utf8mb4_bin")
    assert col.members == ("x", "it's", "a,b?")


@pytest.mark.parametrize("data, full, precision, why", [
    ("blob", "blob", None, "binary strings"),
    ("varbinary", "varbinary(4)", None, "binary strings"),
    ("decimal", "decimal(65,2)", 65, "precision 65 exceeds 38"),
    ("bit", "bit(64)", 64, "BIT wider than 63"),
    ("geometry", "geometry", None, "no freshview column type"),
])
def test_unsupported_types_are_refused_naming_table_and_column(data, full, precision, why):
    with pytest.raises(UnsupportedTypeError, match=rf"app\.t\.amount has type .*: .*{why}"):
        column_type("app.t", "amount", data, full, precision, 2)


def test_binary_collation_text_is_refused():
    with pytest.raises(UnsupportedTypeError, match="app.t.c"):
        column_type("app.t", "c", "char", "char(3)", charset="binary", collation="binary")


def conv(data, full, values, precision=None, scale=None, empty=()):
    return to_arrow(values, column_type("app.t", "c", data, full, precision, scale), empty).to_pylist()


def test_values_of_both_drivers_agree():
    # bigint unsigned beyond int64
    assert conv("bigint", "bigint unsigned", [2**64 - 1, None, 0]) == [Decimal(2**64 - 1), None, Decimal(0)]
    # BIT: PyMySQL bytes, binlog bit strings
    assert conv("bit", "bit(10)", [b"\x02\x01", "1000000001", None], 10) == [513, 513, None]
    # YEAR 0000: the binlog reader says 1900
    assert conv("year", "year(4)", [1900, 0, 2155, None]) == [0, 0, 2155, None]
    # zero dates: PyMySQL text, binlog None
    assert conv("date", "date", ["0000-00-00", None, dt.date(2024, 2, 29), "2024-00-05"]) == \
        [None, None, dt.date(2024, 2, 29), None]
    assert conv("datetime", "datetime", ["0000-00-00 00:00:00", dt.datetime(2024, 1, 1, 1, 2, 3, 4)]) == \
        [None, dt.datetime(2024, 1, 1, 1, 2, 3, 4)]
    # TIMESTAMP: UTC instants; the binlog reader's zero TIMESTAMP is the epoch
    got = conv("timestamp", "timestamp", [dt.datetime(1970, 1, 1), dt.datetime(2024, 5, 1, 12), None])
    assert got == [None, dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc), None]
    # SET: binlog sets (unordered), None for the empty set when told; PyMySQL text
    col = ("set", "set('a','b','c')")
    assert conv(*col, [{"c", "a"}, "a,c", None, None], empty=[3]) == ["a,c", "a,c", None, ""]
    # JSON from MySQL's binary JSON
    assert conv("json", "json", [{"a": [1, 2]}, '{"a": 1}', None]) == ['{"a": [1, 2]}', '{"a": 1}', None]
    # TIME is an interval of time only (no days): -838:59:00, as PostgreSQL would print it
    assert conv("time", "time", [dt.timedelta(hours=-838, minutes=-59), None]) == \
        [pa.MonthDayNano([0, 0, -(838 * 3600 + 59 * 60) * 10**9]), None]
    assert conv("decimal", "decimal(5,2)", [Decimal("-999.99"), None], 5, 2) == [Decimal("-999.99"), None]


def test_values_out_of_the_arrow_type_raise():
    with pytest.raises(pa.ArrowInvalid):
        conv("decimal", "decimal(5,2)", [Decimal("1.001")], 5, 2)
