"""Row images cut and converted from bytes built here by MySQL's formats (no server, milliseconds).

The encoders below follow MySQL's documented binary formats (``decimal2bin``, ``my_datetime_packed_to_binary``,
``my_time_packed_to_binary``), written from the format, not from the decoder; the server-backed
comparison with the library is in ``test_rowimages_binlog``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshview.connectors.mysql import rowimages as ri
from freshview.connectors.mysql.types import column_type


def col(name, data, full, precision=None, scale=None, collation=None):
    return column_type("app.t", name, data, full, precision, scale, "utf8mb4", collation)


# -- encoders (MySQL's formats) -------------------------------------------------------------------------
def enc_decimal(value: Decimal, p: int, s: int) -> bytes:
    with decimal.localcontext(decimal.Context(prec=80)):
        sign, digits, exp = value.quantize(Decimal(1).scaleb(-s)).as_tuple()
    text = "".join(map(str, digits)).rjust(s + 1, "0")
    whole, frac = text[:len(text) - s] if s else text, text[len(text) - s:] if s else ""
    whole = whole.rjust(p - s, "0")[-(p - s):] if p > s else ""
    out = b""
    lead = (p - s) % 9
    parts = ([(whole[:lead], lead)] if lead else []) + [(whole[i:i + 9], 9) for i in range(lead, len(whole), 9)]
    parts += [(frac[i:i + 9], 9) for i in range(0, s - s % 9, 9)] + ([(frac[s - s % 9:], s % 9)] if s % 9 else [])
    for chunk, n in parts:
        out += int(chunk or "0").to_bytes(ri._DIG2BYTES[n], "big")
    data = bytearray(out)
    data[0] ^= 0x80
    if sign:
        data = bytearray(b ^ 0xFF for b in data)
    return bytes(data)


def enc_datetime2(v: dt.datetime, fsp: int) -> bytes:
    ym = v.year * 13 + v.month
    packed = (1 << 39) | ym << 22 | v.day << 17 | v.hour << 12 | v.minute << 6 | v.second
    return packed.to_bytes(5, "big") + enc_frac(v.microsecond, fsp)


def enc_frac(micros: int, fsp: int) -> bytes:
    n = (fsp + 1) // 2
    return (micros // 10 ** (6 - 2 * n)).to_bytes(n, "big") if n else b""


def enc_time2(micros: int, fsp: int) -> bytes:
    n = (fsp + 1) // 2
    neg, a = micros < 0, abs(micros)
    seconds, frac = divmod(a, 1_000_000)
    h, rest = divmod(seconds, 3600)
    hms = h << 12 | (rest // 60) << 6 | rest % 60
    packed = hms << (8 * n) | frac // 10 ** (6 - 2 * n)
    return ((-packed if neg else packed) + (0x800000 << (8 * n))).to_bytes(3 + n, "big")


def padded(nulls: int, ncols: int) -> bytes:
    """A row image's NULL bitmap, its unused high bits set (as the server leaves them)."""
    nbytes = (ncols + 7) // 8
    unused = ((1 << (8 * nbytes)) - 1) & ~((1 << ncols) - 1)
    return (nulls | unused).to_bytes(nbytes, "little")


def text(b: bytes, length_bytes: int = 1) -> bytes:
    return len(b).to_bytes(length_bytes, "little") + b


ORDERS = ri.layout_of([ri.binlog_column("id", ri.LONGLONG), ri.binlog_column("customer", ri.LONG),
                       ri.binlog_column("amount", ri.NEWDECIMAL, precision=12, decimals=2)])
ORDERS_COLS = [col("id", "bigint", "bigint(20)"), col("customer", "int", "int(11)"),
               col("amount", "decimal", "decimal(12,2)", 12, 2)]


def orders_image(i, c, a, nulls=0):
    values = [struct.pack("<q", i), struct.pack("<i", c), enc_decimal(Decimal(a), 12, 2)]
    return padded(nulls, 3) + b"".join(v for k, v in enumerate(values) if not nulls >> k & 1)


def py(images, cols):
    return [a.to_pylist() for a in images.arrays(cols)]


