"""Arrow columns to SQLite storage values and back, preserving equality and order.

SQLite compares INTEGER, REAL and TEXT natively, so each Arrow type is
stored in the class whose comparison matches SQL's: integers, booleans,
dates (days) and timestamps (microseconds) as INTEGER; decimals of
precision ≤ 18 as their unscaled INTEGER; wider decimals as fixed-width
TEXT whose byte order is numeric order; floats as REAL; strings as TEXT
(UTF-8 byte order, i.e. code-point order, as PostgreSQL's C collation).
The row identity used for consolidation is a length-prefixed text rendering
of all columns, built with vectorised Arrow kernels.
"""

from __future__ import annotations

import decimal

import pyarrow as pa
import pyarrow.compute as pc

WIDE_DIGITS = 39  # room for any unscaled decimal128 value


def encode(col: pa.ChunkedArray | pa.Array) -> list:
    """Python values (for sqlite3) of one Arrow column; NULL stays None."""
    t = col.type
    if pa.types.is_decimal(t):
        if t.precision <= 18:
            unscaled = pc.multiply(col.cast(pa.decimal128(18, t.scale)),
                                   pa.scalar(decimal.Decimal(10) ** t.scale, pa.decimal128(t.scale + 1, 0)))
            return unscaled.cast(pa.int64()).to_pylist()
        return [None if v is None else _wide_text(v, t.scale) for v in col.to_pylist()]
    if pa.types.is_date32(t):
        return col.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(t):
        return col.cast(pa.int64()).to_pylist()
    if pa.types.is_boolean(t):
        return col.cast(pa.int8()).to_pylist()
    if pa.types.is_large_string(t):
        return col.cast(pa.string()).to_pylist()
    return col.to_pylist()


def decode(values: list, t: pa.DataType) -> pa.Array:
    """The inverse of ``encode``."""
    if pa.types.is_decimal(t):
        if t.precision <= 18:
            unscaled = pa.array(values, pa.int64()).cast(pa.decimal128(19, 0))
            scaled = pc.multiply(unscaled, pa.scalar(decimal.Decimal(1).scaleb(-t.scale)))
            return scaled.cast(t)
        return pa.array([None if v is None else _from_wide_text(v, t.scale) for v in values], t)
    if pa.types.is_date32(t):
        return pa.array(values, pa.int32()).cast(t)
    if pa.types.is_timestamp(t):
        return pa.array(values, pa.int64()).cast(t)
    if pa.types.is_boolean(t):
        return pa.array([None if v is None else bool(v) for v in values], t)
    if pa.types.is_floating(t):
        return pa.array([None if v is None else float(v) for v in values], t)
    return pa.array(values, t)


def _wide_text(value: decimal.Decimal, scale: int) -> str:
    unscaled = int(value.scaleb(scale))
    if unscaled >= 0:
        return "1" + str(unscaled).zfill(WIDE_DIGITS)
    return "0" + str(unscaled + 10 ** WIDE_DIGITS).zfill(WIDE_DIGITS)


def _from_wide_text(text: str, scale: int) -> decimal.Decimal:
    digits = int(text[1:])
    unscaled = digits if text[0] == "1" else digits - 10 ** WIDE_DIGITS
    return decimal.Decimal(unscaled).scaleb(-scale)


def row_ids(table: pa.Table, names: list[str]) -> list[str]:
    """A text identity per row: equal rows (NULL equal to NULL) get equal ids."""
    if not names:
        return [""] * table.num_rows
    parts = []
    for name in names:
        col = table.column(name)
        if pa.types.is_floating(col.type):
            # -0.0 and 0.0 are one value in SQL.
            col = pc.add(col, pa.scalar(0.0, col.type))
        text = col.cast(pa.string())
        length = pc.cast(pc.utf8_length(text), pa.string())
        field = pc.binary_join_element_wise(length, ":", text, "")
        parts.append(pc.fill_null(field, "N"))
    return pc.binary_join_element_wise(*parts, "|").to_pylist()
