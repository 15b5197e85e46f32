"""Debezium JSON change messages ↔ weighted rows.

**Reading** (``read``, then ``net``).  A message is ``str``/``bytes``
JSON or a ``dict``, with or without the Kafka Connect envelope
``{"schema": …, "payload": …}``; a ``None`` value (Kafka's tombstone after a
delete) is skipped.  ``op``: ``c`` (create) and ``r`` (snapshot read) insert
``after``, ``d`` deletes ``before``, ``u`` is a delete of the old row and an
insert of ``after``, ``t`` (truncate) deletes every row.  Messages apply in
their order; a message that does not fit is refused with its **offset** (its
index in the batch) and the reason, before anything is applied.

Old rows come from the source's own state, never from ``before`` alone: for a
source with a primary key, ``before`` (or, for ``u`` without ``before``, the
``after``) only says which key changes, so sources that send partial old rows
(PostgreSQL's REPLICA IDENTITY DEFAULT: key columns only) work; a ``u`` or
``d`` for a key that does not exist, and a ``c`` for a key that does, are
refused; ``r`` replaces the row of its key if there is one (a re-snapshot).
A source without a primary key needs the whole ``before`` row of ``u``/``d``,
and that row must be present.  Nothing here reads the source: ``net`` turns a
batch into operations on the rows before it (each key's row after the batch,
or none) and the checks its messages need of those rows, each with the offset
and reason to refuse with; the engine looks every key up once, checks and
applies (``flow/debezium.py``, ``runtime/operators/source.py``).

Values as Debezium's JSON converter renders them (and plainer spellings):
integers, floats (also ``"NaN"``, ``"Infinity"``, ``"-Infinity"``), booleans,
text; ``numeric`` as a number, a decimal string, a ``{"scale", "value"}``
struct (``VariableScaleDecimal``) or, where the envelope's schema names the
field ``org.apache.kafka.connect.data.Decimal``, base64 of the unscaled value
(``decimal.handling.mode=precise``); ``date`` as days since 1970-01-01
(``io.debezium.time.Date``) or ISO text; ``timestamp`` as microseconds since
the epoch (``MicroTimestamp``, the PostgreSQL connector's default; the schema's
``Timestamp`` means milliseconds, ``NanoTimestamp`` nanoseconds) or ISO text;
``timestamptz`` as ISO text with an offset (``ZonedTimestamp``) or
microseconds; ``interval`` as microseconds (``MicroDuration``) or ISO-8601
(``P1Y2M3DT4H5M6.5S``); arrays as JSON lists.

**Writing** (``encode``).  A view's delta becomes one message per changed
result key (the key of its result table, ``plan.shape``): a key whose old row
goes and new row comes is one ``u``, a new key ``c``, a gone key ``d``; a
view whose rows may repeat is keyed by all columns plus ``_fv_count``, the
row's multiplicity, so a multiplicity change is a ``u`` of ``_fv_count``.
Each message is ``{"before", "after", "op", "ts_ms", "source": {"view",
"step"}}``, by default inside the envelope Kafka Connect's JSON converter
writes with ``schemas.enable=true``: ``{"schema": connect_schema(...),
"payload": message}``, so a consumer knows every field's type, a precise
decimal's scale above all; ``schemas=False`` gives the bare message.  Values
are rendered as the reading side reads them: ``numeric`` per
``decimal_handling`` (``"precise"``: base64 of the unscaled value, Debezium's
default, the schema's ``org.apache.kafka.connect.data.Decimal`` with its
``scale``; ``"string"``; ``"double"``), ``date`` days, ``timestamp``
microseconds, ``timestamptz`` ISO text in UTC, ``interval`` microseconds (a
month counted as 30.4375 days, as Debezium's ``MicroDuration``), floats'
NaN/±Infinity as text.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
from dataclasses import dataclass
from dataclasses import field as _field
from typing import Any, Callable, Iterable, Mapping, Sequence

import pyarrow as pa

from freshview.errors import DeltaError
from freshview.schema import WEIGHT, SqlType, TableSchema

__all__ = ["MessageError", "Change", "Check", "Netted", "read", "net", "encode", "connect_schema", "row_key",
           "COUNT_FIELD"]

COUNT_FIELD = "_fv_count"
EPOCH = dt.date(1970, 1, 1)
EPOCH_TS = dt.datetime(1970, 1, 1)
DAYS_PER_MONTH = 365.25 / 12  # Debezium's MicroDuration
DECIMAL_HANDLING = ("precise", "string", "double")
_WIDE = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_UP)  # (wider than any numeric(38, s))
_INT_RANGE = {"int2": 2 ** 15, "int4": 2 ** 31, "int8": 2 ** 63}
_FLOAT_WORDS = {"nan": float("nan"), "infinity": float("inf"), "-infinity": float("-inf"),
                "+infinity": float("inf"), "inf": float("inf"), "-inf": float("-inf")}
_OPS = ("c", "r", "u", "d", "t")


class MessageError(DeltaError):
    """A change message that does not fit its source: ``offset`` is its index in the batch."""

    def __init__(self, offset: int, reason: str, source: str | None = None) -> None:
        where = f"source {source!r}, " if source else ""
        super().__init__(f"{where}message {offset}: {reason}")
        self.offset = offset
        self.reason = reason
        self.source = source


@dataclass(frozen=True)
class Change:
    """One decoded message: values in the source's column order (None: the image is absent)."""

    offset: int
    op: str
    before: tuple | None
    after: tuple | None
    ts_ms: int | None = None
    source: Mapping[str, Any] | None = None
    transaction: Mapping[str, Any] | None = None


