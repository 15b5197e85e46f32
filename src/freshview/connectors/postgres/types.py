"""PostgreSQL types: catalog OIDs to freshview column types, text values to Arrow.

pgoutput sends values, and the snapshot reader's ``COPY`` rows, in
PostgreSQL's text output format; ``to_arrow`` is the one conversion of such
strings to Arrow.  Given a Python list it converts value by value; given an
Arrow string column it lets Arrow parse the column at once and converts value
by value only where Arrow cannot be trusted to read PostgreSQL's spelling
exactly, so both give the same values or the same errors.
Unsupported types are refused by name when a view's source is registered.
"""

from __future__ import annotations

import datetime as dt
import decimal
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.errors import UnsupportedTypeError
from freshview.schema import SqlType, parse_array_literal

# pg_type OIDs of the built-in types freshview maintains.
OID_TYPES: dict[int, str] = {
    16: "bool", 20: "int8", 21: "int2", 23: "int4", 25: "text", 700: "float4", 701: "float8",
    1042: "text", 1043: "text", 1082: "date", 1114: "timestamp", 1184: "timestamptz", 1700: "numeric",
    19: "text",  # name
    114: "json", 3802: "jsonb", 2950: "uuid", 869: "inet",
}
OID_NAMES: dict[int, str] = {
    16: "boolean", 20: "bigint", 21: "smallint", 23: "integer", 25: "text", 700: "real",
    701: "double precision", 1042: "character", 1043: "character varying", 1082: "date",
    1114: "timestamp", 1184: "timestamptz", 1700: "numeric", 19: "name",
    114: "json", 3802: "jsonb", 2950: "uuid", 869: "inet",
}
# pg_type OIDs of the built-in one-dimensional arrays of those types -> their element's OID.
ARRAY_OIDS: dict[int, int] = {
    1000: 16, 1016: 20, 1005: 21, 1007: 23, 1009: 25, 1021: 700, 1022: 701, 1014: 1042, 1015: 1043,
    1182: 1082, 1115: 1114, 1185: 1184, 1231: 1700, 199: 114, 3807: 3802, 2951: 2950, 1041: 869,
}


def sql_type(oid: int, type_modifier: int = -1, type_name: str | None = None) -> SqlType:
    """The freshview type of a column from its type OID and modifier (atttypmod)."""
    if oid in ARRAY_OIDS:  # an array's typmod is its element's
        return SqlType.array(sql_type(ARRAY_OIDS[oid], type_modifier, type_name))
    kind = OID_TYPES.get(oid)
    if kind is None:
        raise UnsupportedTypeError(f"column type {type_name or oid} is not supported")
    if kind == "numeric":
        if type_modifier >= 4:  # atttypmod = ((precision << 16) | scale) + 4
            mod = type_modifier - 4
            return SqlType.numeric((mod >> 16) & 0xFFFF, mod & 0xFFFF)
        return SqlType.numeric(None, None)
    return SqlType(kind)


def _bools(values: list) -> list:
    return [None if v is None else v == "t" for v in values]


def _decimals(values: list) -> list:
    out = []
    for v in values:
        if v is None:
            out.append(None)
        elif v == "NaN":
            raise ValueError("numeric NaN cannot be held exactly; freshview refuses it")
        else:
            out.append(decimal.Decimal(v))
    return out


def _floats(values: list) -> list:
    special = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
    return [None if v is None else special[v] if v in special else float(v) for v in values]


def _timestamps(values: list, tz: bool) -> list:
    out = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        if v in ("infinity", "-infinity"):
            raise ValueError(f"timestamp {v} cannot be represented")
        text = v
        if tz:
            # PostgreSQL prints offsets as +HH, +HH:MM or +HH:MM:SS; fromisoformat wants +HH:MM.
            sign_at = max(text.rfind("+"), text.rfind("-", 10))
            offset = text[sign_at:]
            if len(offset) == 3:
                text = text + ":00"
        parsed = dt.datetime.fromisoformat(text)
        out.append(parsed.astimezone(dt.timezone.utc) if tz else parsed)
    return out