# -- tests ------------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_decimals_of_every_precision_and_scale(data):
    p = data.draw(st.integers(1, 38))
    s = data.draw(st.integers(0, p))
    values = data.draw(st.lists(st.integers(-(10 ** p - 1), 10 ** p - 1), min_size=1, max_size=5))
    with decimal.localcontext(decimal.Context(prec=80)):
        decimals = [Decimal(v).scaleb(-s) for v in values]
    layout = ri.layout_of([ri.binlog_column("d", ri.NEWDECIMAL, precision=p, decimals=s)])
    body = b"".join(padded(0, 1) + enc_decimal(d, p, s) for d in decimals)
    _, images = ri.decode(layout, body, "insert")
    [got] = py(images, [col("d", "decimal", f"decimal({p},{s})", p, s)])
    assert got == decimals


def test_the_fixed_width_path_equals_image_by_image_and_keeps_padding_bits_apart():
    rows = [(1, 7, "-300.25"), (2**63 - 1, -2**31, "99999999.99"), (-5, 0, "0.00"), (3, 3, "-0.01")]
    body = b"".join(orders_image(*r) for r in rows)
    assert body[0] == 0xF8  # 3 columns: the 5 unused bits set
    fast = ri.RowImages(ORDERS)
    assert ri._cut_fixed(ORDERS, body, [fast])
    slow = ri.RowImages(ORDERS)
    ri._cut(ORDERS, body, [slow])
    expected = [[r[0] for r in rows], [r[1] for r in rows], [Decimal(r[2]) for r in rows]]
    assert py(fast, ORDERS_COLS) == py(slow, ORDERS_COLS) == expected


def test_nulls_are_cut_image_by_image():
    body = orders_image(1, 7, "1.50") + orders_image(2, 0, "0", nulls=0b110) + orders_image(3, 9, "2.00", nulls=0b010)
    _, images = ri.decode(ORDERS, body, "insert")
    assert py(images, ORDERS_COLS) == [[1, 2, 3], [7, None, None], [Decimal("1.50"), None, Decimal("2.00")]]


