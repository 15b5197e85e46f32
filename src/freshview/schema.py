"""Column types and table schemas shared by every layer.

freshview speaks PostgreSQL types at its edges (view result tables, source
schemas) and Arrow inside (deltas, state).  ``SqlType`` is the one description
of a column type; it knows its PostgreSQL spelling, its Arrow type and its
Spark type, so no other module maps types by hand.  This module imports no
Spark and no database driver (Spark types are built lazily).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from typing import TYPE_CHECKING, Collection, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from freshview.errors import SchemaError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import types as st

WEIGHT = "_weight"

# Numeric precision used for PostgreSQL's unconstrained ``numeric`` (SUM of a
# numeric, AVG).  38 is the widest decimal Arrow and Spark both hold exactly.
MAX_DECIMAL_PRECISION = 38
UNCONSTRAINED_NUMERIC_SCALE = 6
# PostgreSQL prints AVG(int) with 16 fractional digits; keep at least that many.
AVG_MIN_SCALE = 16


@dataclass(frozen=True)
class SqlType:
    """A column type: ``kind`` is the PostgreSQL base name, ``precision``/``scale`` for numeric,
    ``element`` for ``array`` (a one-dimensional array of a scalar type: ``integer[]`` ↔ Arrow
    ``list<int32>`` ↔ Spark ``ArrayType``); ``dim`` for a fixed-size array such as an embedding,
    ``FLOAT4[384]`` (still Arrow ``list<float32>``; a source refuses a row whose array has another
    length, and vector views and vector sinks read the dimension from here).

    ``interval`` is PostgreSQL's (months, days, microseconds): Arrow ``month_day_nano_interval``
    (nanoseconds = microseconds · 1000) and, as Spark cannot ship its CalendarIntervalType through
    Arrow, a Spark struct ``<months: int, days: int, micros: bigint>`` (``runtime.relation`` converts
    at the boundary)."""

    kind: str
    precision: int | None = None
    scale: int | None = None
    # A text column's collation (MySQL/MariaDB sources, ``TEXT COLLATE x`` in a DDL); None is
    # binary (PostgreSQL) or, in the MySQL dialect, that dialect's default.  Not part of equality:
    # a collation changes how values compare, not what they are (sql/dialect.py applies it).
    collation: str | None = field(default=None, compare=False)
    element: "SqlType | None" = None
    dim: int | None = None  # a fixed-size array's length (``FLOAT4[384]``)
    # An enum: its (qualified) type name and its labels in declared order (pg_enum.enumsortorder).
    enum: "EnumType | None" = None

    KINDS = (
        "int2", "int4", "int8", "numeric", "float4", "float8",
        "text", "bool", "date", "timestamp", "timestamptz", "interval", "null", "array",
        "json", "jsonb", "uuid", "inet", "enum",
    )
    ELEMENT_KINDS = ("int2", "int4", "int8", "numeric", "float4", "float8", "text", "bool", "date",
                     "timestamp", "timestamptz", "json", "jsonb", "uuid", "inet", "enum")
    # Kinds held as their PostgreSQL text (Arrow string, Spark string): json keeps its text, jsonb is
    # PostgreSQL's canonical output (keys ordered and unique, ", " and ": "), uuid and inet their
    # canonical output, an enum its label.
    TEXTUAL = ("text", "json", "jsonb", "uuid", "inet", "enum")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise SchemaError(f"unknown column type {self.kind!r}")
        if (self.kind == "array") != (self.element is not None):
            raise SchemaError("an array type needs an element type (and only an array has one)")
        if self.element is not None and self.element.kind not in self.ELEMENT_KINDS:
            raise SchemaError(f"arrays of {self.element} are not supported (elements: "
                              + ", ".join(self.ELEMENT_KINDS) + ")")
        if self.dim is not None and (self.kind != "array" or self.dim < 1):
            raise SchemaError("a fixed array length is a positive number, on an array type")
        if (self.kind == "enum") != (self.enum is not None):
            raise SchemaError("an enum type needs its labels (and only an enum has them)")

    # -- classification -------------------------------------------------
    @property
    def is_integer(self) -> bool:
        return self.kind in ("int2", "int4", "int8")

    @property
    def is_numeric(self) -> bool:
        return self.is_integer or self.kind in ("numeric", "float4", "float8")

    @property
    def is_float(self) -> bool:
        return self.kind in ("float4", "float8")

    @property
    def is_temporal(self) -> bool:
        return self.kind in ("date", "timestamp", "timestamptz")

    @property
    def is_array(self) -> bool:
        return self.kind == "array"

    @property
    def is_json(self) -> bool:
        return self.kind in ("json", "jsonb")

    @property
    def is_textual(self) -> bool:
        """Held as text in Arrow and Spark (text, json, jsonb, uuid, inet, enum)."""
        return self.kind in self.TEXTUAL

    @property
    def is_float_vector(self) -> bool:
        """A one-dimensional array of float4/float8: what a vector view searches."""
        return self.element is not None and self.element.is_float

    # -- spellings -------------------------------------------------------
    @property
    def pg(self) -> str:
        """The PostgreSQL spelling used in DDL of result tables."""
        names = {
            "int2": "smallint", "int4": "integer", "int8": "bigint",
            "float4": "real", "float8": "double precision", "text": "text",
            "bool": "boolean", "date": "date", "timestamp": "timestamp",
            "timestamptz": "timestamptz", "interval": "interval", "null": "text",
            "json": "json", "jsonb": "jsonb", "uuid": "uuid", "inet": "inet",
        }
        if self.enum is not None:
            return self.enum.name
        if self.kind == "numeric":
            if self.precision is None:
                return "numeric"
            return f"numeric({self.precision},{self.scale or 0})"
        if self.element is not None:
            return f"{self.element.pg}[]"
        return names[self.kind]

    def __str__(self) -> str:
        return self.pg

    @property
    def arrow(self) -> pa.DataType:
        if self.kind == "numeric":
            p, s = self.decimal_precision_scale
            return pa.decimal128(p, s)
        if self.element is not None:
            return pa.list_(self.element.arrow)
        return _ARROW[self.kind]

    @property
    def decimal_precision_scale(self) -> tuple[int, int]:
        """Precision and scale used to hold this numeric exactly in Arrow and Spark."""
        if self.precision is None:
            scale = UNCONSTRAINED_NUMERIC_SCALE if self.scale is None else self.scale
            return MAX_DECIMAL_PRECISION, scale
        return min(self.precision, MAX_DECIMAL_PRECISION), self.scale or 0

    def spark(self) -> "st.DataType":
        from pyspark.sql import types as st

        if self.kind == "numeric":
            p, s = self.decimal_precision_scale
            return st.DecimalType(p, s)
        if self.element is not None:
            return st.ArrayType(self.element.spark(), True)
        if self.kind == "interval":
            return st.StructType([st.StructField("months", st.IntegerType()), st.StructField("days", st.IntegerType()),
                                  st.StructField("micros", st.LongType())])
        return {
            "int2": st.ShortType(), "int4": st.IntegerType(), "int8": st.LongType(),
            "float4": st.FloatType(), "float8": st.DoubleType(), "text": st.StringType(),
            "bool": st.BooleanType(), "date": st.DateType(), "timestamp": st.TimestampNTZType(),
            "timestamptz": st.TimestampType(),
            "null": st.StringType(), "json": st.StringType(), "jsonb": st.StringType(), "uuid": st.StringType(),
            "inet": st.StringType(), "enum": st.StringType(),
        }[self.kind]

    # -- constructors ----------------------------------------------------
    @staticmethod
    def numeric(precision: int | None = None, scale: int | None = None) -> "SqlType":
        return SqlType("numeric", precision, scale)

    @staticmethod
    def array(element: "SqlType", dim: int | None = None) -> "SqlType":
        return SqlType("array", element=element, dim=dim)

    @staticmethod
    def enum_of(name: str, labels: Sequence[str]) -> "SqlType":
        return SqlType("enum", enum=EnumType(name, tuple(labels)))

    def to_json(self) -> list:
        """``[kind, precision, scale]`` (plus the element's for an array, then a fixed array's length;
        an enum: ``[kind, None, None, None, None, [name, labels]]``), as ``TableSchema`` stores it."""
        out: list = [self.kind, self.precision, self.scale]
        if self.enum is not None:
            return out + [None, None, [self.enum.name, list(self.enum.labels)]]
        if self.element is not None:
            out.append(self.element.to_json())
        return out + [self.dim] if self.dim is not None else out

    @staticmethod
    def from_json(data: list) -> "SqlType":
        element = SqlType.from_json(data[3]) if len(data) > 3 and data[3] is not None else None
        dim = data[4] if len(data) > 4 else None
        enum = EnumType(data[5][0], tuple(data[5][1])) if len(data) > 5 and data[5] is not None else None
        return SqlType(data[0], data[1], data[2], element=element, dim=dim, enum=enum)

    @staticmethod
    def from_arrow(dtype: pa.DataType) -> "SqlType":
        if pa.types.is_fixed_size_list(dtype):
            return SqlType.array(SqlType.from_arrow(dtype.value_type), dtype.list_size)
        if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
            return SqlType.array(SqlType.from_arrow(dtype.value_type))
        if pa.types.is_interval(dtype) or pa.types.is_duration(dtype):
            return SqlType("interval")
        if pa.types.is_decimal(dtype):
            return SqlType.numeric(dtype.precision, dtype.scale)
        if pa.types.is_timestamp(dtype):
            return SqlType("timestamptz" if dtype.tz else "timestamp")
        if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype):
            return SqlType("text")  # string_view: e.g. tpcgen-cli's and DuckDB's Parquet/Arrow output
        for kind, arrow_type in _ARROW.items():
            if kind != "null" and dtype == arrow_type:
                return SqlType(kind)
        if pa.types.is_int8(dtype) or pa.types.is_uint8(dtype):
            return SqlType("int2")
        if pa.types.is_uint16(dtype):
            return SqlType("int4")
        if pa.types.is_uint32(dtype):
            return SqlType("int8")
        if pa.types.is_date64(dtype):
            return SqlType("date")
        raise SchemaError(f"Arrow type {dtype} has no freshview column type")


@dataclass(frozen=True)
class EnumType:
    """A PostgreSQL enum: equal by label, ordered by the labels' declared order."""

    name: str
    labels: tuple[str, ...]

    def rank(self, label: str) -> int:
        """The label's position in the declared order; ``ValueError`` for a value that is not a label."""
        try:
            return self.labels.index(label)
        except ValueError:
            raise ValueError(f'invalid input value for enum {self.name}: "{label}"') from None


