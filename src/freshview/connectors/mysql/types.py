"""MySQL/MariaDB column types to freshview column types; driver values to Arrow. No I/O.

``column_type`` reads one row of ``information_schema.COLUMNS`` (DATA_TYPE,
COLUMN_TYPE, precision, scale, character set, collation) into a
``MySqlColumn``: the freshview ``SqlType`` plus what the value conversion
needs (ENUM/SET members, BIT width).  The mapping, decided once here:

=========================================  ======================================
MySQL / MariaDB                            freshview
=========================================  ======================================
tinyint, smallint, tinyint unsigned, year  int2 (``tinyint(1)``/``BOOL`` too: MySQL
                                           has no boolean, a BOOL holds 2 or -5 and
                                           ``SUM(flag)`` is a number, so it stays one)
mediumint [unsigned], smallint unsigned,   int4
int                                        int4
int unsigned, bigint, bit(1..63)           int8
bigint unsigned                            numeric(20,0)
decimal(p,s), p <= 38                      numeric(p,s) (wider: refused)
float / double                             float4 / float8
char, varchar, *text, enum, set, json      text, with the column's collation
                                           (MariaDB's JSON is LONGTEXT; MySQL's
                                           binary JSON arrives as objects: dumped)
date / datetime                            date / timestamp (no time zone)
timestamp                                  timestamptz (UTC; see below)
time                                       interval (MySQL TIME is a signed
                                           duration up to 838:59:59)
binary, varbinary, blob, geometry, ...     refused, naming the table and column
=========================================  ======================================

Time zones: a TIMESTAMP is stored in UTC and shown in the session's time zone,
so every connection freshview opens sets ``time_zone = '+00:00'``
(``SESSION_SETUP``); the binlog carries the UTC instant itself.  Both paths
give the instant in UTC.

``to_arrow(values, column)`` converts one column of Python values, as
PyMySQL (snapshot) or mysql-replication (binlog) give them, to the Arrow type
of the column's ``SqlType``.  Common columns go to Arrow in one call; the
libraries' quirks are evened out so both paths give the same values:

* zero dates (``0000-00-00``, ``0000-00-00 00:00:00``): PyMySQL returns the
  text, the binlog reader ``None`` (and a zero TIMESTAMP as 1970-01-01
  00:00:00, an instant TIMESTAMP cannot hold): all become NULL, as
  ``mysql-replication`` does;
* YEAR 0000: the binlog reader says 1900 (a year YEAR cannot hold): 0;
* BIT: PyMySQL gives big-endian bytes, the binlog reader a string of
  ``'0'``/``'1'``: both the integer;
* SET: the binlog reader gives a Python set (unordered) and ``None`` for the
  empty set: the members joined by commas in definition order, as MySQL
  prints them; the caller tells empty sets from NULLs (``empty_sets``);
* ENUM: with ``binlog_row_metadata=FULL`` the binlog reader gives the
  member's name (the index alone would be ambiguous, so the stream refuses
  binlogs without that metadata).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa

from freshview.errors import UnsupportedTypeError
from freshview.schema import MAX_DECIMAL_PRECISION, SqlType

#: Statements every connection to a source runs first (TIMESTAMPs in UTC, text as utf8mb4).
SESSION_SETUP = ("SET time_zone = '+00:00'", "SET NAMES utf8mb4")


@dataclass(frozen=True)
class MySqlColumn:
    """A source column: its name, freshview type and what converting its values needs."""

    name: str
    type: SqlType
    data_type: str  # DATA_TYPE, lower case: int, varchar, enum ...
    column_type: str  # COLUMN_TYPE: int(10) unsigned, enum('a','b') ...
    nullable: bool = True
    members: tuple[str, ...] = ()  # ENUM / SET members in definition order

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type.lower()


_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_MEMBER = re.compile(r"'((?:[^'\\]|''|\\.)*)'")


def column_type(table: str, name: str, data_type: str, column_type_text: str,
                precision: int | None = None, scale: int | None = None,
                charset: str | None = None, collation: str | None = None,
                nullable: bool = True) -> MySqlColumn:
    """A column of ``information_schema.COLUMNS`` as freshview holds it; unsupported types refused."""
    data = data_type.lower()
    full = column_type_text.lower()
    unsigned = "unsigned" in full
    members: tuple[str, ...] = ()

    def refuse(why: str) -> UnsupportedTypeError:
        return UnsupportedTypeError(f"{table}.{name} has type {column_type_text}, which freshview does not "
                                    f"maintain: {why}")

    if data == "tinyint":
        t = SqlType("int2")
    elif data == "smallint":
        t = SqlType("int4" if unsigned else "int2")
    elif data in ("mediumint", "int", "integer"):
        t = SqlType("int8" if unsigned and data != "mediumint" else "int4")
    elif data == "bigint":
        t = SqlType.numeric(20, 0) if unsigned else SqlType("int8")
    elif data == "year":
        t = SqlType("int2")
    elif data == "bit":
        width = int(precision) if precision is not None else _width(full)
        if width > 63:
            raise refuse("BIT wider than 63 bits does not fit a bigint")
        t = SqlType("int8")
    elif data in ("decimal", "numeric"):
        p = int(precision) if precision is not None else 10
        s = int(scale) if scale is not None else 0
        if p > MAX_DECIMAL_PRECISION:
            raise refuse(f"precision {p} exceeds {MAX_DECIMAL_PRECISION}, the widest exact decimal "
                         "freshview holds")
        t = SqlType.numeric(p, s)
    elif data == "float":
        t = SqlType("float4")
    elif data in ("double", "real", "double precision"):
        t = SqlType("float8")
    elif data in _TEXT:
        if charset == "binary" or (collation or "").lower() == "binary":
            raise refuse("binary strings have no text form")
        if data in ("enum", "set"):
            members = tuple(m.replace("''", "'") for m in _MEMBER.findall(column_type_text))
        t = SqlType("text", collation=collation.lower() if collation else None)
    elif data == "date":
        t = SqlType("date")
    elif data == "datetime":
        t = SqlType("timestamp")
    elif data == "timestamp":
        t = SqlType("timestamptz")
    elif data == "time":
        t = SqlType("interval")
    elif data in _BINARY:
        raise refuse("binary strings have no text form; convert the column or leave it out of the source")
    else:
        raise refuse("no freshview column type for it")
    return MySqlColumn(name, t, data, column_type_text, nullable, members)


def _width(column_type_text: str) -> int:
    m = re.search(r"\((\d+)\)", column_type_text)
    return int(m.group(1)) if m else 1


_ZERO_TIMESTAMP = dt.datetime(1970, 1, 1)
_ZERO_TEXT = ("0000-00-00",)


def to_arrow(values: Sequence, column: MySqlColumn, empty_sets: Sequence[int] = ()) -> pa.Array:
    """Convert one column of driver values (None = NULL) to the Arrow type of ``column.type``.

    ``empty_sets``: positions of a SET column where the binlog reader's None
    means the empty set, not NULL.
    """
    t = column.type
    data = column.data_type
    if empty_sets:
        values = list(values)
        for i in empty_sets:
            values[i] = ""
    if data == "bit":
        return pa.array([_bit(v) for v in values], pa.int64())
    if data == "year":
        return pa.array([0 if v == 1900 else v for v in values], pa.int16())
    if data == "set":
        return pa.array([_set_text(v, column.members) for v in values], pa.string())
    if data == "json":
        return pa.array([v if v is None or isinstance(v, str) else _json_text(v) for v in values], pa.string())
    if t.kind in ("date", "timestamp", "timestamptz"):
        return _temporal(values, t)
    if t.kind == "interval":  # TIME: a signed duration, all of it in the time part (no days), as MySQL prints it
        return pa.array([None if v is None else pa.MonthDayNano([0, 0, _micros(v) * 1000]) for v in values], t.arrow)
    if t.kind == "numeric" and t.scale == 0 and data == "bigint":
        return pa.array(values, pa.uint64()).cast(t.arrow)
    try:
        return pa.array(values, t.arrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        if t.kind == "text":  # a value the driver left undecoded (bytes of an unknown character set)
            return pa.array([v.decode("utf-8") if isinstance(v, bytes) else v for v in values], pa.string())
        raise


def _micros(v) -> int:
    return (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds


def _bit(v) -> int | None:
    if v is None or isinstance(v, int):
        return v
    if isinstance(v, (bytes, bytearray)):
        return int.from_bytes(v, "big")
    return int(v, 2)


def _set_text(v, members: tuple[str, ...]) -> str | None:
    if v is None or isinstance(v, str):
        return v
    order = {m: i for i, m in enumerate(members)}
    return ",".join(sorted(v, key=lambda m: order.get(m, len(order))))


def _json_text(v) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8")
    return json.dumps(v, separators=(", ", ": "), default=_json_default, ensure_ascii=False)


def _json_default(v):
    if isinstance(v, bytes):
        return v.decode("utf-8")
    return str(v)


def _temporal(values: Sequence, t: SqlType) -> pa.Array:
    arrow = t.arrow
    try:
        arr = pa.array(values, arrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        arr = pa.array([_zero_or_value(v, t) for v in values], arrow)
    if t.kind == "timestamptz":  # the binlog reader's zero TIMESTAMP is the epoch, which TIMESTAMP cannot hold
        epoch = pa.scalar(_ZERO_TIMESTAMP, arrow)
        import pyarrow.compute as pc

        is_zero = pc.equal(arr, epoch)
        if pc.any(is_zero).as_py():
            arr = pc.if_else(is_zero, pa.scalar(None, arrow), arr)
    return arr


def _zero_or_value(v, t: SqlType):
    if v is None or isinstance(v, (dt.date, dt.datetime)):
        return v
    if isinstance(v, (bytes, bytearray)):
        v = v.decode()
    if isinstance(v, str):
        if v.startswith(_ZERO_TEXT) or "-00" in v[:10]:
            return None  # a zero date, or one with a zero month/day: NULL, as the binlog reader gives
        parsed = dt.datetime.fromisoformat(v)
        return parsed.date() if t.kind == "date" else parsed
    raise TypeError(f"cannot read {v!r} as {t}")
