"""PostgreSQL types: catalog OIDs to freshview column types, text values to Arrow.

pgoutput sends values in PostgreSQL's text output format; each supported type
family converts a column of such strings into an Arrow array at once.
Unsupported types are refused by name when a view's source is registered.
"""

from __future__ import annotations

import datetime as dt
import decimal
import pyarrow as pa
import pyarrow.compute as pc

from freshview.schema import SqlType

# pg_type OIDs of the built-in types freshview maintains.
OID_TYPES: dict[int, str] = {
    16: "bool", 20: "int8", 21: "int2", 23: "int4", 25: "text", 700: "float4", 701: "float8",
    1042: "text", 1043: "text", 1082: "date", 1114: "timestamp", 1184: "timestamptz", 1700: "numeric",
    19: "text",  # name
}
OID_NAMES: dict[int, str] = {
    16: "boolean", 20: "bigint", 21: "smallint", 23: "integer", 25: "text", 700: "real",
    701: "double precision", 1042: "character", 1043: "character varying", 1082: "date",
    1114: "timestamp", 1184: "timestamptz", 1700: "numeric", 19: "name",
}


class UnsupportedTypeError(ValueError):
    pass


def sql_type(oid: int, type_modifier: int = -1, type_name: str | None = None) -> SqlType:
    """The freshview type of a column from its type OID and modifier (atttypmod)."""
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


def to_arrow(values: list, t: SqlType) -> pa.Array:
    """Convert a column of PostgreSQL text values (None for NULL) to Arrow of type ``t``."""
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
    if kind == "text":
        return pa.array(values, pa.string())
    raise UnsupportedTypeError(f"no conversion for {t}")