_ARROW: dict[str, pa.DataType] = {
    "int2": pa.int16(), "int4": pa.int32(), "int8": pa.int64(),
    "float4": pa.float32(), "float8": pa.float64(), "text": pa.string(),
    "bool": pa.bool_(), "date": pa.date32(), "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"), "interval": pa.month_day_nano_interval(),
    "null": pa.null(), "json": pa.string(), "jsonb": pa.string(), "uuid": pa.string(), "inet": pa.string(),
    "enum": pa.string(),
}

# PostgreSQL type names (and common aliases) -> kind.
_PG_NAMES: dict[str, str] = {
    "smallint": "int2", "int2": "int2",
    "int": "int4", "integer": "int4", "int4": "int4", "serial": "int4",
    "bigint": "int8", "int8": "int8", "bigserial": "int8",
    "numeric": "numeric", "decimal": "numeric",
    "real": "float4", "float4": "float4",
    "double precision": "float8", "float8": "float8", "double": "float8", "float": "float8",
    "text": "text", "varchar": "text", "character varying": "text", "char": "text",
    "character": "text", "bpchar": "text", "string": "text", "name": "text",
    "boolean": "bool", "bool": "bool",
    "date": "date",
    "timestamp": "timestamp", "timestamp without time zone": "timestamp",
    "timestamptz": "timestamptz", "timestamp with time zone": "timestamptz",
    "interval": "interval",
    "json": "json", "jsonb": "jsonb", "uuid": "uuid", "inet": "inet",
}

