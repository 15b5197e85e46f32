"""Arrow columns to SQLite storage values and back, preserving equality and order.

This module owns the storage encoding of arrangement columns.  SQLite
compares values of one storage class natively (INTEGER and REAL
numerically, TEXT and BLOB by memcmp), so each Arrow type is stored in a
class whose comparison is the SQL type's comparison, which makes a B-tree
index on the stored values answer both equality (row identity, key lookups)
and order (min/max) questions:

* integers, booleans, dates (days), timestamps and intervals (their
  integer unit, microseconds): INTEGER; the all-NULL type stores only NULLs;
* decimals of precision <= 18: the unscaled value as INTEGER (1.50 and 1.5
  in a ``decimal(p, 2)`` column are both 150, so equality is exact);
* wider decimals: 16-byte big-endian two's complement with the sign bit
  flipped, a BLOB whose byte order is numeric order;
* floats: REAL (``-0.0`` normalised to ``0.0``), NaN as the TEXT ``'NaN'``
  because SQLite would turn a NaN REAL into NULL; TEXT sorts after every
  REAL, so NaN is the largest value, as in PostgreSQL;
* strings: TEXT (UTF-8 byte order, PostgreSQL's C collation).

NULL is never stored as SQL NULL: a UNIQUE index treats NULLs as distinct,
which would break row identity.  It is stored as a sentinel of another
storage class that sorts beyond every real value of the column: the empty
BLOB ``X''`` (BLOB sorts after INTEGER, REAL and TEXT), or the empty TEXT
``''`` for BLOB-encoded wide decimals (TEXT sorts before BLOB).  A sentinel
equals itself, so NULL equals NULL for row identity and GROUP BY keys, and
never equals a real value.  ``Codec.valid_sql`` is a range condition that
excludes the sentinel while still letting an ordered index seek.

Encoding is vectorised: ``stage`` turns a column into Arrow arrays that are
bulk-ingested into a temporary table, ``store_sql`` is the SQL expression
turning those staged columns into the stored value, ``load_sql``/``decode``
go the other way.  SQLite is dynamically typed and the ADBC reader infers
a result column's Arrow type from its first rows, so ``load_sql`` yields one
storage class per column and ``dummy_sql`` gives a typed first row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_SIGN = np.uint64(1 << 63)
_STORAGE_CLASS = {"int": "integer", "dec": "integer", "float": "real", "text": "text", "wide": "blob"}
_DUMMY = {"int": "0", "dec": "0", "float": "0.0", "text": "''", "wide": "X'00'"}


@dataclass(frozen=True)
class Codec:
    """How one Arrow column type is stored.  ``kind`` selects the encoding."""

    type: pa.DataType
    kind: str  # "int" | "float" | "text" | "dec" (precision <= 18) | "wide" (wider decimal)

    # -- Arrow -> staged arrays ---------------------------------------------------
    def stage(self, col: pa.ChunkedArray | pa.Array, name: str) -> list[tuple[str, pa.Array]]:
        """Arrays to ingest for this column, named ``name`` (+ ``name_nan`` for floats)."""
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if self.kind == "int":
            if pa.types.is_null(self.type):
                return [(name, pa.nulls(len(arr), pa.int64()))]
            if pa.types.is_date32(self.type):
                arr = arr.cast(pa.int32())
            return [(name, arr.cast(pa.int64()))]
        if self.kind == "float":
            arr = normalize_float(arr.cast(pa.float64()))
            nan = pc.fill_null(pc.is_nan(arr), False)
            return [(name, pc.if_else(nan, pa.scalar(None, pa.float64()), arr)),
                    (name + "_nan", nan.cast(pa.int64()))]
        if self.kind == "text":
            return [(name, arr.cast(pa.string()))]
        if self.kind == "dec":
            return [(name, _decimal_low_words(arr))]
        return [(name, _decimal_to_sortable_blob(arr))]

    def store_sql(self, staged: str) -> str:
        """SQL expression: the stored value from staged column(s) ``staged`` (a qualified name)."""
        if self.kind == "float":
            return f"CASE WHEN {staged}_nan THEN 'NaN' ELSE COALESCE({staged}, X'') END"
        return f"COALESCE({staged}, {self.null_sql})"

    @property
    def null_sql(self) -> str:
        """The stored sentinel of NULL (see the module docstring)."""
        return "''" if self.kind == "wide" else "X''"

    def valid_sql(self, stored: str) -> str:
        """Index-friendly range condition, true exactly for stored non-NULL values."""
        return f"{stored} > ''" if self.kind == "wide" else f"{stored} < X''"

    # -- stored -> Arrow --------------------------------------------------------
    def load_sql(self, stored: str, alias: str) -> list[str]:
        """Select expressions decoding a stored value; the sentinel (and SQL NULL) give NULL."""
        cls = _STORAGE_CLASS[self.kind]
        exprs = [f"CASE WHEN typeof({stored}) = '{cls}' THEN {stored} END AS {alias}"]
        if self.kind == "float":
            exprs.append(f"(typeof({stored}) = 'text') AS {alias}_nan")
        return exprs

    def dummy_sql(self, alias: str) -> list[str]:
        """Typed literals for a first result row, so the reader infers the right Arrow type."""
        exprs = [f"{_DUMMY[self.kind]} AS {alias}"]
        if self.kind == "float":
            exprs.append(f"0 AS {alias}_nan")
        return exprs

    def decode(self, table: pa.Table, alias: str) -> pa.Array:
        """The Arrow column (original type) from the columns ``load_sql`` produced."""
        arr = table.column(alias).combine_chunks()
        if self.kind == "int":
            if pa.types.is_null(self.type):
                return pa.nulls(len(arr))
            if pa.types.is_date32(self.type):
                return arr.cast(pa.int32()).cast(self.type)
            return arr.cast(self.type)
        if self.kind == "float":
            nan = table.column(alias + "_nan").combine_chunks().cast(pa.bool_())
            arr = pc.if_else(nan, pa.scalar(float("nan"), pa.float64()), arr.cast(pa.float64()))
            return arr.cast(self.type)
        if self.kind == "text":
            return arr.cast(self.type)
        if self.kind == "dec":
            return _decimal_from_int64(arr.cast(pa.int64()), self.type)
        return _decimal_from_sortable_blob(arr, self.type)


def codec_for(dtype: pa.DataType) -> Codec:
    """The codec of an Arrow type; raises ``TypeError`` for types the store cannot hold."""
    if pa.types.is_decimal(dtype):
        if dtype.bit_width != 128:
            raise TypeError(f"only decimal128 is supported, not {dtype}")
        return Codec(dtype, "dec" if dtype.precision <= 18 else "wide")
    if (pa.types.is_integer(dtype) and not pa.types.is_uint64(dtype)) or pa.types.is_boolean(dtype) \
            or pa.types.is_date32(dtype) or pa.types.is_timestamp(dtype) or pa.types.is_duration(dtype) \
            or pa.types.is_null(dtype):
        return Codec(dtype, "int")
    if pa.types.is_float32(dtype) or pa.types.is_float64(dtype):
        return Codec(dtype, "float")
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return Codec(dtype, "text")
    raise TypeError(f"state cannot store Arrow type {dtype}")


def normalize_float(arr: pa.Array) -> pa.Array:
    """``-0.0 -> 0.0`` (``x + 0.0``), so equal floats are one value for grouping and storage."""
    return pc.add(arr, pa.scalar(0.0, arr.type))


# -- decimal128 buffers ------------------------------------------------------------
# Decimals are converted through their 16-byte buffers with numpy: exact, and
# without a Python object per value.

def _words(arr: pa.Array) -> np.ndarray:
    """The (n, 2) little-endian 64-bit words (low, high) of a decimal128 array's values."""
    words = np.frombuffer(arr.buffers()[1], dtype="<u8")
    return words[2 * arr.offset: 2 * (arr.offset + len(arr))].reshape(-1, 2)


