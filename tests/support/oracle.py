"""The independent reference: PostgreSQL evaluating the same SQL from scratch.

freshview maintains views incrementally; the oracle recomputes them from the
integrated source contents on every step.  A difference between the two is a
bug in freshview (or, rarely, a documented semantic difference that the test
must avoid).

``PgOracle`` works in its own schema (``t_<random>``) so tests never see each
other's tables, and ``assert_same_rows`` compares results as multisets with
numeric tolerance and a readable diff.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid
from collections import Counter, defaultdict
from decimal import Decimal
from typing import Any, Sequence

import psycopg
import pyarrow as pa
from psycopg import sql as pgsql

from freshview.schema import WEIGHT, TableSchema

# PostgreSQL type OIDs -> Arrow types for query results.  numeric is handled
# separately (its scale varies per value, e.g. AVG).
_OID_ARROW: dict[int, pa.DataType] = {
    16: pa.bool_(),
    20: pa.int64(), 21: pa.int16(), 23: pa.int32(), 26: pa.int64(),
    700: pa.float32(), 701: pa.float64(),
    25: pa.string(), 1043: pa.string(), 1042: pa.string(), 19: pa.string(), 18: pa.string(),
    1082: pa.date32(), 1114: pa.timestamp("us"), 1184: pa.timestamp("us", tz="UTC"),
    1186: pa.month_day_nano_interval(),
}
_ISO_INTERVAL = re.compile(r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)W)?(?:(-?\d+)D)?"
                           r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?[\d.]+)S)?)?")


def _interval_parts(text: str) -> tuple[int, int, int]:
    """PostgreSQL's ISO 8601 interval text (IntervalStyle iso_8601) as (months, days, nanoseconds):
    the parts kept apart, as freshview's month_day_nano values hold them ('1 day' is not '24 hours')."""
    m = _ISO_INTERVAL.fullmatch(text)
    assert m, f"cannot read interval {text!r}"
    y, mo, w, d, h, mi, s = m.groups()
    micros = int(h or 0) * 3_600_000_000 + int(mi or 0) * 60_000_000 + int(Decimal(s or 0) * 1_000_000)
    return (int(y or 0) * 12 + int(mo or 0), int(w or 0) * 7 + int(d or 0), micros * 1000)
_NUMERIC_OID = 1700
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


class _IntervalLoader(psycopg.adapt.Loader):
    def load(self, data: Any) -> tuple[int, int, int]:
        return _interval_parts(bytes(data).decode())