_TYPE_RE = re.compile(r"^\s*([a-z][a-z0-9 ]*?)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$", re.I)


_ENUM_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\"]*)\s+as\s+enum\s*\((.*)\)$", re.I | re.S)
_COLLATE_RE = re.compile(r"^(.*?)\s+collate\s+\"?([A-Za-z0-9_]+)\"?\s*$", re.I | re.S)


def parse_type(text: str) -> SqlType:
    """Parse a PostgreSQL type name such as ``NUMERIC(10,2)``, ``varchar(20)``, ``integer[]`` or ``text COLLATE utf8mb4_bin``."""
    collate = _COLLATE_RE.match(text)
    if collate:
        base = parse_type(collate.group(1))
        if base.kind != "text":
            raise SchemaError(f"COLLATE applies to text columns, not {base}")
        return SqlType("text", collation=collate.group(2).lower())
    stripped = text.strip()
    enum = _ENUM_RE.match(stripped)
    if enum:  # mood AS ENUM ('sad', 'ok', 'happy'): an enum, as CREATE TYPE declares it
        return SqlType.enum_of(enum.group(1), [v.replace("''", "'") for v in re.findall(r"'((?:[^']|'')*)'",
                                                                                          enum.group(2))])
    if stripped.endswith("[]"):
        return SqlType.array(parse_type(stripped[:-2]))
    fixed = re.match(r"^(.*?)\s*\[\s*(\d+)\s*\]$", stripped)
    if fixed:  # FLOAT4[384]: a fixed-size array (an embedding)
        if int(fixed.group(2)) < 1:
            raise SchemaError(f"an array length must be at least 1: {text!r}")
        return SqlType.array(parse_type(fixed.group(1)), int(fixed.group(2)))
    match = _TYPE_RE.match(text)
    if not match:
        raise SchemaError(f"cannot read column type {text!r}")
    name = " ".join(match.group(1).lower().split())
    kind = _PG_NAMES.get(name)
    if kind is None:
        raise SchemaError(
            f"unsupported column type {text!r}; supported: "
            + ", ".join(sorted(set(_PG_NAMES)))
        )
    if kind == "numeric":
        precision = int(match.group(2)) if match.group(2) else None
        scale = int(match.group(3)) if match.group(3) else (0 if precision is not None else None)
        if precision is not None and precision > MAX_DECIMAL_PRECISION:
            raise SchemaError(
                f"numeric precision {precision} exceeds {MAX_DECIMAL_PRECISION}, "
                "the widest exact decimal freshview holds"
            )
        return SqlType.numeric(precision, scale)
    return SqlType(kind)


