"""The snapshot reader's binary path: ``COPY (SELECT ...) TO STDOUT (FORMAT binary)`` straight into Arrow.

ADBC's PostgreSQL driver (``adbc-driver-postgresql``, C++ over libpq) runs a
query as a binary COPY and decodes the rows into Arrow record batches with no
Python per row or per value, and without the GIL, so several readers in
threads use both cores.  Each value is then held to exactly what the text
path (``snapshot._to_delta``: CSV text through ``types.to_arrow``) gives:

* integers, floats (NaN, -0.0, infinities bit for bit), booleans and text
  (``char(n)`` padded, ``name``; the session's ``client_encoding`` is UTF8,
  so a LATIN1 database's text arrives as UTF-8) are taken as decoded;
* ``numeric`` is selected as ``::text`` (PostgreSQL's own spelling) and
  converted by ``types.to_arrow`` -- the same exact casts and the same
  refusals (NaN, infinities, more digits than the Arrow type holds) as before;
  ADBC's own numeric decoding is also slower than the text;
* ``date``, ``timestamp`` and ``timestamptz`` arrive as Arrow's date32 and
  timestamp[us] (UTC for timestamptz); values the text path refuses (BC, year
  10000 and later, ±infinity, which the driver passes on as out-of-range
  numbers) are refused here too (``ValueError`` naming the column).

Errors of the driver are raised as psycopg's exception of the same SQLSTATE
(``as_psycopg``), so the connector's fault rules (``faults.classify``) and
callers catching ``psycopg.Error`` see what they saw from the text path: a
reader connection killed mid-read is a lost connection.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from freshview.connectors.postgres.types import to_arrow
from freshview.schema import Column, TableSchema

try:  # an optional dependency: without it the snapshot reader keeps the CSV path
    import adbc_driver_manager
    import adbc_driver_postgresql.dbapi as adbc
except ImportError:  # pragma: no cover - exercised only where the wheel is missing
    adbc = None
    adbc_driver_manager = None

AVAILABLE = adbc is not None
_BATCH_BYTES = 16 << 20  # the driver's record batches: about this many bytes each

# The range the text path accepts (Arrow's cast, else Python's fromisoformat): years 1 to 9999.
_FIRST_DAY, _LAST_DAY = -719162, 2932896  # 0001-01-01, 9999-12-31 as days since 1970-01-01
_FIRST_US, _END_US = _FIRST_DAY * 86_400_000_000, (_LAST_DAY + 1) * 86_400_000_000
# PostgreSQL's ±infinity (the largest and smallest integers) after the driver moved them to Arrow's epoch,
# wrapping around: 2000-01-01 is 10957 days, 946684800000000 µs after 1970-01-01.
_INFINITY = {"day": {int(np.int32(2**31 - 1 - 2**32 + 10957)): "infinity", -2**31 + 10957: "-infinity"},
             "us": {2**63 - 1 - 2**64 + 946684800000000: "infinity", -2**63 + 946684800000000: "-infinity"}}


# Selected as their text and converted as the text path converts them: numerics (see above), and the kinds
# whose binary form is not their text (jsonb's version byte, uuid's 16 bytes, inet's address family, an
# array's header) or whose text form the engine keeps (json's spelling, an enum's label).
AS_TEXT = ("numeric", "json", "jsonb", "uuid", "inet", "enum", "array")


def select_list(columns: Sequence[Column]) -> sql.Composable:
    """The columns as the binary COPY selects them: ``AS_TEXT`` kinds as their text, the rest as they are."""
    items = [sql.SQL("{}::text AS {}").format(sql.Identifier(c.name), sql.Identifier(c.name))
             if c.type.kind in AS_TEXT else sql.Identifier(c.name) for c in columns]
    return sql.SQL(", ").join(items) if items else sql.SQL("true AS fv_rows")  # no column: count the rows


def as_psycopg(exc: BaseException) -> psycopg.Error:
    """The psycopg exception a driver error stands for: the class of its SQLSTATE, else a lost connection
    (the driver's errors without a state are I/O errors: the server closed the connection)."""
    state = getattr(exc, "sqlstate", None)
    message = str(exc)
    if state and state != "00000":
        try:
            cls = psycopg.errors.lookup(state)
        except KeyError:
            cls = psycopg.DatabaseError
        error = cls(message)
    else:
        error = psycopg.OperationalError(message)
    return error


def stream_error(exc: BaseException) -> psycopg.Error:
    """A failure while the COPY's rows were read (Arrow passes on libpq's message, no SQLSTATE): the session
    ended (FATAL, the connection closed) is a lost connection, as psycopg's own errors without a state are;
    anything else is the statement's error."""
    message = str(exc)
    if "FATAL:" in message or any(lost in message for lost in _LOST_TEXTS):
        return psycopg.OperationalError(message)
    return psycopg.DatabaseError(message)


_LOST_TEXTS = ("server closed the connection", "connection to server", "no connection to the server",
               "could not receive data", "could not send data", "SSL SYSCALL error", "terminating connection")


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        if adbc_driver_manager is not None and isinstance(exc, adbc_driver_manager.Error):
            raise as_psycopg(exc) from exc
        raise


class Session:
    """One connection under the snapshot (REPEATABLE READ, ``SET TRANSACTION SNAPSHOT``, UTF8, no row
    security), reading queries as record batches."""

    def __init__(self, dsn: str, snapshot_name: str) -> None:
        if adbc is None:
            raise RuntimeError("freshview: the binary snapshot reader needs adbc-driver-postgresql")
        with _translated():
            self.conn = adbc.connect(dsn, autocommit=True)
        try:
            with _translated(), self.conn.cursor() as cur:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cur.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)).as_string())
                # Text in UTF-8 whatever the database's encoding (as the CSV path reads it).
                cur.execute("SET LOCAL client_encoding = 'UTF8'")
                # Every row or an error (see snapshot._read_ranges).
                cur.execute("SET LOCAL row_security = off")
        except BaseException:
            self.close()
            raise

    def batches(self, query: sql.Composable) -> Iterator[pa.RecordBatch]:
        with _translated(), self.conn.cursor() as cur:
            cur.adbc_statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": str(_BATCH_BYTES)})
            cur.execute(query.as_string())
            reader = cur.fetch_record_batch()
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except OSError as exc:  # the stream's errors reach Arrow as text only, without the SQLSTATE
                    raise stream_error(exc) from exc
                yield batch

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


