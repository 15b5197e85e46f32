"""A consistent snapshot of MySQL/MariaDB tables, read as Arrow, and its binlog position.

Snapshot plus stream must be exactly the database's history: the snapshot
is one REPEATABLE READ transaction, and its position is the binlog position
of exactly the commits it sees, so a stream started there delivers every
later commit once and no earlier one.  Two ways to get both at once:

* ``mariadb`` (lock-free; MariaDB): ``START TRANSACTION WITH CONSISTENT
  SNAPSHOT, READ ONLY``; then ``SHOW STATUS LIKE 'binlog_snapshot_%'`` gives
  the binlog file and offset consistent with that transaction's view
  (InnoDB and the binlog agree on the commit order), and
  ``BINLOG_GTID_POS(file, offset)`` the GTID state there.
* ``lock`` (Oracle MySQL, which has no ``binlog_snapshot_*``):
  ``FLUSH TABLES WITH READ LOCK`` stops all commits; ``SHOW MASTER STATUS``
  (file, offset; on MySQL ``@@gtid_executed``, on MariaDB
  ``BINLOG_GTID_POS``) is then the position of the view that
  ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` opens before ``UNLOCK
  TABLES``.  It needs the RELOAD privilege and blocks writers for the
  moments between lock and unlock (and waits for running statements to
  finish before it gets the lock).

``method="auto"`` takes the first on MariaDB and the second elsewhere.

Tables are read on the snapshot's own connection, one after the other (no
other connection can share a MySQL snapshot), through an unbuffered cursor
in batches of ``batch_rows`` rows: each batch's columns go to Arrow at once
(``types.to_arrow``), and ``progress(rows_done)`` is called after each.
The session reads TIMESTAMPs in UTC (``types.SESSION_SETUP``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Collection, Iterator, Sequence

import pyarrow as pa
import pymysql
import pymysql.cursors

from freshview.connectors.mysql.catalog import SourceTable, quote
from freshview.connectors.mysql.faults import rollback_quietly
from freshview.connectors.mysql.transactions import BinlogPosition
from freshview.connectors.mysql.types import SESSION_SETUP, to_arrow
from freshview.errors import FreshviewError

BATCH_ROWS = 50_000


class SnapshotError(FreshviewError):
    """The consistent snapshot could not be taken (privileges, binlog off ...)."""


def choose_method(version: str, method: str = "auto") -> str:
    """``mariadb`` (lock-free) on MariaDB, ``lock`` (FLUSH TABLES WITH READ LOCK) elsewhere, unless told."""
    if method not in ("auto", "mariadb", "lock"):
        raise ValueError(f"snapshot method {method!r}: expected auto, mariadb or lock")
    if method != "auto":
        return method
    return "mariadb" if "mariadb" in version.lower() else "lock"


def snapshot_file_offset(status_rows: Sequence[tuple]) -> tuple[str, int]:
    """(file, offset) from ``SHOW STATUS LIKE 'binlog_snapshot_%'``'s rows."""
    status = {str(k).lower(): v for k, v in status_rows}
    file = status.get("binlog_snapshot_file")
    offset = status.get("binlog_snapshot_position")
    if not file or offset in (None, ""):
        raise SnapshotError("the server reports no binlog snapshot position (is log_bin on?); "
                            "binlog_snapshot_file/_position are MariaDB's; on MySQL use method='lock'")
    return str(file), int(offset)


@dataclass
class Snapshot:
    """An open consistent snapshot: ``position`` and ``read_table``; ``close`` ends it."""

    connection: pymysql.connections.Connection
    position: BinlogPosition
    method: str

    @staticmethod
    def open(connect_args: dict, method: str = "auto") -> "Snapshot":
        args = {k: v for k, v in connect_args.items() if k != "cursorclass"}
        conn = pymysql.connect(**{**args, "autocommit": True})
        try:
            with conn.cursor() as cur:
                for statement in SESSION_SETUP:
                    cur.execute(statement)
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            chosen = choose_method(conn.get_server_info(), method)
            position = _take_mariadb(conn) if chosen == "mariadb" else _take_with_lock(conn)
        except BaseException:
            conn.close()
            raise
        return Snapshot(conn, position, chosen)

    def read_table(self, table: SourceTable, batch_rows: int = BATCH_ROWS,
                   progress: Callable[[int], None] | None = None,
                   columns: Collection[str] | None = None) -> Iterator[pa.Table]:
        """The table's rows under the snapshot as inserts (``_weight`` +1), in batches of ``batch_rows``;
        ``columns``: only these (in the table's order, ``TableSchema.projected``), selected by the query."""
        arrow = table.schema.projected(columns).arrow(with_weight=True)
        read = [c for c, named in zip(table.columns, table.schema.columns)  # (schema names may be folded)
                if columns is None or named.name in set(columns)]
        names = ", ".join(quote(c.name) for c in read) or "NULL"  # no column: count the rows
        done = 0
        cur = self.connection.cursor(pymysql.cursors.SSCursor)
        try:
            cur.execute(f"SELECT {names} FROM {table.name.quoted}")
            while True:
                rows = cur.fetchmany(batch_rows)
                if not rows:
                    break
                values_of = list(zip(*rows))
                arrays = [to_arrow(values, col) for values, col in zip(values_of, read)]
                arrays.append(pa.array([1] * len(rows), pa.int64()))
                done += len(rows)
                yield pa.Table.from_arrays(arrays, schema=arrow)
                if progress is not None:
                    progress(done)
        finally:
            cur.close()

    def read_all(self, table: SourceTable, progress: Callable[[int], None] | None = None) -> pa.Table:
        batches = list(self.read_table(table, progress=progress))
        if not batches:
            return table.schema.arrow(with_weight=True).empty_table()
        return pa.concat_tables(batches)

    def close(self) -> None:
        """Ends the snapshot; never raises (a dead connection has no snapshot left to end, and the error
        that killed it, if any, is the one to report)."""
        rollback_quietly(self.connection)  # READ ONLY: nothing to keep
        with contextlib.suppress(Exception):
            self.connection.close()

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _take_mariadb(conn) -> BinlogPosition:
    with conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        file, offset = snapshot_file_offset(cur.fetchall())
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, offset))
        gtid = cur.fetchone()[0]
    if gtid is None:
        raise SnapshotError(f"BINLOG_GTID_POS({file!r}, {offset}) is NULL: the binlog file is not known")
    return BinlogPosition(_text(gtid), file, offset)


def _take_with_lock(conn) -> BinlogPosition:
    with conn.cursor() as cur:
        try:
            cur.execute("FLUSH TABLES WITH READ LOCK")
        except pymysql.err.OperationalError as error:
            raise SnapshotError(f"FLUSH TABLES WITH READ LOCK failed ({error.args[1]}); the lock-based "
                                "snapshot needs the RELOAD privilege") from None
        try:
            cur.execute("SHOW MASTER STATUS")
            status = cur.fetchone()
            if status is None:
                raise SnapshotError("SHOW MASTER STATUS is empty: the binary log is off (log_bin)")
            file, offset = _text(status[0]), int(status[1])
            if "mariadb" in conn.get_server_info().lower():
                cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, offset))
                gtid = _text(cur.fetchone()[0])
            else:
                cur.execute("SELECT @@GLOBAL.gtid_executed")
                gtid = _text(cur.fetchone()[0]).replace("\n", "")
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        finally:
            cur.execute("UNLOCK TABLES")
    return BinlogPosition(gtid, file, offset)


def _text(v) -> str:
    return v.decode() if isinstance(v, (bytes, bytearray)) else str(v)