def _dates(values: list) -> list:
    return [None if v is None else dt.date.fromisoformat(v) for v in values]


def to_arrow(values: list | pa.Array, t: SqlType) -> pa.Array:
    """Convert a column of PostgreSQL text values (None for NULL) to Arrow of type ``t``.

    ``values`` may be an Arrow string array: then Arrow parses it a column at a
    time, and only a column Arrow cannot read exactly as PostgreSQL wrote it
    (``NaN`` numerics, BC dates, ``infinity``, odd offsets ...) goes value by
    value below, which gives the same values or the same errors.
    """
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        try:
            return _parse_column(values, t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            values = values.to_pylist()
    kind = t.kind
    if kind in ("int2", "int4", "int8"):
        strings = pa.array(values, pa.string())
        return pc.cast(strings, t.arrow)
    if kind in ("float4", "float8"):
        return pa.array(_floats(values), t.arrow)
    if kind == "numeric":
        return pa.array(_decimals(values), t.arrow)
    if kind == "bool":
        return pa.array(_bools(values), pa.bool_())
    if kind == "date":
        return pa.array(_dates(values), pa.date32())
    if kind in ("timestamp", "timestamptz"):
        return pa.array(_timestamps(values, kind == "timestamptz"), t.arrow)
    if t.is_textual:  # PostgreSQL's output of json, jsonb, uuid, inet, an enum is their canonical text
        return pa.array(values, pa.string())
    if kind == "array":
        return _arrays(values, t)
    raise UnsupportedTypeError(f"no conversion for {t}")


def _arrays(values: list, t: SqlType) -> pa.Array:
    """Array literals to an Arrow list column: the elements converted a column at a time by their type."""
    elements: list = []
    offsets = [0]
    valid = []
    for v in values:
        if v is not None:
            elements.extend(parse_array_literal(v))
        offsets.append(len(elements))
        valid.append(v is not None)
    assert t.element is not None
    flat = to_arrow(elements, t.element)
    mask = pa.array([not x for x in valid], pa.bool_())
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat, type=t.arrow, mask=mask)



def _parse_column(strings: pa.Array | pa.ChunkedArray, t: SqlType) -> pa.Array:
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    kind = t.kind
    if t.is_textual:
        return strings.cast(pa.string())
    if kind == "bool":
        return pc.equal(strings, "t")
    if kind == "numeric":
        return _parse_decimals(strings, t.arrow)
    if kind in ("int2", "int4", "int8", "float4", "float8", "date", "timestamp", "timestamptz"):
        return pc.cast(strings, t.arrow)  # exact or an error; NaN, inf, -inf as PostgreSQL spells them
    raise pa.ArrowNotImplementedError(f"no column-at-a-time conversion for {t}")


def _parse_decimals(strings: pa.Array, dtype: pa.Decimal128Type) -> pa.Array:
    """Cast numeric text to ``dtype`` only where Arrow's cast cannot overflow.

    Arrow's string-to-decimal cast silently wraps around (no error, a wrong
    value) when the digits read, or the value rescaled to the target scale,
    exceed the width of its integer: '12345678901234567890123456789012345.5' to
    decimal128(38, 6) gives a 32-digit garbage number.  A string has no more
    digits than bytes and no more integer digits than bytes before its '.', so
    if those bounds fit 38 digits the direct cast is exact (or an honest
    error), if they fit 76 going through decimal256 is (whose narrowing to
    ``dtype`` checks the precision), and beyond that the values go one by one
    (``ArrowInvalid`` sends them there).  The usual column passes the first,
    cheapest bound: its longest string plus the scale.
    """
    longest = pc.max(pc.binary_length(strings)).as_py() or 0
    digits = longest + dtype.scale
    if digits > 38:
        dots = pc.find_substring(strings, ".")
        integer_digits = pc.max(pc.if_else(pc.less(dots, 0), pc.binary_length(strings), dots)).as_py() or 0
        digits = max(longest, integer_digits + dtype.scale)
    if digits <= 38:
        return pc.cast(strings, dtype)
    if digits <= 76:
        return pc.cast(pc.cast(strings, pa.decimal256(76, dtype.scale)), dtype)
    raise pa.ArrowInvalid(f"numeric text of up to {digits} digits may overflow Arrow's decimal parser")