@dataclass(frozen=True)
class Column:
    name: str
    type: SqlType
    nullable: bool = True


@dataclass(frozen=True)
class TableSchema:
    """An ordered list of named, typed columns, plus an optional primary key."""

    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for col in self.columns:
            if col.name in seen:
                raise SchemaError(f"column {col.name!r} appears twice")
            if col.name == WEIGHT:
                raise SchemaError(f"column name {WEIGHT!r} is reserved for delta weights")
            seen.add(col.name)
        for key in self.primary_key:
            if key not in seen:
                raise SchemaError(f"primary key column {key!r} is not a column of the table")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise SchemaError(f"no column {name!r}")

    def projected(self, names: "Collection[str] | None") -> "TableSchema":
        """Only the columns ``names`` (in this schema's order; None: all), the key kept if all its columns are
        (a table read for some of its columns, ``Snapshot.read(columns=)``)."""
        if names is None:
            return self
        unknown = set(names) - set(self.names)
        if unknown:
            raise SchemaError(f"no column {', '.join(sorted(unknown))} in the table")
        kept = tuple(c for c in self.columns if c.name in set(names))
        return TableSchema(kept, self.primary_key if set(self.primary_key) <= set(names) else ())

    def arrow(self, with_weight: bool = False) -> pa.Schema:
        fields = [pa.field(c.name, c.type.arrow, nullable=True) for c in self.columns]
        if with_weight:
            fields.append(pa.field(WEIGHT, pa.int64(), nullable=False))
        return pa.schema(fields)

    def to_json(self) -> dict:
        return {
            "columns": [[c.name, c.type.kind, c.type.precision, c.type.scale, c.nullable]
                        + c.type.to_json()[3:] for c in self.columns],
            "primary_key": list(self.primary_key),
        }

    @staticmethod
    def from_json(data: dict) -> "TableSchema":
        cols = tuple(Column(c[0], SqlType.from_json([c[1], c[2], c[3]] + c[5:8]), c[4]) for c in data["columns"])
        return TableSchema(cols, tuple(data["primary_key"]))

    @staticmethod
    def of(columns: Iterable[tuple[str, SqlType]], primary_key: Sequence[str] = ()) -> "TableSchema":
        return TableSchema(tuple(Column(n, t) for n, t in columns), tuple(primary_key))


