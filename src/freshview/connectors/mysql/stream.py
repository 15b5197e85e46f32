"""The binlog stream: whole transactions of the followed tables, from a position on.

``BinlogStream`` wraps ``pymysqlreplication.BinLogStreamReader`` (MariaDB
GTID mode, ``blocking=True``: with ``blocking=False`` a MariaDB GTID reader
reconnects from its start GTID forever at the end of the binlog) and feeds
its events to a ``transactions.TransactionAssembler``; ``read(timeout)``
returns the next committed transaction that touches a followed table, or
``None`` once ``timeout`` seconds passed without one.  The server sends a
heartbeat every ``heartbeat_s`` seconds while it has nothing to send, which
is what lets ``read`` return on an idle server (so ``None`` comes after at
most ``timeout + heartbeat_s``).  Once the timeout is up, ``read`` returns
None between transactions as soon as nothing more has arrived
(``readable_now``), and not before: ``read(0)`` takes what is there without
waiting, and transactions of tables not followed never end a read early.

Exactly once: the reader reconnects silently on a lost connection (errors
2006/2013), from its ``auto_position``, which the library never advances.
After every committed transaction (followed or not) this class sets it to
the GTID state after that transaction, so a reconnect resumes right after
the last whole transaction; a transaction cut by the reconnect is sent
again from its GTID event and the assembler drops the partial copy.

A position whose binlogs were purged (server error 1236 on connect) raises
``PositionLost``: the caller must rebuild from a new snapshot.  Binlogs
without column names (``binlog_row_metadata`` not FULL) or without whole
rows (``binlog_row_image`` not FULL) raise ``BinlogSettingsError`` at the
first rows event of a followed table: decoding them would give wrong values
(ENUMs as NULL, missing columns as NULL) silently.

TABLE_MAP events are parsed once per table id (the library's ``freeze_schema``):
a transaction's table map repeats its table's definition, and parsing it
(column names, charsets, ENUM members: binlog_row_metadata=FULL) was half
the cost of reading a small transaction.  A table id names one definition
for the server's lifetime (MariaDB numbers each TABLE_SHARE anew; DDL makes
a new share), and the parsed maps are dropped at every RotateEvent (a new
binlog file, and the fake rotate that starts every connection: a server
restart reuses ids) and at every statement other than BEGIN/COMMIT/ROLLBACK
(DDL, whatever the library would make of it).

Row changes of tables not followed are never decoded (the library decodes
rows lazily; result tables written by freshview are simply not followed).
The rows of followed tables are not decoded by the library either: the
library reads the event up to its first row (the header, the table map),
and ``rowimages`` cuts the rest of the body into columns, converted to
Arrow later, column by column (``deltas``).  A table map with a column type
``rowimages`` does not handle falls back to the library's row dicts.
"""

from __future__ import annotations

import random
import select
import socket
import time
from typing import Iterable

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, RotateEvent,
                                      XidEvent)
from pymysqlreplication.row_event import DeleteRowsEvent, RowsEvent, UpdateRowsEvent, WriteRowsEvent

from freshview.connectors.mysql import rowimages
from freshview.connectors.mysql.catalog import TableName
from freshview.connectors.mysql.transactions import (Begin, BinlogPosition, MySqlTransaction, Query, RowChanges,
                                                     Rows, TransactionAssembler, Xid)
from freshview.errors import FreshviewError, PositionLost

ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
_FL_STANDALONE = 1  # MariaDB GTID event flag: the group is one statement, no XID follows
_KINDS = {WriteRowsEvent: "insert", DeleteRowsEvent: "delete", UpdateRowsEvent: "update"}
_NOT_DDL = frozenset(("BEGIN", "COMMIT", "ROLLBACK"))
_EVENTS = [MariadbGtidEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent,
           HeartbeatLogEvent, RotateEvent]


class BinlogSettingsError(FreshviewError):
    """The binlog lacks what correct decoding needs (row metadata, full row images)."""