class PgOracle:
    """Tables, loads and views in a private schema of a PostgreSQL server."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        # autocommit: every statement stands alone, and a failing query (a
        # test probing an error) does not poison the connection.
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("SET TIME ZONE 'UTC'")
        self.conn.execute("SET IntervalStyle = 'iso_8601'")
        self.conn.adapters.register_loader("interval", _IntervalLoader)
        self.schema_name: str | None = None
        self.tables: dict[str, TableSchema] = {}
        self.reset()

    # -- lifecycle ---------------------------------------------------------
    def reset(self) -> None:
        """Drop everything this oracle created and start over in a new schema."""
        self._drop_schema()
        self.schema_name = f"t_{uuid.uuid4().hex[:16]}"
        ident = pgsql.Identifier(self.schema_name)
        self.conn.execute(pgsql.SQL("CREATE SCHEMA {}").format(ident))
        self.conn.execute(pgsql.SQL("SET search_path TO {}").format(ident))
        self.tables = {}

    def close(self) -> None:
        if self.conn.closed:
            return
        try:
            self._drop_schema()
        finally:
            self.conn.close()

    def _drop_schema(self) -> None:
        if self.schema_name is not None:
            self.conn.execute(
                pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(pgsql.Identifier(self.schema_name))
            )
            self.schema_name = None

    def __enter__(self) -> "PgOracle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- DDL and data --------------------------------------------------------
    def create_table(self, name: str, schema: TableSchema) -> None:
        cols = []
        for col in schema.columns:
            spec = pgsql.SQL("{} {}").format(pgsql.Identifier(col.name), pgsql.SQL(col.type.pg))
            if not col.nullable:
                spec = pgsql.SQL("{} NOT NULL").format(spec)
            cols.append(spec)
        # The primary key also double-checks the random streams: a stream
        # that produced two live rows with one key fails at load time.
        if schema.primary_key:
            cols.append(pgsql.SQL("PRIMARY KEY ({})").format(
                pgsql.SQL(", ").join(pgsql.Identifier(k) for k in schema.primary_key)))
        self.conn.execute(pgsql.SQL("CREATE TABLE {} ({})").format(
            pgsql.Identifier(name), pgsql.SQL(", ").join(cols)))
        self.tables[name] = schema

    def load(self, name: str, rows: pa.Table) -> None:
        """Replace the content of table ``name`` with ``rows`` (a ``_weight`` column is not allowed)."""
        schema = self.tables.get(name)
        names = schema.names if schema is not None else [n for n in rows.column_names]
        if WEIGHT in rows.column_names:
            raise ValueError(f"load() takes integrated rows, not a delta with {WEIGHT!r}")
        data = rows.select(names)
        ident = pgsql.Identifier(name)
        with self.conn.transaction():
            with self.conn.cursor() as cur:
                cur.execute(pgsql.SQL("TRUNCATE {}").format(ident))
                copy_sql = pgsql.SQL("COPY {} ({}) FROM STDIN").format(
                    ident, pgsql.SQL(", ").join(pgsql.Identifier(n) for n in names))
                with cur.copy(copy_sql) as copy:
                    for row in table_rows(data):
                        copy.write_row(row)

    def create_view(self, name: str, sql: str) -> None:
        self.conn.execute(pgsql.SQL("CREATE VIEW {} AS ").format(pgsql.Identifier(name))
                          + pgsql.SQL(sql))  # type: ignore[operator]

    def execute(self, sql: str) -> None:
        """Run an arbitrary statement in the oracle's schema (setup helpers)."""
        self.conn.execute(sql)  # type: ignore[arg-type]

    def query(self, sql_or_view: str) -> pa.Table:
        """Run a query (or read a view/table by name) and return the result as Arrow."""
        text = sql_or_view.strip()
        if _IDENT.match(text):
            stmt: Any = pgsql.SQL("SELECT * FROM {}").format(pgsql.Identifier(text))
        else:
            stmt = text
        with self.conn.cursor() as cur:
            cur.execute(stmt)
            assert cur.description is not None, f"statement returned no rows: {text}"
            names = [d.name for d in cur.description]
            oids = [d.type_code for d in cur.description]
            rows = cur.fetchall()
        columns = list(zip(*rows)) if rows else [() for _ in names]
        arrays = [_to_arrow(list(values), oid) for values, oid in zip(columns, oids)]
        return pa.Table.from_arrays(arrays, names=names)


def _to_arrow(values: list[Any], oid: int) -> pa.Array:
    if oid == _NUMERIC_OID:
        return _decimal_array(values)
    dtype = _OID_ARROW.get(oid)
    if dtype is not None:
        return pa.array(values, type=dtype)
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def _decimal_array(values: list[Any]) -> pa.Array:
    """A decimal128 array wide enough for every value (PG numeric scale varies per row)."""
    finite = [v for v in values if isinstance(v, Decimal) and v.is_finite()]
    if len(finite) != sum(v is not None for v in values):
        # NaN/Infinity numerics have no Arrow decimal: fall back to float.
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    scale = max((max(-v.as_tuple().exponent, 0) for v in finite), default=0)  # type: ignore[operator]
    int_digits = max((max(v.adjusted() + 1, 1) for v in finite), default=1)
    # Keep at most 38 digits: drop fractional digits beyond that (AVG's long
    # tails); assert_same_rows compares decimals with a relative tolerance.
    scale = min(scale, max(38 - int_digits, 0))
    precision = max(min(int_digits + scale, 38), 1)
    quant = Decimal(1).scaleb(-scale)
    return pa.array([None if v is None else v.quantize(quant) for v in values],
                    type=pa.decimal128(precision, scale))


# ---------------------------------------------------------------------------
# result comparison
# ---------------------------------------------------------------------------

_NAN = ("<NaN>",)  # NaN == NaN for result comparison (as in PG and Spark grouping)
_REL_TOL = 1e-9
# Float sums depend on addition order (Spark vs PostgreSQL); near-zero results
# of cancelling sums need an absolute tolerance as well.
_FLOAT_ABS_TOL = 1e-9
_MAX_SHOWN = 20