# ---------------------------------------------------------------------- intervals in Arrow
_MDN = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])  # month_day_nano_interval's layout
INTERVAL_STRUCT = pa.struct([("months", pa.int32()), ("days", pa.int32()), ("micros", pa.int64())])


def interval_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A month_day_nano_interval array as numpy (months, days, microseconds: int64; valid: bool)."""
    raw = np.frombuffer(arr.buffers()[1], dtype=_MDN, count=len(arr), offset=arr.offset * _MDN.itemsize)
    valid = np.ones(len(arr), bool) if arr.null_count == 0 else np.asarray(arr.is_valid())
    return (raw["months"].astype(np.int64), raw["days"].astype(np.int64), raw["nanos"] // 1000, valid)


def interval_array(months: np.ndarray, days: np.ndarray, micros: np.ndarray, valid: np.ndarray) -> pa.Array:
    """The month_day_nano_interval array of int64 parts (NULL where not ``valid``); a part out of range
    (months/days beyond int32, microseconds beyond ±292 years) raises ``OverflowError``."""
    n = len(valid)
    m, d, u = (np.where(valid, x, 0).astype(np.int64) for x in (months, days, micros))
    if (np.abs(m) > 2**31 - 1).any() or (np.abs(d) > 2**31 - 1).any() or (np.abs(u) > (2**63 - 1) // 1000).any():
        raise OverflowError("interval out of range")
    raw = np.zeros(n, dtype=_MDN)
    raw["months"], raw["days"], raw["nanos"] = m, d, u * 1000
    mask = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.Array.from_buffers(pa.month_day_nano_interval(), n, [mask, pa.py_buffer(raw.tobytes())],
                                 null_count=int(n - valid.sum()))


def interval_to_struct(arr: pa.Array) -> pa.Array:
    """month_day_nano → Spark's struct<months, days, micros> (Spark cannot ship intervals through Arrow)."""
    m, d, u, valid = interval_parts(arr)
    fields = [pa.array(m, pa.int32()), pa.array(d, pa.int32()), pa.array(u, pa.int64())]
    return pa.StructArray.from_arrays(fields, fields=list(INTERVAL_STRUCT), mask=pa.array(~valid))


def interval_from_struct(arr: pa.Array) -> pa.Array:
    """The inverse of ``interval_to_struct``."""
    parts = [np.asarray(arr.field(i).fill_null(0), dtype=np.int64) for i in range(3)]
    return interval_array(*parts, np.asarray(arr.is_valid()))