def unique_server_id() -> int:
    """A replica server id unlikely to collide with a server's or another reader's (pass a stable one if you can)."""
    return random.randrange(1 << 24, 1 << 31)


def readable_now(sock: socket.socket, buffered) -> bool:
    """Whether ``sock`` (read through ``buffered``, its ``makefile("rb")``) has bytes to read now:
    in the socket, or already in the reader's buffer (where ``select`` cannot see them)."""
    if select.select([sock], [], [], 0)[0]:
        return True
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        return bool(buffered.peek(1))
    except OSError:
        return False
    finally:
        sock.settimeout(timeout)


def library_column(column) -> rowimages.BinlogColumn | None:
    """A python-mysql-replication TABLE_MAP column (``pymysqlreplication.column.Column``) for ``rowimages``;
    None for a type ``rowimages`` does not decode."""
    encoding = None
    if getattr(column, "character_set_name", None) is not None:
        encoding = RowsEvent.charset_to_encoding(column.character_set_name)  # as the library decodes text
    if column.type == rowimages.ENUM:
        members = column.enum_values[1:] if column.enum_values else None  # (the library puts '' first)
    else:
        members = column.set_values
    return rowimages.binlog_column(
        column.name, column.type, unsigned=bool(getattr(column, "unsigned", False)),
        max_length=getattr(column, "max_length", 0), length_size=getattr(column, "length_size", 0),
        precision=getattr(column, "precision", 0), decimals=getattr(column, "decimals", 0),
        fsp=getattr(column, "fsp", 0), bits=getattr(column, "bits", 0), size=getattr(column, "size", 0),
        encoding=encoding, members=members)


