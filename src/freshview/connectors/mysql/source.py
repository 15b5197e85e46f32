"""``base.Source`` for MySQL/MariaDB: the binlog stream, consistent snapshots, the catalog.

Thin glue over ``catalog`` (describe), ``snapshot`` (a consistent snapshot
and its binlog position), ``stream`` + ``transactions`` (whole transactions
from a GTID position) and ``deltas`` (Arrow deltas).  What differs from
PostgreSQL:

* There is no server-side slot: the position lives only where the sink
  stores it (``freshview.progress``, with the results) and in the engine's
  state; ``attach`` checks that its binlog file still exists (``SHOW BINARY
  LOGS``), else the position is lost (purged binlogs: rebuild).
  ``acknowledge`` has nothing to tell the server.
* The stream decodes only the rows of followed tables (``prepare`` adds
  tables, also to the open stream), so the service's own writes to result
  tables are never read back.
* The binlog carries whole old rows, so ``deltas`` never looks old rows up.
* DDL on a followed table arrives as a statement; the table's definition is
  then read from the catalog (``Transaction.definitions``) for the core to
  judge.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

import pyarrow as pa
import pymysql

from freshview.connectors import base
from freshview.connectors.edge import guarded
from freshview.connectors.mysql import catalog, deltas as mysql_deltas, faults, stream as binlog, verify
from freshview.connectors.mysql.catalog import TableName, describe_table, parse_table_name
from freshview.connectors.mysql.snapshot import Snapshot as MySqlSnapshotReader
from freshview.connectors.mysql.transactions import BinlogPosition, MySqlTransaction
from freshview.connectors.mysql.types import UnsupportedTypeError, column_type
from freshview.errors import CatalogError, FreshviewError
from freshview.schema import SqlType, TableSchema

HEARTBEAT_S = 0.01  # the server's heartbeat period: an idle stream's read returns at most this long past its timeout
PASSED_EVERY_S = 1.0  # how often a stream reports the position reached through unfollowed transactions


def current_position(conn: Any) -> BinlogPosition:
    """The server's binlog position now: after its last commit (where a stream "from now" starts)."""
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        if row is None:
            raise FreshviewError("SHOW MASTER STATUS is empty: the binary log is off (log_bin); "
                                 "see `freshview setup`")
        file, offset = _text(row[0]), int(row[1])
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, offset))
        gtid = cur.fetchone()[0]
    return BinlogPosition(_text(gtid or ""), file, offset)