def to_delta(batch: pa.RecordBatch, schema: TableSchema) -> pa.Table:
    """A record batch of the binary COPY as a delta of ``schema`` (+1 each), converted as the module says."""
    arrays = [_column(batch.column(i), c) for i, c in enumerate(schema.columns)]
    arrays.append(pa.array(np.ones(batch.num_rows, np.int64)))
    return pa.Table.from_arrays(arrays, schema=schema.arrow(with_weight=True))


def _column(values: pa.Array, column: Column) -> pa.Array:
    t = column.type
    kind = t.kind
    if isinstance(values.type, pa.ExtensionType):
        values = values.storage
    if kind in AS_TEXT:
        return to_arrow(values.cast(pa.string()), t)
    if kind == "date":
        days = values.cast(pa.date32()).view(pa.int32())
        _check_range(days, _FIRST_DAY, _LAST_DAY + 1, column, "day")
        return values.cast(pa.date32())
    if kind in ("timestamp", "timestamptz"):
        micros = values.cast(pa.timestamp("us", tz=values.type.tz)).view(pa.int64())
        _check_range(micros, _FIRST_US, _END_US, column, "us")
        return micros.view(pa.timestamp("us", tz=values.type.tz)).cast(t.arrow)
    return values if values.type == t.arrow else values.cast(t.arrow)


def _check_range(numbers: pa.Array, first: int, end: int, column: Column, unit: str) -> None:
    """Refuse a value outside years 1-9999, as the text path does (PostgreSQL's ±infinity among them)."""
    low, high = pc.min_max(numbers).values()
    if low.as_py() is None or (low.as_py() >= first and high.as_py() < end):
        return
    bad = numbers.filter(pc.or_(pc.less(numbers, first), pc.greater_equal(numbers, end)))[0].as_py()
    shown = _INFINITY[unit].get(bad) or np.datetime64(bad, "D" if unit == "day" else "us")
    raise ValueError(f"{column.type} value {shown} of column {column.name} (BC, after 9999, or ±infinity) "
                     "cannot be represented")