# ----------------------------------------------------------------------------------------- reading
def read(messages: Iterable[Any], schema: TableSchema, source: str | None = None) -> list[Change]:
    """Parse and convert every message (tombstones skipped); ``MessageError`` names the first bad one."""
    out: list[Change] = []
    for offset, raw in enumerate(messages):
        try:
            change = _read_one(offset, raw, schema)
        except MessageError as exc:
            raise MessageError(exc.offset, exc.reason, source) from None
        if change is not None:
            out.append(change)
    return out


def _read_one(offset: int, raw: Any, schema: TableSchema) -> Change | None:
    if raw is None:
        return None
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MessageError(offset, f"not UTF-8 text: {exc}") from None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise MessageError(offset, f"not JSON: {exc}") from None
        if raw is None:
            return None
    if not isinstance(raw, Mapping):
        raise MessageError(offset, f"a message is a JSON object, not {type(raw).__name__}")
    field_schemas: Mapping[str, Mapping] = {}
    if "payload" in raw and "op" not in raw:
        field_schemas = _row_field_schemas(raw.get("schema"))
        raw = raw["payload"]
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raise MessageError(offset, "the envelope's payload is not a JSON object")
    op = raw.get("op")
    if op not in _OPS:
        raise MessageError(offset, f"op is {op!r}; expected one of c, r, u, d, t")
    before = _image(offset, raw.get("before"), schema, field_schemas, "before")
    after = _image(offset, raw.get("after"), schema, field_schemas, "after")
    if op in ("c", "r") and after is None:
        raise MessageError(offset, f"op {op!r} has no 'after' row")
    if op == "d" and before is None:
        raise MessageError(offset, "op 'd' has no 'before' row (at least its primary key)")
    if op == "u" and after is None:
        raise MessageError(offset, "op 'u' has no 'after' row")
    ts_ms = raw.get("ts_ms")
    if ts_ms is not None and (isinstance(ts_ms, bool) or not isinstance(ts_ms, int)):
        raise MessageError(offset, f"ts_ms is {ts_ms!r}, not an integer")
    return Change(offset, op, before, after, ts_ms, raw.get("source"), raw.get("transaction"))


def _row_field_schemas(schema: Any) -> dict[str, Mapping]:
    """Field name -> Kafka Connect field schema of the envelope's ``before``/``after`` row struct."""
    if not isinstance(schema, Mapping):
        return {}
    for field in schema.get("fields") or ():
        if isinstance(field, Mapping) and field.get("field") in ("after", "before"):
            return {f["field"]: f for f in field.get("fields") or () if isinstance(f, Mapping) and "field" in f}
    return {}