_US_PER_DAY = 86_400_000_000
_MDN = np.dtype([("m", "<i4"), ("d", "<i4"), ("n", "<i8")])  # Arrow's month_day_nano_interval layout


def _array_text(values: pa.Array) -> pa.Array:
    """PostgreSQL array literals (``{"1",NULL,"2"}``) of a list column: every element quoted (backslash
    and double quote escaped), NULL elements the bare word, a NULL list NULL."""
    offsets = np.asarray(values.offsets, dtype=np.int64)
    elements = to_pg_text(values.flatten())
    quoted = pc.replace_substring(pc.replace_substring(elements, "\\", "\\\\"), '"', '\\"')
    quoted = pc.fill_null(pc.binary_join_element_wise('"', quoted, '"', ""), "NULL")
    lists = pa.ListArray.from_arrays(pa.array(offsets - offsets[0], pa.int32()), quoted)
    text = pc.binary_join_element_wise("{", pc.binary_join(lists, ","), "}", "")
    return pc.if_else(pc.is_valid(values), text, pa.scalar(None, pa.string()))


def to_pg_text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The inverse direction: an Arrow column as PostgreSQL input text, a column at a time (NULL stays null).

    Every type a view's column can have is rendered without Python per value:
    numbers, ``true``/``false``, ISO dates and timestamps (``Z`` for UTC),
    decimals at their scale, floats as the shortest text that reads back as the
    same value (``nan``, ``inf`` as PostgreSQL accepts them), intervals as
    ``M mon D day U microsecond`` (each part with its own sign, exactly), and
    arrays as array literals of their elements' text.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    t = values.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return values.cast(pa.string())
    if pa.types.is_null(t):
        return pa.nulls(len(values), pa.string())
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _array_text(values)
    if t == pa.month_day_nano_interval():
        parts = np.frombuffer(values.buffers()[1], dtype=_MDN, count=len(values), offset=values.offset * 16)
        months, days = pa.array(parts["m"]).cast(pa.string()), pa.array(parts["d"]).cast(pa.string())
        micros = pa.array(parts["n"] // 1000).cast(pa.string())
        text = pc.binary_join_element_wise(months, " mon ", days, " day ", micros, " microsecond", "")
        return pc.if_else(pc.is_valid(values), text, pa.scalar(None, pa.string()))
    if pa.types.is_duration(t):
        us = pc.cast(values, pa.duration("us")).cast(pa.int64())
        days = pc.divide(us, _US_PER_DAY)  # truncates toward zero; floor it so the rest is >= 0
        rest = pc.subtract(us, pc.multiply(days, _US_PER_DAY))
        days = pc.if_else(pc.less(rest, 0), pc.subtract(days, 1), days)
        rest = pc.if_else(pc.less(rest, 0), pc.add(rest, _US_PER_DAY), rest)
        signed = pc.if_else(pc.less(days, 0), pc.cast(days, pa.string()),
                            pc.binary_join_element_wise("+", pc.cast(days, pa.string()), ""))
        return pc.binary_join_element_wise(signed, " day +", pc.cast(rest, pa.string()), " microsecond", "")
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t)
            or pa.types.is_date(t) or pa.types.is_timestamp(t)):
        return pc.cast(values, pa.string())
    raise UnsupportedTypeError(f"no PostgreSQL text form for Arrow type {t}")