def test_updates_alternate_old_and_new_images_and_deletes_are_old():
    body = orders_image(1, 7, "1.50") + orders_image(1, 8, "1.51") + orders_image(2, 7, "5") + \
        orders_image(2, 7, "6")
    before, after = ri.decode(ORDERS, body, "update")
    assert py(before, ORDERS_COLS)[2] == [Decimal("1.50"), Decimal("5.00")]
    assert py(after, ORDERS_COLS)[1:] == [[8, 7], [Decimal("1.51"), Decimal("6.00")]]
    old, new = ri.decode(ORDERS, orders_image(1, 7, "1"), "delete")
    assert new is None and len(old) == 1
    with pytest.raises(ValueError, match="odd number"):
        ri.decode(ORDERS, body[:len(body) // 2] + orders_image(9, 9, "9"), "update")


def test_a_cut_body_is_refused():
    body = orders_image(1, 7, "1.50") + orders_image(2, 7, "1.50", nulls=0b100)
    with pytest.raises(ValueError, match="ends inside a row image"):
        ri.decode(ORDERS, body[:-3], "insert")


def test_variable_width_text_enum_set_and_their_lengths():
    layout = ri.layout_of([
        ri.binlog_column("id", ri.LONG), ri.binlog_column("name", ri.VARCHAR, max_length=80),
        ri.binlog_column("note", ri.VARCHAR, max_length=1200), ri.binlog_column("body", ri.BLOB, length_size=2),
        ri.binlog_column("l1", ri.VARCHAR, max_length=10, encoding="cp1252"),
        ri.binlog_column("e", ri.ENUM, size=1, members=["x", "y z"]),
        ri.binlog_column("s", ri.SET, size=1, members=["a", "b", "c"]), ri.binlog_column("n", ri.SHORT)])
    assert [seg[0] for seg in layout.segments] == [True, False, False, False, False, True]
    cols = [col("id", "int", "int"), col("name", "varchar", "varchar(20)"), col("note", "varchar", "varchar(300)"),
            col("body", "text", "text"), col("l1", "varchar", "varchar(10)"), col("e", "enum", "enum('x','y z')"),
            col("s", "set", "set('a','b','c')"), col("n", "smallint", "smallint")]
    one = padded(0, 8) + struct.pack("<i", 1) + text("h☃".encode()) + text(b"n" * 300, 2) + text(b"", 2) + \
        text("é".encode("cp1252")) + bytes([2]) + bytes([0b101]) + struct.pack("<h", -2)
    two = padded(0b0100_0110, 8) + struct.pack("<i", 2) + text("𝄞".encode(), 2) + text(b"") + bytes([0]) + \
        struct.pack("<h", 5)
    _, images = ri.decode(layout, one + two, "insert")
    assert py(images, cols) == [[1, 2], ["h☃", None], ["n" * 300, None], ["", "𝄞"], ["é", ""], ["y z", ""],
                                ["a,c", None], [-2, 5]]
    bad = padded(0, 8) + struct.pack("<i", 3) + text(b"\xff") + text(b"", 2) + text(b"", 2) + text(b"") + \
        bytes([1, 0]) + struct.pack("<h", 0)
    _, images = ri.decode(layout, bad, "insert")
    with pytest.raises(ri.ImageError, match="UTF8") as error:
        images.arrays(cols[:2])
    assert error.value.column == "name"


def test_temporal_values_and_zero_dates():
    layout = ri.layout_of([
        ri.binlog_column("d", ri.DATE), ri.binlog_column("dt", ri.DATETIME2, fsp=3),
        ri.binlog_column("ts", ri.TIMESTAMP2, fsp=6), ri.binlog_column("tm", ri.TIME2, fsp=2),
        ri.binlog_column("y", ri.YEAR)])
    cols = [col("d", "date", "date"), col("dt", "datetime", "datetime(3)"), col("ts", "timestamp", "timestamp(6)"),
            col("tm", "time", "time(2)"), col("y", "year", "year")]

    def date(y, m, d):
        return (y << 9 | m << 5 | d).to_bytes(3, "little")

    when = dt.datetime(2024, 2, 29, 23, 59, 58, 123000)
    one = padded(0, 5) + date(2024, 2, 29) + enc_datetime2(when, 3) + (1_700_000_000).to_bytes(4, "big") + \
        enc_frac(654321, 6) + enc_time2(-(3600 * 10**6 + 500_000), 2) + bytes([124])
    zero = padded(0, 5) + date(0, 0, 0) + bytes(5) + enc_frac(0, 3) + bytes(4) + enc_frac(0, 6) + \
        enc_time2(0, 2) + bytes([0])
    parts = padded(0, 5) + date(2024, 0, 5) + enc_datetime2(dt.datetime(2024, 1, 1), 3)[:5] + b"\0\0" + \
        bytes(7) + enc_time2(838 * 3600 * 10**6 + 59 * 60 * 10**6 + 59 * 10**6 + 990_000, 2) + bytes([255])
    _, images = ri.decode(layout, one + zero + parts, "insert")
    got = py(images, cols)
    assert got[0] == [dt.date(2024, 2, 29), None, None]
    assert got[1] == [when, None, dt.datetime(2024, 1, 1)]
    assert got[2] == [dt.datetime(2023, 11, 14, 22, 13, 20, 654321, tzinfo=dt.timezone.utc), None, None]
    assert [v.nanoseconds for v in got[3]] == [-3_600_500_000_000, 0, (838 * 3600 + 59 * 60 + 59) * 10**9 + 990_000_000]
    assert got[4] == [2024, 0, 2155]
    invalid = padded(0, 5) + date(2023, 2, 30) + bytes(5 + 2 + 4 + 3 + 4 + 1)
    _, images = ri.decode(layout, invalid, "insert")
    with pytest.raises(ri.ImageError, match="invalid date 2023-02-30"):
        images.arrays(cols[:1])


def test_integers_floats_and_bits_of_every_width():
    layout = ri.layout_of([
        ri.binlog_column("a", ri.TINY, unsigned=True), ri.binlog_column("b", ri.INT24),
        ri.binlog_column("c", ri.INT24, unsigned=True), ri.binlog_column("d", ri.LONGLONG, unsigned=True),
        ri.binlog_column("f", ri.FLOAT), ri.binlog_column("g", ri.DOUBLE), ri.binlog_column("h", ri.BIT, bits=10)])
    cols = [col("a", "tinyint", "tinyint unsigned"), col("b", "mediumint", "mediumint"),
            col("c", "mediumint", "mediumint unsigned"), col("d", "bigint", "bigint unsigned"),
            col("f", "float", "float"), col("g", "double", "double"), col("h", "bit", "bit(10)", 10)]
    body = padded(0, 7) + bytes([255]) + (-(2**23) & 0xFFFFFF).to_bytes(3, "little") + \
        (2**24 - 1).to_bytes(3, "little") + struct.pack("<Q", 2**64 - 1) + struct.pack("<f", 1.5) + \
        struct.pack("<d", -1e300) + (513).to_bytes(2, "big")
    _, images = ri.decode(layout, body, "insert")
    assert py(images, cols) == [[255], [-(2**23)], [2**24 - 1], [Decimal(2**64 - 1)], [1.5], [-1e300], [513]]


def test_a_value_too_wide_for_the_described_type_and_an_altered_type_are_refused():
    _, images = ri.decode(ORDERS, orders_image(1, 70000, "1"), "insert")
    with pytest.raises(ri.ImageError) as error:
        images.arrays([col("customer", "smallint", "smallint")])
    assert error.value.column == "customer"
    with pytest.raises(ri.ImageError, match="the table was altered"):
        images.arrays([col("customer", "varchar", "varchar(5)")])
    with pytest.raises(KeyError):
        images.arrays([col("gone", "int", "int")])
    assert images.arrays([col("CUSTOMER", "int", "int")])[0].to_pylist() == [70000]  # names fold


def test_unhandled_types_fall_back_to_the_library():
    assert ri.binlog_column("g", 255) is None  # GEOMETRY
    assert ri.binlog_column("j", 245) is None  # MySQL's binary JSON
    assert ri.binlog_column("dt", 12) is None  # DATETIME before MySQL 5.6
    assert ri.binlog_column("e", ri.ENUM, size=1, members=None) is None  # no metadata
    assert ri.layout_of([ri.binlog_column("id", ri.LONG), None]) is None
    same = [ri.binlog_column("id", ri.LONG), ri.binlog_column("v", ri.VARCHAR, max_length=4)]
    assert ri.layout_of(same) is ri.layout_of(list(same))  # equal table maps share a layout


def test_image_sets_of_one_layout_concatenate():
    _, a = ri.decode(ORDERS, orders_image(1, 7, "1.50"), "insert")
    _, b = ri.decode(ORDERS, orders_image(2, 8, "0", nulls=0b100) + orders_image(3, 9, "3"), "insert")
    both = ri.RowImages.concat([a, b])
    assert len(both) == 3 and py(both, ORDERS_COLS) == [[1, 2, 3], [7, 8, 9], [Decimal("1.50"), None, Decimal(3)]]
    assert py(a, ORDERS_COLS) == [[1], [7], [Decimal("1.50")]]  # the parts are left as they were
    assert isinstance(both.arrays(ORDERS_COLS)[2], pa.Array)


def test_a_table_of_more_than_64_columns():
    n = 70
    layout = ri.layout_of([ri.binlog_column(f"c{i}", ri.TINY) for i in range(n)])
    cols = [col(f"c{i}", "tinyint", "tinyint") for i in range(n)]
    full = padded(0, n) + bytes(range(n))
    holes = padded(1 << 0 | 1 << 65, n) + bytes(i for i in range(n) if i not in (0, 65))
    _, images = ri.decode(layout, full + holes, "insert")
    got = py(images, cols)
    assert [v[0] for v in got] == list(range(n))
    assert [v[1] for v in got] == [None if i in (0, 65) else i for i in range(n)]