def _image(offset: int, row: Any, schema: TableSchema, field_schemas: Mapping[str, Mapping],
           which: str) -> tuple | None:
    if row is None:
        return None
    if not isinstance(row, Mapping):
        raise MessageError(offset, f"'{which}' is not a JSON object")
    unknown = [k for k in row if k not in schema.names]
    if unknown:
        raise MessageError(offset, f"'{which}' has column {unknown[0]!r}, which the source does not have")
    values = []
    for col in schema.columns:
        value = row.get(col.name)
        if value is None:
            if col.name not in row and which == "after":
                raise MessageError(offset, f"'{which}' has no column {col.name!r}")
            if not col.nullable and which == "after":
                raise MessageError(offset, f"column {col.name!r} is NOT NULL, but '{which}' has null")
            values.append(None)
            continue
        try:
            values.append(_value(value, col.type, field_schemas.get(col.name)))
        except (ValueError, TypeError, ArithmeticError, OverflowError) as exc:
            raise MessageError(offset, f"column {col.name!r} ({col.type}): {exc}") from None
    return tuple(values)


def _value(v: Any, t: SqlType, field: Mapping | None) -> Any:
    """One JSON value as the Python value of ``t``'s Arrow type; ValueError/TypeError say why not."""
    kind = t.kind
    name = (field or {}).get("name")
    if kind in _INT_RANGE:
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, str) and re.fullmatch(r"[+-]?\d+", v.strip()):
                v = int(v)
            else:
                raise ValueError(f"{v!r} is not an integer")
        if not -_INT_RANGE[kind] <= v < _INT_RANGE[kind]:
            raise ValueError(f"{v} is out of range")
        return v
    if kind in ("float4", "float8"):
        if isinstance(v, str) and v.strip().lower() in _FLOAT_WORDS:
            return _FLOAT_WORDS[v.strip().lower()]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{v!r} is not a number")
        return float(v)
    if kind == "numeric":
        return _decimal(v, t, field)
    if t.is_textual:  # text, and json, jsonb, uuid, inet, enums as their PostgreSQL text
        if not isinstance(v, str):
            raise ValueError(f"{v!r} is not text")
        return v
    if kind == "bool":
        if not isinstance(v, bool):
            raise ValueError(f"{v!r} is not true or false")
        return v
    if kind == "date":
        if isinstance(v, int) and not isinstance(v, bool):
            return EPOCH + dt.timedelta(days=v)
        if isinstance(v, str):
            return dt.date.fromisoformat(v.strip())
        raise ValueError(f"{v!r} is not a date (days since 1970-01-01 or ISO text)")
    if kind in ("timestamp", "timestamptz"):
        if isinstance(v, int) and not isinstance(v, bool):
            unit = {"io.debezium.time.Timestamp": 1000, "io.debezium.time.NanoTimestamp": 10 ** -3,
                    "org.apache.kafka.connect.data.Timestamp": 1000}.get(name, 1)
            micros = v * unit if unit >= 1 else v // 1000
            ts = EPOCH_TS + dt.timedelta(microseconds=micros)
            return ts.replace(tzinfo=dt.timezone.utc) if kind == "timestamptz" else ts
        if isinstance(v, str):
            ts = dt.datetime.fromisoformat(v.strip().replace("Z", "+00:00").replace("z", "+00:00"))
            if kind == "timestamptz":
                return ts.astimezone(dt.timezone.utc) if ts.tzinfo else ts.replace(tzinfo=dt.timezone.utc)
            return ts.replace(tzinfo=None) if ts.tzinfo is None else ts.astimezone(dt.timezone.utc).replace(tzinfo=None)
        raise ValueError(f"{v!r} is not a timestamp (microseconds since the epoch or ISO text)")
    if kind == "interval":
        if isinstance(v, int) and not isinstance(v, bool):
            return pa.MonthDayNano([0, 0, v * 1000])
        if isinstance(v, str):
            return _iso_duration(v)
        raise ValueError(f"{v!r} is not an interval (microseconds or ISO-8601 text)")
    if kind == "array":
        if not isinstance(v, list):
            raise ValueError(f"{v!r} is not a list")
        items = (field or {}).get("items") if field else None
        return [None if x is None else _value(x, t.element, items) for x in v]
    raise ValueError(f"type {t} cannot be read from a change message")