def schema_from_ddl(text: str, primary_key: Sequence[str] = ()) -> TableSchema:
    """Read ``"o_id INT, amount NUMERIC(10,2), ..."`` into a schema.

    A ``PRIMARY KEY`` marker on a column, or a trailing ``PRIMARY KEY (a, b)``
    clause, is honoured unless ``primary_key`` is given explicitly.
    """
    parts = _split_top_level(text)
    if not parts:
        raise SchemaError("a schema needs at least one column")
    columns: list[tuple[str, SqlType]] = []
    keys: list[str] = []
    not_null: set[str] = set()
    for part in parts:
        m = re.match(r"^\s*primary\s+key\s*\(([^)]*)\)\s*$", part, re.I)
        if m:
            keys.extend(k.strip().strip('"').lower() for k in m.group(1).split(","))
            continue
        m = re.match(r'^\s*("[^"]+"|[A-Za-z_][A-Za-z0-9_$]*)\s+(.+?)\s*$', part)
        if not m:
            raise SchemaError(f"cannot read column definition {part.strip()!r}; expected 'name TYPE'")
        raw_name, rest = m.group(1), m.group(2)
        name = raw_name[1:-1] if raw_name.startswith('"') else raw_name.lower()
        flags = re.search(r"\b(primary\s+key|not\s+null|null)\b.*$", rest, re.I)
        type_text = rest[: flags.start()] if flags else rest
        if flags and re.search(r"primary\s+key", flags.group(0), re.I):
            keys.append(name)
        if flags and re.search(r"not\s+null|primary\s+key", flags.group(0), re.I):
            not_null.add(name)
        columns.append((name, parse_type(type_text)))
    pk = tuple(primary_key) if primary_key else tuple(keys)
    cols = tuple(Column(n, t, n not in not_null and n not in pk) for n, t in columns)
    return TableSchema(cols, pk)


def parse_array_literal(text: str) -> list:
    """A one-dimensional PostgreSQL array literal (``{1,NULL,"a b","x\\"y"}``) as its elements' texts
    (None for NULL); a multi-dimensional array or a lower bound (``[0:1]={...}``) raises ``ValueError``."""
    if not text.startswith("{") or not text.endswith("}"):
        raise ValueError(f"array value {text!r}: freshview holds one-dimensional arrays with lower bound 1")
    out: list = []
    i, n = 1, len(text) - 1
    if n == 1:
        return out
    while i <= n:
        if text[i] == "{":
            raise ValueError(f"array value {text[:40]!r}: multi-dimensional arrays are not supported")
        if text[i] == '"':
            i += 1
            chars = []
            while text[i] != '"':
                if text[i] == "\\":
                    i += 1
                chars.append(text[i])
                i += 1
            out.append("".join(chars))
            i += 1
        else:
            j = i
            while i < n and text[i] != ",":
                i += 1
            word = text[j:i].strip()
            out.append(None if word.upper() == "NULL" else word)
        i += 1  # the comma (or the closing brace)
    return out


def array_length_mismatch(table: pa.Table, schema: TableSchema, names: Sequence[str] | None = None
                          ) -> tuple[int, str, int] | None:
    """The first row of ``table`` (columns ``names``, default the schema's names) whose fixed-size array
    (``FLOAT4[384]``) has another length: (row, column, length); NULL arrays are fine."""
    names = list(names or schema.names)
    for i, col in enumerate(schema.columns):
        if col.type.dim is None:
            continue
        arr = table.column(names[i]).combine_chunks()
        if isinstance(arr, pa.ChunkedArray):  # an empty table
            continue
        lengths = np.asarray(pc.fill_null(pc.list_value_length(arr), col.type.dim))
        bad = np.flatnonzero(lengths != col.type.dim)
        if len(bad):
            return int(bad[0]), col.name, int(lengths[bad[0]])
    return None


def schema_from_arrow(schema: pa.Schema, primary_key: Sequence[str] = ()) -> TableSchema:
    cols = tuple(
        Column(f.name, SqlType.from_arrow(f.type), f.nullable)
        for f in schema
        if f.name != WEIGHT
    )
    return TableSchema(cols, tuple(primary_key))


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current))
    return [p for p in parts if p.strip()]