def binlog_files(conn: Any) -> set[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return {_text(row[0]) for row in cur.fetchall()}


def lost_reason(position: BinlogPosition, files: set[str]) -> str | None:
    """Why the stream cannot resume at ``position`` (its binlog file was purged), or None."""
    if position.file in files:
        return None
    return (f"the binlog {position.file} holding the service's position {position.to_text()} was purged "
            "(binlogs are kept too briefly for this outage; see `freshview setup`)")


def column_definitions(table: str, columns: Sequence[tuple]) -> dict[str, SqlType | None]:
    """A table's columns as now defined (``information_schema`` rows as ``catalog``'s query gives them):
    their freshview types, None for a type freshview does not maintain; names folded as the engine's are."""
    out: dict[str, SqlType | None] = {}
    for col, data, full, precision, scale, charset, collation, nullable in columns:
        name = _text(col)
        try:
            out[name.lower()] = column_type(table, name, _text(data), _text(full), precision,
                                    scale, _text(charset), _text(collation), nullable == "YES").type
        except UnsupportedTypeError:
            out[name.lower()] = None
    return out


def passed_position(current: BinlogPosition, reported: BinlogPosition | None, last_report: float, now: float,
                    every_s: float = PASSED_EVERY_S) -> BinlogPosition | None:
    """The position to report as an empty transaction, if any: the stream moved past transactions of
    tables nobody follows (``current`` after ``reported``) and ``every_s`` went by since the last report.
    Stored, it keeps the service's position from falling behind the binlogs the server keeps (a purged
    position would mean a rebuild) and spares a restart re-reading them."""
    if now - last_report < every_s or (reported is not None and not reported < current):
        return None
    return current


def commit_time(binlog_seconds: float, received: float | None) -> float:
    """A transaction's commit time: the binlog stamps whole seconds (the commit was in
    ``[stamp, stamp + 1)``), so while the stream keeps up, the time it arrived is the better estimate
    (it is at most the transit late); when behind, ``stamp + 1`` (lag understated by under a second)."""
    return binlog_seconds if received is None else min(received, binlog_seconds + 1.0)


def to_transaction(txn: MySqlTransaction, definitions: Mapping[str, Mapping[str, SqlType | None]],
                   received: float | None = None) -> base.Transaction:
    """The core's view of a binlog transaction (the binlog rows stay in ``payload``)."""
    return base.Transaction(
        txn.position, commit_time(txn.commit_time.timestamp(), received),
        {str(t): sum(len(run) for run in runs) for t, runs in txn.changes.items()},
        frozenset(str(t) for t in txn.truncated), definitions, txn)


@guarded(faults.classify)
class MySqlStream:
    """``base.Stream``: whole transactions of the followed tables from the binlog."""

    def __init__(self, reader: binlog.BinlogStream, definitions: Callable[[str], Mapping[str, SqlType | None]]) -> None:
        self.reader = reader
        self.definitions = definitions
        self.waited_s = 0.0
        self._reported: BinlogPosition | None = None  # the last position handed out
        self._reported_at = time.monotonic()

    def read(self, timeout: float, budget: float) -> tuple[base.Transaction | None, bool]:
        """``budget`` is not needed: ``BinlogStream.read`` returns a transaction only whole, and returns
        None only between transactions (a long one is read to its end)."""
        started = time.perf_counter()
        try:
            txn = self.reader.read(timeout)
        except pymysql.err.MySQLError as exc:
            raise base.StreamError(f"binlog stream: {exc}") from None
        now = time.monotonic()
        if txn is None:
            self.waited_s += time.perf_counter() - started
            passed = passed_position(self.reader.position, self._reported, self._reported_at, now)
            if passed is None:
                return None, False
            self._reported, self._reported_at = passed, now
            return base.Transaction(passed, time.time()), True  # no changes: only the position moves
        self._reported, self._reported_at = txn.position, now
        ddl = {str(t): statement.statement for statement in txn.ddl for t in statement.tables}
        return dataclasses.replace(to_transaction(txn, {}, time.time()), ddl=ddl), True

    @property
    def reached(self) -> BinlogPosition:
        """Every transaction at or before this was read (returned, or passed as no followed table's)."""
        return self.reader.position

    def follow(self, tables: set[TableName]) -> None:
        self.reader.follow(tables)

    def acknowledge(self, position: BinlogPosition) -> None:
        """Nothing to tell the server: the position is stored with the results (``MySqlResults``)."""

    def keepalive(self) -> None:
        """The server keeps sending heartbeats; the reader reconnects by itself if it must."""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.reader.close()


@guarded(faults.classify)
class MySqlSnapshot:
    """``base.Snapshot`` over ``snapshot.Snapshot`` (one REPEATABLE READ transaction and its position)."""

    def __init__(self, reader: MySqlSnapshotReader, source: "MySqlSource") -> None:
        self.reader = reader
        self.source = source
        self.position = reader.position

    def estimate(self, table: str) -> int | None:
        name = parse_table_name(table)
        with self.source.conn.cursor() as cur:
            cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                        "TABLE_NAME = %s", (name.database, name.table))
            row = cur.fetchone()
        return int(row[0]) if row and row[0] else None

    def read(self, table: base.SourceTable, chunk_rows: int, progress: Callable[[int], None],
             columns: Collection[str] | None = None) -> Iterator[pa.Table]:
        yield from self.reader.read_table(self.source.mysql_table(table.name, table.schema), chunk_rows, progress,
                                          columns)

    def compare(self, spec: base.ResultSpec, sql: str, change: Callable[[BinlogPosition | None], pa.Table | None],
                limit: int) -> base.Comparison:
        return verify.compare(self.reader.connection, str(self.source.connect_args.get("database") or ""), spec, sql,
                              change, BinlogPosition.from_text, limit)