def _decimal(v: Any, t: SqlType, field: Mapping | None) -> decimal.Decimal:
    precision, scale = t.decimal_precision_scale
    if isinstance(v, Mapping) and "value" in v and "scale" in v:  # VariableScaleDecimal
        value = _unscaled(v["value"], int(v["scale"]))
    elif isinstance(v, str) and field is not None and field.get("name") == "org.apache.kafka.connect.data.Decimal":
        value = _unscaled(v, int((field.get("parameters") or {}).get("scale", scale)))
    elif isinstance(v, bool):
        raise ValueError(f"{v!r} is not a number")
    elif isinstance(v, (int, float, str)):
        try:
            value = decimal.Decimal(str(v).strip())
        except decimal.InvalidOperation:
            raise ValueError(f"{v!r} is not a decimal number") from None
    else:
        raise ValueError(f"{v!r} is not a decimal number")
    if not value.is_finite():
        raise ValueError(f"{v!r} is not a finite decimal")
    if value.adjusted() >= precision - scale + 1:
        raise ValueError(f"{value} does not fit numeric({precision},{scale})")
    rounded = _WIDE.quantize(value, decimal.Decimal(1).scaleb(-scale))
    if rounded.adjusted() >= precision - scale:
        raise ValueError(f"{value} does not fit numeric({precision},{scale})")
    return rounded


def _unscaled(text: Any, scale: int) -> decimal.Decimal:
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not base64 text")
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise ValueError(f"{text!r} is not base64 of a decimal's unscaled value") from None
    return _WIDE.scaleb(decimal.Decimal(int.from_bytes(raw, "big", signed=True)), -scale)


_ISO_DURATION = re.compile(r"^([+-])?P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)W)?(?:(-?\d+)D)?"
                           r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d+)?)S)?)?$")


def _iso_duration(text: str) -> pa.MonthDayNano:
    m = _ISO_DURATION.match(text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"{text!r} is not an ISO-8601 duration")
    sign = -1 if m.group(1) == "-" else 1
    years, months, weeks, days, hours, minutes = (int(g or 0) for g in m.groups()[1:7])
    seconds = decimal.Decimal(m.group(8) or 0)
    micros = int((hours * 3600 + minutes * 60 + seconds) * 1_000_000)
    return pa.MonthDayNano([sign * (years * 12 + months), sign * (weeks * 7 + days), sign * micros * 1000])


# ------------------------------------------------------------------------- changes -> per-key operations
_UNKNOWN = object()  # a key's row before the batch, not known here (the engine's copy holds it)


@dataclass(frozen=True)
class Check:
    """A condition on the source's rows before the batch that a message needs: the key of ``image``
    has between ``at_least`` and ``at_most`` (None: any number) rows; refused as ``reason`` at
    ``offset``."""

    image: tuple
    at_least: int
    at_most: int | None
    offset: int
    reason: str


@dataclass
class Netted:
    """A batch of messages as operations on the source's rows before it (``net``), in the source's
    column order.  With a primary key: ``upserts`` (each key's row after the batch) and ``deletes``
    (images whose keys have no row after it); without one, rows are their own keys: ``inserts`` and
    ``deletes`` with ``counts`` (copies; deletes remove at most the copies present).  ``truncate``:
    every row before the batch goes first.  ``late`` (under a TTL): per key, a sent old row the
    views are to lose if the source no longer holds the key.  ``error``: the first message refused
    whatever the rows before the batch are; the operations then stop before it."""

    keyed: bool
    upserts: list[tuple] = _field(default_factory=list)
    inserts: list[tuple] = _field(default_factory=list)
    insert_counts: list[int] = _field(default_factory=list)
    deletes: list[tuple] = _field(default_factory=list)
    delete_counts: list[int] = _field(default_factory=list)
    truncate: bool = False
    checks: list[Check] = _field(default_factory=list)
    late: list[tuple] = _field(default_factory=list)
    error: MessageError | None = None


def net(changes: Sequence[Change], schema: TableSchema, source: str | None = None, lenient: bool = False) -> Netted:
    """``changes`` applied in order, as operations on the rows before the batch (``Netted``), and the
    conditions on those rows that the messages need (``checks``, named by offset and reason).

    The rows before the batch are not read here: the engine looks each key up once, checks, and
    applies the operations (``runtime/operators/source.py``).  A message refused whatever those rows
    are (a ``c`` of a key an earlier message created) is ``Netted.error``.  ``lenient`` (a flow with a
    state TTL, whose source may have evicted a row): a ``u``/``d`` of a row that is not there is no
    error: a ``d`` does nothing (its ``before`` may hold only the key) and a ``u`` inserts its
    ``after``, and deletes its ``before`` if it has one (a full old row: MySQL, PostgreSQL's REPLICA
    IDENTITY FULL) from the views still holding that row (``late``).
    """
    key_at = [schema.names.index(k) for k in schema.primary_key]
    if key_at:
        return _net_keyed(changes, key_at, list(schema.primary_key), source, lenient)
    return _net_multiset(changes, source, lenient)