class BinlogStream:
    """Whole committed transactions of ``followed`` tables, from ``start`` on."""

    def __init__(self, connect_args: dict, start: BinlogPosition, followed: Iterable[TableName], *,
                 server_id: int | None = None, heartbeat_s: float = 0.5) -> None:
        self.assembler = TransactionAssembler(start, followed)
        settings = {k: v for k, v in connect_args.items() if k not in ("database", "db", "autocommit")}
        self.server_id = server_id if server_id is not None else unique_server_id()
        self._reader = BinLogStreamReader(
            connection_settings=settings, server_id=self.server_id, is_mariadb=True, blocking=True,
            auto_position=start.gtid, only_events=_EVENTS, slave_heartbeat=heartbeat_s,
            enable_logging=False, freeze_schema=True)
        self._reader.log_file = start.file
        self._reader.log_pos = start.offset
        self._checked: set = set()  # (table id, table) whose row metadata was checked
        self._layouts: dict[int, tuple] = {}  # table id -> (its table map's columns, their rowimages.Layout)

    @property
    def position(self) -> BinlogPosition:
        """After the last whole transaction read, followed tables or not (safe to store when idle)."""
        return self.assembler.position

    @property
    def followed(self) -> frozenset[TableName]:
        return self.assembler.followed

    def follow(self, tables: Iterable[TableName]) -> None:
        """Change the followed tables; takes effect from the next event (the open transaction included)."""
        self.assembler.follow(tables)

    def read(self, timeout: float | None = None) -> MySqlTransaction | None:
        """The next committed transaction touching a followed table; None after ``timeout`` s without one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        reader = self._reader
        assembler = self.assembler
        while True:
            if deadline is not None and not assembler.in_transaction and time.monotonic() >= deadline \
                    and not self._readable_now():
                return None  # between transactions, the time is up and nothing more has arrived
            try:
                event = reader.fetchone()
            except pymysql.err.OperationalError as error:
                if error.args and error.args[0] == ER_MASTER_FATAL_ERROR_READING_BINLOG:
                    raise PositionLost(f"cannot resume the binlog at {self.position.to_text()}: "
                                       f"{error.args[1]}") from None
                raise
            cls = type(event)  # None: the server ended the stream; the reader reconnects at auto_position
            item = None
            if cls is MariadbGtidEvent:
                item = Begin(event.gtid, bool(event.flags & _FL_STANDALONE), event.timestamp)
            elif cls in _KINDS:
                table = TableName(event.schema, event.table)
                if table in assembler.followed:
                    self._check_metadata(event, table)
                    item = Rows(table, self._decode(event, _KINDS[cls]), event.timestamp)
            elif cls is XidEvent:
                item = Xid(event.timestamp)
            elif cls is QueryEvent:
                schema = event.schema.decode() if isinstance(event.schema, bytes) else (event.schema or "")
                query = event.query.decode() if isinstance(event.query, bytes) else event.query
                item = Query(query, schema, event.timestamp)
                if query not in _NOT_DDL:
                    reader.table_map.clear()  # DDL: parse the next table maps afresh
            elif cls is RotateEvent:
                reader.table_map.clear()  # a new binlog file or a reconnect: the server may have restarted
            if item is not None:
                committed_before = assembler.position
                txn = assembler.feed(item, reader.log_file, reader.log_pos)
                if assembler.position is not committed_before:
                    reader.auto_position = assembler.position.gtid  # a silent reconnect resumes after it
                if txn is not None:
                    return txn

    def _readable_now(self) -> bool:
        """Whether the next event can be read without waiting (the server sent it already).

        ``read`` returns None only between transactions, once its timeout passed and nothing more is
        readable.  So a read with timeout 0 takes what has arrived and never waits for the next event
        (the service steps what arrived while its last step ran), and a transaction of tables not
        followed (freshview's own result writes, say) does not end a read while more follows it: else
        a stream that fell behind would return after each of its own earlier result transactions,
        batches would copy the earlier steps' sizes and the lag would never shrink.  Looks into the
        library's connection (pymysql's socket and its read buffer); without them, True: the next
        event is read (blocking at most a heartbeat)."""
        connection = getattr(self._reader, "_stream_connection", None)
        sock, buffered = getattr(connection, "_sock", None), getattr(connection, "_rfile", None)
        if sock is None or buffered is None:
            return True
        return readable_now(sock, buffered)

    def _decode(self, event, kind: str) -> RowChanges:
        """The event's row images: cut from its body by ``rowimages`` (the library has read the
        header, up to the first row), or the library's own row dicts for a table map with a column
        type ``rowimages`` does not decode."""
        columns = event.columns  # the table map's (a new list for every TABLE_MAP event)
        cached = self._layouts.get(event.table_id)
        if cached is None or cached[0] is not columns:
            if len(self._layouts) > 4096:  # table ids are never reused, and DDL makes new ones
                self._layouts.clear()
            cached = (columns, rowimages.layout_of([library_column(c) for c in columns]))
            self._layouts[event.table_id] = cached
        layout = cached[1]
        if layout is None:
            return RowChanges.from_library(kind, event.rows)
        packet = event.packet
        body = packet.read(event.event_size - packet.read_bytes)  # the rows (the checksum excluded)
        return RowChanges.of(kind, *rowimages.decode(layout, body, kind))

    def _check_metadata(self, event, table: TableName) -> None:
        if (event.table_id, table) in self._checked:
            return
        if any(c.name is None for c in event.columns):
            raise BinlogSettingsError(
                f"the binlog has no column names for {table}; set binlog_row_metadata=FULL on the server")
        n = event.number_of_columns
        bitmaps = [event.columns_present_bitmap]
        if isinstance(event, UpdateRowsEvent):
            bitmaps.append(event.columns_present_bitmap2)
        for bitmap in bitmaps:
            present = sum(bin(b).count("1") for b in bitmap)
            if present < n:
                raise BinlogSettingsError(
                    f"the binlog has partial rows of {table}; set binlog_row_image=FULL on the server")
        self._checked.add((event.table_id, table))

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> "BinlogStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