def table_rows(table: Any) -> list[tuple]:
    """Rows of an Arrow table (or pandas DataFrame / RecordBatch) as tuples, by position."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    elif not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    if table.num_columns == 0:
        return [()] * table.num_rows
    cols = [c.to_pylist() for c in table.columns]
    return list(zip(*cols))


def _canon(value: Any) -> Any:
    """A hashable value where equal SQL values compare (and hash) equal."""
    if value is None:
        return None
    if isinstance(value, float):
        return _NAN if math.isnan(value) else value
    if isinstance(value, Decimal):
        # Decimal equality and hashing are by value (1.50 == 1.5 == float 1.5),
        # so the value is kept as is and shows with its own scale in diffs.
        return _NAN if value.is_nan() else value
    if hasattr(value, "to_pydatetime") and not isinstance(value, dt.datetime):
        value = value.to_pydatetime()  # pandas.Timestamp
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc)
    if isinstance(value, (list, tuple)):
        return tuple(_canon(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _canon(v)) for k, v in value.items()))
    return value


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if _is_num(a) and _is_num(b):
        if isinstance(a, float) or isinstance(b, float):
            fa, fb = float(a), float(b)
            if math.isnan(fa) or math.isnan(fb):
                return math.isnan(fa) and math.isnan(fb)
            return math.isclose(fa, fb, rel_tol=_REL_TOL, abs_tol=_FLOAT_ABS_TOL)
        if a == b:
            return True
        # Decimals (AVG results with different scales): relative tolerance.
        return abs(a - b) <= Decimal(_REL_TOL) * max(abs(Decimal(a)), abs(Decimal(b)))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _loose_key(row: tuple) -> tuple:
    """Row with numbers blanked: rows that may match approximately share this key."""
    return tuple("<num>" if _is_num(v) or v is _NAN else v for v in row)


def _fmt(row: tuple) -> str:
    return "(" + ", ".join(repr(v) for v in row) + ")"


def diff_rows(actual: Sequence[tuple], expected: Sequence[tuple]) -> tuple[list[tuple], list[tuple]]:
    """Multiset difference with numeric tolerance: (only in actual, only in expected)."""
    ca = Counter(tuple(_canon(v) for v in r) for r in actual)
    ce = Counter(tuple(_canon(v) for v in r) for r in expected)
    only_a = list((ca - ce).elements())
    only_e = list((ce - ca).elements())
    if not only_a or not only_e:
        return only_a, only_e
    # Second pass: pair up leftovers that are equal within tolerance.  Rows
    # can only pair within the same loose key, which keeps this cheap.
    pool: dict[tuple, list[tuple]] = defaultdict(list)
    for row in only_e:
        pool[_loose_key(row)].append(row)
    rest_a: list[tuple] = []
    for row in only_a:
        bucket = pool.get(_loose_key(row), [])
        for i, cand in enumerate(bucket):
            if all(_close(x, y) for x, y in zip(row, cand)):
                bucket.pop(i)
                break
        else:
            rest_a.append(row)
    rest_e = [r for bucket in pool.values() for r in bucket]
    return rest_a, rest_e


def _sort_key(row: tuple) -> str:
    return repr(row)


def assert_same_rows(actual: Any, expected: Any, context: str = "") -> None:
    """Assert ``actual`` and ``expected`` hold the same rows as multisets.

    Columns are compared by position (names may differ); NULL equals NULL;
    numbers compare within a relative tolerance of 1e-9 (Decimal vs float as
    float); timestamps with time zone compare as instants.
    """
    a_rows, e_rows = table_rows(actual), table_rows(expected)
    a_ncols = actual.num_columns if isinstance(actual, (pa.Table, pa.RecordBatch)) else len(actual.columns)
    e_ncols = expected.num_columns if isinstance(expected, (pa.Table, pa.RecordBatch)) else len(expected.columns)
    a_names = list(actual.column_names if hasattr(actual, "column_names") else actual.columns)
    e_names = list(expected.column_names if hasattr(expected, "column_names") else expected.columns)
    if a_ncols != e_ncols:
        raise AssertionError(
            f"{context}: actual has {a_ncols} columns {a_names}, expected {e_ncols} columns {e_names}"
        )
    only_a, only_e = diff_rows(a_rows, e_rows)
    if not only_a and not only_e:
        return
    lines = [
        f"{context}: rows differ (actual {len(a_rows)} rows, expected {len(e_rows)} rows; "
        f"{len(only_a)} only in actual, {len(only_e)} only in expected)",
        f"  actual columns:   {a_names}",
        f"  expected columns: {e_names}",
    ]
    for title, rows in (("only in actual", only_a), ("only in expected", only_e)):
        if rows:
            lines.append(f"  {title}:")
            shown = sorted(rows, key=_sort_key)[:_MAX_SHOWN]
            lines.extend(f"    {_fmt(r)}" for r in shown)
            if len(rows) > _MAX_SHOWN:
                lines.append(f"    ... and {len(rows) - _MAX_SHOWN} more")
    raise AssertionError("\n".join(lines))