def _key(row: tuple, key_at: Sequence[int]) -> tuple:
    return tuple(_hashable(row[i]) for i in key_at)


def row_key(row: Sequence[Any]) -> tuple:
    """A whole row as a dict key (lists as tuples, NaN equal to NaN)."""
    return tuple(_hashable(v) for v in row)


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, float) and v != v:
        return "NaN"
    return v


def _net_keyed(changes: Sequence[Change], key_at: list[int], names: list[str], source: str | None,
               lenient: bool) -> Netted:
    for c in changes:  # a NULL key anywhere is refused first
        for row in (c.before, c.after):
            if row is not None and any(row[i] is None for i in key_at):
                missing = next(n for n, i in zip(names, key_at) if row[i] is None)
                raise MessageError(c.offset, f"primary key column {missing!r} is null", source)
    out = Netted(keyed=True)
    state: dict[tuple, Any] = {}  # key -> its row now (None: absent; _UNKNOWN: as before the batch)
    image: dict[tuple, tuple] = {}  # key -> a row image carrying it
    late: dict[tuple, tuple] = {}

    def at(row: tuple) -> tuple:
        k = _key(row, key_at)
        if k not in state:
            state[k] = None if out.truncate else _UNKNOWN
            image[k] = row
        return k

    def need(k: tuple, present: bool, c: Change, reason: str) -> None:
        out.checks.append(Check(image[k], 1 if present else 0, None if present else 0, c.offset, reason))
        state[k] = None  # known from here on (refused otherwise)

    for c in changes:
        try:
            if c.op == "t":
                out.truncate = True
                for k in state:
                    state[k] = None
            elif c.op in ("c", "r"):
                k = at(c.after)  # type: ignore[arg-type]
                if c.op == "c":
                    reason = f"op 'c' for a key that exists ({_key_text(names, k)})"
                    if state[k] is _UNKNOWN:
                        need(k, False, c, reason)
                    elif state[k] is not None:
                        raise MessageError(c.offset, reason, source)
                state[k] = c.after
            elif c.op == "d":
                k = at(c.before)  # type: ignore[arg-type]
                reason = f"op 'd' for a key that does not exist ({_key_text(names, k)})"
                if state[k] is _UNKNOWN and not lenient:
                    need(k, True, c, reason)
                elif state[k] is None and not lenient:
                    raise MessageError(c.offset, reason, source)
                state[k] = None
            else:  # u
                old = at(c.before if c.before is not None else c.after)  # type: ignore[arg-type]
                new = at(c.after)  # type: ignore[arg-type]
                reason = f"op 'u' for a key that does not exist ({_key_text(names, old)})"
                if state[old] is _UNKNOWN and not lenient:
                    need(old, True, c, reason)
                elif state[old] is None and not lenient:
                    raise MessageError(c.offset, reason, source)
                if state[old] in (None, _UNKNOWN) and c.before is not None and old not in late:
                    late[old] = c.before  # (lenient) evicted: its old row from the message, a late delete
                if new != old:
                    reason = f"op 'u' moves a row onto a key that exists ({_key_text(names, new)})"
                    if state[new] is _UNKNOWN:
                        need(new, False, c, reason)
                    elif state[new] is not None:
                        raise MessageError(c.offset, reason, source)
                state[old] = None
                state[new] = c.after
        except MessageError as exc:
            out.error = exc
            break
    for k, now in state.items():
        if now is _UNKNOWN:
            continue  # (only when the batch stopped at an error)
        if now is not None:
            out.upserts.append(now)
        elif not out.truncate:
            out.deletes.append(image[k])
    out.late = list(late.values()) if lenient else []
    return out