def _null_mask(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_null())


def _validity(mask: np.ndarray | None) -> pa.Buffer | None:
    if mask is None or not mask.any():
        return None
    return pa.py_buffer(np.packbits(~mask, bitorder="little"))


def _decimal_low_words(arr: pa.Array) -> pa.Array:
    """Unscaled values of a decimal with precision <= 18: the low word, read as signed."""
    low = _words(arr)[:, 0].view("<i8")
    return pa.array(low, pa.int64(), mask=_null_mask(arr))


def _decimal_from_words(low: np.ndarray, high: np.ndarray, mask: np.ndarray | None,
                        dtype: pa.DataType) -> pa.Array:
    data = np.empty((len(low), 2), dtype="<u8")
    data[:, 0] = low
    data[:, 1] = high
    return pa.Array.from_buffers(dtype, len(low), [_validity(mask), pa.py_buffer(data.tobytes())])


def _decimal_from_int64(arr: pa.Array, dtype: pa.DataType) -> pa.Array:
    mask = _null_mask(arr)
    values = np.asarray(pc.fill_null(arr, 0), dtype="<i8")
    high = (values >> 63).view("<u8")  # sign extension into the high word
    return _decimal_from_words(values.view("<u8"), high, mask, dtype)


def _decimal_to_sortable_blob(arr: pa.Array) -> pa.Array:
    """Big-endian two's complement with the sign bit flipped: memcmp order is numeric order."""
    words = _words(arr)
    out = np.empty((len(arr), 2), dtype=">u8")
    out[:, 0] = words[:, 1] ^ _SIGN
    out[:, 1] = words[:, 0]
    validity = _validity(_null_mask(arr))
    fixed = pa.Array.from_buffers(pa.binary(16), len(arr), [validity, pa.py_buffer(out.tobytes())])
    return fixed.cast(pa.binary())


def _decimal_from_sortable_blob(arr: pa.Array, dtype: pa.DataType) -> pa.Array:
    mask = _null_mask(arr)
    fixed = pc.fill_null(arr.cast(pa.binary()), b"\x80" + b"\x00" * 15).cast(pa.binary(16))
    raw = np.frombuffer(fixed.buffers()[1], dtype=">u8")
    words = raw[2 * fixed.offset: 2 * (fixed.offset + len(fixed))].reshape(-1, 2)
    high = (words[:, 0] ^ _SIGN).astype("<u8")
    low = words[:, 1].astype("<u8")
    return _decimal_from_words(low, high, mask, dtype)