@guarded(faults.classify)
class MySqlSource:
    """``base.Source`` over one database (``database``: the DSN's, where bare table names live)."""

    def __init__(self, connect_args: dict, conn: Any, *, snapshot_method: str = "auto",
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.connect_args = connect_args
        self.label = str(connect_args.get("database") or "mysql")  # names the source in metrics and logs
        self.conn = conn  # the connector's autocommit connection (catalog queries)
        self.snapshot_method = snapshot_method
        self.heartbeat_s = heartbeat_s
        self.described: dict[str, catalog.SourceTable] = {}  # by the name followed by
        self.followed: set[TableName] = set()
        self.renamed: dict[str, base.Renamed] = {}  # ``rename``: followed name -> the names now
        self._stream: MySqlStream | None = None

    def retained_bytes(self) -> int | None:
        """Not known: the server keeps binlogs by age (``expire_logs_days``), not for this service."""
        return None

    def attach(self, position: BinlogPosition | None, has_state: bool) -> base.Attached:
        if position is None:
            return base.Attached(created=not has_state)
        return base.Attached(lost=lost_reason(position, binlog_files(self.conn)))

    def stream(self, position: BinlogPosition | None) -> MySqlStream:
        try:
            start = position if position is not None else current_position(self.conn)
            reader = binlog.BinlogStream(self.connect_args, start, self.followed, heartbeat_s=self.heartbeat_s)
        except pymysql.err.MySQLError as exc:
            raise base.StreamError(f"cannot open the binlog stream: {exc}") from None
        reader.assembler.rename(self._aliases())
        self._stream = MySqlStream(reader, self.definition)
        return self._stream

    def rename(self, renamed: Mapping[str, base.Renamed]) -> None:
        for table in set(renamed) | set(self.renamed):
            if renamed.get(table) != self.renamed.get(table):
                self.described.pop(table, None)  # described anew, under its names now
        self.renamed = dict(renamed)
        if self._stream is not None:
            self._stream.reader.assembler.rename(self._aliases())

    def _aliases(self) -> dict[TableName, TableName]:
        return {parse_table_name(r.name): parse_table_name(t) for t, r in self.renamed.items()}

    def _now(self, table: str) -> str:
        """A followed table's name now: as the stream last renamed it (``RENAME TABLE``), else ``rename``'s."""
        if self._stream is not None:
            followed = parse_table_name(table)
            for now, was in self._stream.reader.assembler.aliases.items():
                if was == followed:
                    return str(now)
        return self.renamed[table].name if table in self.renamed else table

    def describe(self, table: str) -> base.SourceTable:
        found = describe_table(self.conn, table)
        self.described[str(found.name)] = found
        return base.SourceTable(str(found.name), found.schema, self._identity(found.name, found.schema))

    def _identity(self, name: TableName, schema: TableSchema) -> tuple[tuple[str, str], ...]:
        """``base.SourceTable.identity``: the primary key, and when the table was created (a table dropped and
        created again, or rebuilt by ALTER TABLE, is another table to the engine's copy)."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT CREATE_TIME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                        "TABLE_NAME = %s", (name.database, name.table))
            row = cur.fetchone()
        return (("primary key", ", ".join(schema.primary_key)), ("creation time", str(row[0]) if row else ""))

    def expansion(self, relation: str) -> str | None:
        """A view's definition (``information_schema.VIEWS``), which the service's account must be allowed to
        see (SHOW VIEW); None for anything else."""
        name = parse_table_name(relation)
        with self.conn.cursor() as cur:
            cur.execute("SELECT v.VIEW_DEFINITION FROM information_schema.TABLES t LEFT JOIN "
                        "information_schema.VIEWS v ON v.TABLE_SCHEMA = t.TABLE_SCHEMA AND v.TABLE_NAME = t.TABLE_NAME "
                        "WHERE t.TABLE_SCHEMA = %s AND t.TABLE_NAME = %s AND t.TABLE_TYPE = 'VIEW'",
                        (name.database, name.table))
            row = cur.fetchone()
        if row is None:
            return None
        text = _text(row[0] or "").strip()
        if not text:
            raise CatalogError(f"{name} is a view whose definition the service's account may not see; grant it "
                               f"SHOW VIEW on {name.quoted}, or create the freshview view from the view's query")
        return text

    def recheck(self, tables: Mapping[str, tuple[tuple[str, str], ...]]) -> dict[str, base.Recheck]:
        """By name (a renamed table is gone from its old name: the binlog's statement says where)."""
        out = {}
        settles_at = current_position(self.conn) if tables else None  # read before the catalog (see Recheck)
        for table in tables:
            now = self._now(table)
            name = parse_table_name(now)
            try:
                found = describe_table(self.conn, name)
            except CatalogError as exc:
                if "does not exist" in str(exc):
                    out[table] = base.Recheck(None, settles_at=settles_at)
                else:
                    out[table] = base.Recheck(now, self.definition(now), refusal=str(exc), settles_at=settles_at)
                continue
            # The description rows are decoded with, renewed unless a column is gone from it (renamed: the stream
            # may still hold rows from before the rename, read by the old names until ``rename`` renews it).
            before = self.described.get(table)
            if before is None or {c.name.lower() for c in before.columns} <= {c.name.lower() for c in found.columns}:
                self.described[table] = found
            out[table] = base.Recheck(now, self.definition(now), self._identity(name, found.schema),
                                      settles_at=settles_at)
        return out

    def retain(self, tables: Collection[str]) -> None:
        self.followed = {parse_table_name(t) for t in tables}  # (the stream takes renamed ones by their names now)
        if self._stream is not None:
            self._stream.follow(set(self.followed))

    def definition(self, table: str) -> dict[str, SqlType | None]:
        """A table's columns as now defined (after DDL in the stream); {} for a dropped table."""
        name = parse_table_name(table)
        with self.conn.cursor() as cur:
            cur.execute(catalog.COLUMNS_QUERY, (name.database, name.table))
            return column_definitions(str(name), cur.fetchall())

    def mysql_table(self, table: str, schema: TableSchema) -> catalog.SourceTable:
        """The described table restricted to ``schema``'s columns (the engine's, which a later ADD COLUMN
        does not change, under the names it followed them by: ``rename``); described now if this process
        has not yet."""
        found = self.described.get(table)
        if found is None:
            found = self.described[table] = describe_table(self.conn, self._now(table))
        by_name = {c.name.lower(): c for c in found.columns}  # (the engine's column names are folded)
        renamed = self.renamed[table].columns if table in self.renamed else {}
        now = [renamed.get(c.name, c.name).lower() for c in schema.columns]
        missing = [c for c in now if c not in by_name]
        if missing:
            raise base.ChangeError(f"{table} has no column {missing[0]} any more", table)
        return dataclasses.replace(found, schema=schema, columns=tuple(by_name[c] for c in now))

    def prepare(self, tables: Sequence[str]) -> None:
        """Decode these tables' rows in the stream from now on (the open stream's too)."""
        self.followed |= {parse_table_name(t) for t in tables}
        if self._stream is not None:
            self._stream.follow(set(self.followed))

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[MySqlSnapshot]:
        try:
            reader = MySqlSnapshotReader.open(self.connect_args, self.snapshot_method)
        except pymysql.err.MySQLError as exc:
            if faults.classify(exc) is not None:
                raise  # the connection: the guard raises its fault
            raise FreshviewError(f"cannot take a consistent snapshot: {exc}") from None
        try:
            yield MySqlSnapshot(reader, self)
        finally:
            reader.close()

    def position_from_text(self, text: str) -> BinlogPosition:
        return BinlogPosition.from_text(text)

    def deltas(self, transactions: Sequence[base.Transaction], schemas: Mapping[str, TableSchema],
               lookup_old: base.LookupOld) -> dict[str, base.TableChange]:
        """``deltas.to_deltas`` over the tables each transaction is restricted to, as weighted rows: no
        old row is looked up (the binlog has whole old rows)."""
        raw = [dataclasses.replace(t.payload, changes={n: runs for n, runs in t.payload.changes.items()
                                                        if str(n) in t.rows})
               for t in transactions if t.payload is not None]  # None: only the position moved
        changed = {str(n) for txn in raw for n in txn.changes}
        sources = {parse_table_name(n): self.mysql_table(n, schemas[n]) for n in changed}
        out = mysql_deltas.to_deltas(raw, sources)  # (a ChangeError names its table, schema-qualified)
        return {str(n): base.TableChange(d) for n, d in out.items()}

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, (bytes, bytearray)) else v