def _net_multiset(changes: Sequence[Change], source: str | None, lenient: bool) -> Netted:
    """Rows are their own keys and may repeat.  A delete takes a copy the batch inserted if there is
    one, else one of the rows before the batch: the j-th such delete of a row needs at least j
    copies of it there (a check at its offset)."""
    out = Netted(keyed=False)
    pool: dict[tuple, int] = {}  # the batch's own copies (inserted, not deleted again)
    taken: dict[tuple, int] = {}  # copies deletes took from the rows before the batch
    rows_of: dict[tuple, tuple] = {}
    for c in changes:
        try:
            if c.op == "t":
                out.truncate = True
                pool.clear()
                taken.clear()
                continue
            if c.op in ("d", "u"):
                if c.op == "u" and c.before is None:
                    raise MessageError(c.offset, "op 'u' without 'before' on a source without a primary key "
                                                 "(the old row cannot be found)", source)
                k = row_key(c.before)  # type: ignore[arg-type]
                rows_of.setdefault(k, c.before)  # type: ignore[arg-type]
                if pool.get(k, 0) > 0:
                    pool[k] -= 1
                elif out.truncate:  # nothing before the batch is left
                    if not lenient:
                        raise MessageError(c.offset, f"op {c.op!r} of a row that is not present", source)
                else:
                    taken[k] = taken.get(k, 0) + 1
                    if not lenient:
                        out.checks.append(Check(c.before, taken[k], None, c.offset,  # type: ignore[arg-type]
                                                f"op {c.op!r} of a row that is not present"))
            if c.op in ("c", "r", "u"):
                k = row_key(c.after)  # type: ignore[arg-type]
                rows_of.setdefault(k, c.after)  # type: ignore[arg-type]
                pool[k] = pool.get(k, 0) + 1
        except MessageError as exc:
            out.error = exc
            break
    for k, n in pool.items():
        if n:
            out.inserts.append(rows_of[k])
            out.insert_counts.append(n)
    for k, n in taken.items():
        out.deletes.append(rows_of[k])
        out.delete_counts.append(n)
    return out


def _key_text(names: Sequence[str], key: tuple) -> str:
    return ", ".join(f"{n}={v!r}" for n, v in zip(names, key))


# ----------------------------------------------------------------------------------------- writing
def encode(delta: pa.Table, columns: Sequence[tuple[str, SqlType]], key: Sequence[int], counted: bool,
           view: str, step: int, ts_ms: int, *,
           counts_after: Callable[[list[tuple], list[int]], list[int]] | None = None,
           decimal_handling: str = "precise", source_ts_ms: int | None = None,
           schemas: bool = True) -> list[dict]:
    """One view step's delta (consolidated: columns + ``_weight``) as Debezium messages (module docstring).

    ``counted``: rows may repeat; ``counts_after(rows, weights)`` gives each row's multiplicity after the step.
    ``source_ts_ms``: the newest input change's ``ts_ms``, as ``source.ts_ms`` (a pipeline's end-to-end lag).
    ``schemas``: each message as ``{"schema": connect_schema(...), "payload": message}`` (Kafka Connect's
    JSON converter's default); False: the bare message.
    """
    if decimal_handling not in DECIMAL_HANDLING:
        raise ValueError(f"decimal_handling must be one of {', '.join(DECIMAL_HANDLING)}, not {decimal_handling!r}")
    names = [n for n, _ in columns]
    render = [_renderer(t, decimal_handling) for _, t in columns]
    values = [delta.column(i).to_pylist() for i in range(len(columns))]
    weights = delta.column(WEIGHT).to_pylist()
    rows = [tuple(col[r] for col in values) for r in range(len(weights))]

    def image(row: tuple, count: int | None = None) -> dict:
        out = {n: (None if v is None else f(v)) for n, f, v in zip(names, render, row)}
        if count is not None:
            out[COUNT_FIELD] = count
        return out

    source: dict[str, Any] = {"view": view, "step": step}
    if source_ts_ms is not None:
        source["ts_ms"] = source_ts_ms
    out: list[dict] = []
    if counted:
        after = counts_after(rows, weights) if rows else []
        for row, w, n in zip(rows, weights, after):
            before_n = n - w
            op = "c" if before_n <= 0 else ("d" if n <= 0 else "u")
            out.append({"before": image(row, before_n) if before_n > 0 else None,
                        "after": image(row, n) if n > 0 else None, "op": op, "ts_ms": ts_ms, "source": source})
        return _enveloped(out, columns, view, counted, decimal_handling) if schemas else out
    olds: dict[tuple, tuple] = {}
    news: dict[tuple, tuple] = {}
    order: list[tuple] = []
    for row, w in zip(rows, weights):
        k = tuple(_hashable(row[i]) for i in key)
        if k not in olds and k not in news:
            order.append(k)
        (news if w > 0 else olds)[k] = row
    for k in order:
        old, new = olds.get(k), news.get(k)
        op = "u" if old is not None and new is not None else ("c" if new is not None else "d")
        out.append({"before": None if old is None else image(old), "after": None if new is None else image(new),
                    "op": op, "ts_ms": ts_ms, "source": source})
    return _enveloped(out, columns, view, counted, decimal_handling) if schemas else out


def _enveloped(messages: list[dict], columns: Sequence[tuple[str, SqlType]], view: str, counted: bool,
               decimal_handling: str) -> list[dict]:
    if not messages:
        return messages
    schema = connect_schema(columns, view, counted, decimal_handling)
    return [{"schema": schema, "payload": m} for m in messages]


def _renderer(t: SqlType, decimal_handling: str) -> Callable[[Any], Any]:
    kind = t.kind
    if kind in ("float4", "float8"):
        return lambda v: v if v == v and v not in (float("inf"), float("-inf")) else (
            "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity"))
    if kind == "numeric":
        if decimal_handling == "string":
            return lambda v: format(v, "f")
        if decimal_handling == "double":
            return float
        _, scale = t.decimal_precision_scale

        def precise(v: decimal.Decimal) -> str:
            unscaled = int(_WIDE.scaleb(v, scale))  # (the default context's 28 digits would round numeric(38))
            size = max(1, (unscaled.bit_length() + 8) // 8)
            return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
        return precise
    if kind == "date":
        return lambda v: (v - EPOCH).days
    if kind == "timestamp":
        return lambda v: _micros(v - EPOCH_TS)
    if kind == "timestamptz":
        return lambda v: v.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    if kind == "interval":
        return lambda v: int(round((v.months * DAYS_PER_MONTH + v.days) * 86_400_000_000)) + v.nanoseconds // 1000
    if kind == "array":
        inner = _renderer(t.element, decimal_handling)
        return lambda v: [None if x is None else inner(x) for x in v]
    return lambda v: v


def _micros(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def connect_schema(columns: Sequence[tuple[str, SqlType]], view: str, counted: bool = False,
                   decimal_handling: str = "precise") -> dict:
    """The Kafka Connect schema of ``encode``'s messages, the ``schema`` of their ``{"schema", "payload"}``
    envelopes: a struct of ``before``/``after`` (the view's columns, each optional, and ``_fv_count`` for a
    view whose rows repeat), ``op``, ``ts_ms`` and ``source`` (``view``, ``step``, ``ts_ms``)."""
    fields = [dict(_field_schema(t, decimal_handling), field=n, optional=True) for n, t in columns]
    if counted:
        fields.append({"type": "int64", "optional": False, "field": COUNT_FIELD})
    row = {"type": "struct", "fields": fields, "optional": True, "name": f"freshview.{view}.Value"}
    return {"type": "struct", "optional": False, "name": f"freshview.{view}.Envelope", "fields": [
        dict(row, field="before"), dict(row, field="after"),
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
        {"type": "struct", "optional": False, "field": "source", "name": "freshview.Source", "fields": [
            {"type": "string", "optional": False, "field": "view"},
            {"type": "int64", "optional": False, "field": "step"},
            {"type": "int64", "optional": True, "field": "ts_ms"}]}]}


def _field_schema(t: SqlType, decimal_handling: str) -> dict:
    kind = t.kind
    if kind == "numeric":
        if decimal_handling == "string":
            return {"type": "string"}
        if decimal_handling == "double":
            return {"type": "double"}
        precision, scale = t.decimal_precision_scale
        return {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)}}
    if kind == "array":
        return {"type": "array", "items": dict(_field_schema(t.element, decimal_handling), optional=True)}
    if t.enum is not None:
        return {"type": "string", "name": "io.debezium.data.Enum", "version": 1,
                "parameters": {"allowed": ",".join(t.enum.labels)}}
    if kind in ("json", "jsonb", "uuid"):
        return {"type": "string", "name": "io.debezium.data." + ("Uuid" if kind == "uuid" else "Json"), "version": 1}
    if kind == "inet":
        return {"type": "string"}
    return {
        "int2": {"type": "int16"}, "int4": {"type": "int32"}, "int8": {"type": "int64"},
        "float4": {"type": "float"}, "float8": {"type": "double"}, "text": {"type": "string"},
        "bool": {"type": "boolean"}, "null": {"type": "string"},
        "date": {"type": "int32", "name": "io.debezium.time.Date", "version": 1},
        "timestamp": {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1},
        "timestamptz": {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1},
        "interval": {"type": "int64", "name": "io.debezium.time.MicroDuration", "version": 1},
    }[kind]
