"""``base.Source`` for PostgreSQL: a logical replication slot, pgoutput, exported snapshots.

The slot holds the position: it is created once, streamed from (the server
resumes after its confirmed position), acknowledged after each committed
step.  A slot the server invalidated (``max_slot_wal_keep_size``) or that
someone dropped is a lost position.  New tables are snapshotted through a
temporary slot's exported snapshot, whose consistent point is the snapshot's
position.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from typing import Callable, Collection, Iterator, Mapping, Sequence

import psycopg
import psycopg.conninfo
import pyarrow as pa
from psycopg import sql as psql

from freshview.connectors.base import (
    Attached, Comparison, LookupOld, PositionLost, Recheck, Renamed, ResultSpec, SourceTable, StreamError, TableChange,
    Transaction,
)
from freshview.connectors.edge import guarded
from freshview.connectors.postgres import catalog, faults, named, protocol as p, renames, verify
from freshview.connectors.postgres.catalog import describe_table
from freshview.connectors.postgres.identifiers import identifier, qualified
from freshview.connectors.postgres.changes import SourceTransaction, TransactionAssembler, to_changes
from freshview.connectors.postgres.lsn import Lsn
from freshview.connectors.postgres.replication import ReplicationConnection, ReplicationError
from freshview.connectors.postgres.snapshot import read_table
from freshview.connectors.postgres.types import UnsupportedTypeError, sql_type
from freshview.errors import CatalogError, ConnectionLost, FreshviewError
from freshview.schema import SqlType, TableSchema

log = logging.getLogger("freshview.service")

PG_EPOCH = 946_684_800.0  # 2000-01-01 in Unix seconds
_SNAPSHOTS = itertools.count()


class SourceError(FreshviewError):
    """The source cannot be used (no REPLICATION attribute, publication trouble ...)."""


def lost_position(message: str) -> bool:
    """Whether the walsender refused because the slot cannot serve its position any more."""
    return ("invalidated" in message or "can no longer get changes" in message
            or ("replication slot" in message and "does not exist" in message))


class PostgresStream:
    """``base.Stream``: whole transactions from the slot (pgoutput decoded and assembled)."""

    def __init__(self, repl: ReplicationConnection, followed: Mapping[int, str] | None = None,
                 renamed: Mapping[str, Renamed] | None = None) -> None:
        self.repl = repl
        self.decoder = p.Decoder()
        self.assembler = TransactionAssembler()
        self._definitions: dict[p.Relation, Mapping[str, SqlType | None]] = {}
        self.followed = followed if followed is not None else {}  # OID -> the name a followed table has
        self.renamed = renamed if renamed is not None else {}  # ``Source.rename``'s (the source's own dict)
        self._seen: dict[int, p.Relation] = {}  # followed relations as last described by the stream

    @property
    def waited_s(self) -> float:
        return self.repl.waited_s

    @property
    def reached(self) -> Lsn | None:
        """Every transaction ending at or before this was read: the last keepalive's position (the server sends
        one when it waits for WAL with this stream's acknowledged position behind what it sent)."""
        return Lsn(self.repl.sent_lsn) if self.repl.sent_lsn else None

    def read(self, timeout: float, budget: float) -> tuple[Transaction | None, bool]:
        until = time.monotonic() + budget
        got = 0
        feed, decoder = self.assembler.feed_payload, self.decoder
        try:
            for payload in self.repl.payloads(timeout):
                got += 1
                txn = feed(payload, decoder)
                if txn is not None:
                    return self._neutral(txn), True
                if not got % 1024 and time.monotonic() >= until:
                    break
        except (ReplicationError, psycopg.OperationalError) as exc:
            raise (PositionLost if lost_position(str(exc)) else StreamError)(str(exc)) from None
        return None, got > 0

    def _neutral(self, txn: SourceTransaction) -> Transaction:
        txn = renames.as_followed(txn, self.followed)  # (keyed by the names the engine follows them by)
        return Transaction(Lsn(txn.end_lsn), txn.commit_time / 1e6 + PG_EPOCH,
                           {t: len(c) for t, c in txn.changes.items()}, frozenset(txn.truncated),
                           {t: renames.followed_definition(self._columns(rel), self.renamed.get(t))
                            for t, rel in txn.relations.items()}, txn,
                           self._altered(txn.relations.values()))

    def _altered(self, relations) -> dict[str, None]:
        """Followed tables whose relation is not as the stream last described it (DDL: renamed, key or replica
        identity changed ...) or named otherwise than known (renamed): the core rechecks them before a
        change of them is applied with the old key or names."""
        out: dict[str, None] = {}
        for rel in relations:
            name = self.followed.get(rel.oid)
            if name is None:
                continue
            before = self._seen.get(rel.oid)
            known = self.renamed[name].name if name in self.renamed else name
            if (before is not None and before != rel) or rel.qualified_name != known:
                out[name] = None
            self._seen[rel.oid] = rel
        return out

    def _columns(self, rel: p.Relation) -> Mapping[str, SqlType | None]:
        found = self._definitions.get(rel)
        if found is None:
            if len(self._definitions) > 1000:
                self._definitions.clear()
            found = self._definitions[rel] = {c.name: _type_or_none(c) for c in rel.columns}
        return found

    def acknowledge(self, position: Lsn) -> None:
        """A lost connection is left for the next ``read`` to report: the slot then re-sends from its
        confirmed position, and the core skips what the engine already holds."""
        with contextlib.suppress(psycopg.OperationalError):
            self.repl.acknowledge(position.value)

    def keepalive(self) -> None:
        with contextlib.suppress(psycopg.OperationalError):
            self.repl.send_status()

    def close(self) -> None:
        self.repl.close()


def _type_or_none(column: p.Column) -> SqlType | None:
    try:
        return sql_type(column.type_oid, column.type_modifier)
    except UnsupportedTypeError:
        return None


def deltas(transactions: Sequence[Transaction], schemas: Mapping[str, TableSchema],
           lookup_old: LookupOld, renamed: Mapping[str, Renamed] | None = None) -> dict[str, TableChange]:
    """``to_changes`` over the tables each transaction is restricted to (``Transaction.restricted``), renamed
    columns under the engine's names (``renamed``)."""
    raw = []
    for txn in transactions:
        pg: SourceTransaction = renames.followed_columns(txn.payload, renamed or {})
        raw.append(SourceTransaction(pg.xid, pg.commit_lsn, pg.end_lsn, pg.commit_time,
                                     {t: c for t, c in pg.changes.items() if t in txn.rows},
                                     [t for t in pg.truncated if t in txn.truncated], pg.relations))
    return to_changes(raw, dict(schemas), lookup_old)


@guarded(faults.classify)
class PostgresSnapshot:
    """``base.Snapshot``: a temporary slot's exported snapshot (alive while the connection is)."""

    def __init__(self, dsn: str, conn: psycopg.Connection, repl: ReplicationConnection, name: str,
                 slot: str = "") -> None:
        self.dsn = dsn
        self.conn = conn
        self.slot = slot  # the service's slot: its row of freshview.progress holds the results' position
        info = repl.create_slot(name, temporary=True)
        self.position = Lsn(info.consistent_point)
        self.snapshot_name = info.snapshot_name or ""

    def estimate(self, table: str) -> int | None:
        total = self.conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                                  (table,)).fetchone()[0]
        return int(total) if total and total > 0 else None

    def read(self, table: SourceTable, chunk_rows: int, progress: Callable[[int], None],
             columns: Collection[str] | None = None) -> Iterator[pa.Table]:
        """The readers' sessions are named ``freshview snapshot``; one that cannot import the snapshot
        because the connection exporting it died (it was killed) meets a lost connection."""
        partitioned = self.conn.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(%s)",
                                        (table.name,)).fetchone()
        dsn = psycopg.conninfo.make_conninfo(self.dsn, **named(self.dsn, "freshview snapshot"))
        try:
            yield from read_table(dsn, self.snapshot_name, table.name, table.schema, chunk_rows, progress,
                                  only=not (partitioned and partitioned[0]), columns=columns)
        except psycopg.errors.InvalidParameterValue as exc:
            if "snapshot" not in str(exc):
                raise
            raise ConnectionLost(f"the snapshot {self.snapshot_name} is gone (its connection was lost): "
                                 f"{str(exc).strip()}") from exc

    def compare(self, spec: ResultSpec, sql: str, change: Callable[[Lsn | None], pa.Table | None],
                limit: int) -> Comparison:
        dsn = psycopg.conninfo.make_conninfo(self.dsn, **named(self.dsn, "freshview verify"))
        return verify.compare(dsn, self.snapshot_name, self.slot, spec, sql, change, Lsn.from_text, limit)


@guarded(faults.classify)
class PostgresSource:
    """``base.Source`` over one database: the service's connection ``conn`` and its slot."""

    def __init__(self, dsn: str, conn: psycopg.Connection, slot: str, publication: str) -> None:
        self.dsn = dsn
        self.conn = conn
        self.slot = slot
        self.label = slot
        self.publication = publication
        self.followed_oids: dict[int, str] = {}  # the relations prepared (OID -> the name they are followed by)
        self.renamed: dict[str, Renamed] = {}  # ``rename``: followed name -> the names now
        self._rechecked: dict[str, tuple[str, Recheck]] = {}  # catalog.recheck's answers, by their digests

    def _replication(self, name: str = "freshview") -> ReplicationConnection:
        try:
            return ReplicationConnection(self.dsn, name)
        except ReplicationError as exc:
            raise SourceError(f"{exc} (the role needs the REPLICATION attribute; see `freshview setup`)") from None

    def attach(self, position: Lsn | None, has_state: bool) -> Attached:
        """The slot holds the position (``position`` is not needed): a slot the server invalidated is
        dropped and, like a missing one, created anew."""
        row = self.conn.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s",
                                (self.slot,)).fetchone()
        lost = None
        with self._replication() as repl:
            if row is not None and row[0] == "lost":
                lost = f"replication slot {self.slot} was invalidated (the server removed WAL it still needed)"
                repl.drop_slot(self.slot)
                row = None
            if row is None:
                if has_state:
                    lost = lost or f"replication slot {self.slot} is gone"
                repl.create_slot(self.slot, export_snapshot=False)
        return Attached(created=row is None, lost=lost)

    def stream(self, position: Lsn | None) -> PostgresStream:
        """From the slot's confirmed position (the slot, not ``position``, says where)."""
        try:
            repl = ReplicationConnection(self.dsn)
        except ReplicationError as exc:
            raise StreamError(str(exc)) from None
        try:
            repl.start(self.slot, self.publication)
        except ReplicationError as exc:
            repl.close()
            raise (PositionLost if lost_position(str(exc)) else StreamError)(str(exc)) from None
        return PostgresStream(repl, self.followed_oids, self.renamed)

    def describe(self, table: str) -> SourceTable:
        found = describe_table(self.conn, table)
        return SourceTable(found.name, found.schema, found.identity, found.places)

    def expansion(self, relation: str) -> str | None:
        return catalog.expansion(self.conn, relation)

    def recheck(self, tables: Mapping[str, tuple[tuple[str, str], ...]]) -> dict[str, Recheck]:
        return catalog.recheck(self.conn, tables, self._rechecked, {t: r.name for t, r in self.renamed.items()})

    def rename(self, renamed: Mapping[str, Renamed]) -> None:
        self.renamed.clear()  # (the open stream's dict too)
        self.renamed.update(renamed)

    def deltas(self, transactions: Sequence[Transaction], schemas: Mapping[str, TableSchema],
               lookup_old: LookupOld) -> dict[str, TableChange]:
        return deltas(transactions, schemas, lookup_old, self.renamed)

    def _now(self, table: str) -> str:
        """A followed table's name now (``rename``)."""
        return self.renamed[table].name if table in self.renamed else table

    def _members(self) -> dict[int, str]:
        """The publication's own tables (OID -> name), as added (not the partitions it publishes through them)."""
        return {oid: qualified(s, t) for oid, s, t in self.conn.execute(
            "SELECT c.oid, n.nspname, c.relname FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid "
            "JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE p.pubname = %s",
            (self.publication,)).fetchall()}

    def prepare(self, tables: Sequence[str]) -> None:
        """Add the tables to the publication (the service's role must own them), each only after checking
        that its presence there leaves the application's writes working (a usable replica identity,
        ``catalog.describe_table``); a table alone (``ONLY``: not its inheritance children), a partitioned
        one published through its root."""
        members = self._members()
        for table in tables:
            oid, name, partitioned = catalog.publishable(self.conn, self._now(table))  # else UPDATE/DELETE would fail
            self.followed_oids[oid] = table if table in self.renamed else name
            if oid in members:
                continue
            if partitioned:
                self._publish_via_root()
            try:
                self.conn.execute(psql.SQL("ALTER PUBLICATION {} ADD TABLE {}{}").format(
                    psql.Identifier(self.publication), psql.SQL("" if partitioned else "ONLY "), identifier(name)))
            except psycopg.errors.InsufficientPrivilege:
                raise CatalogError(
                    f"freshview: cannot add {table} to publication {self.publication} (not its owner); "
                    f"as the table's owner run: ALTER PUBLICATION {self.publication} ADD TABLE ONLY {table};") from None

    def _publish_via_root(self) -> None:
        """Partitioned tables' changes are published as their root's (``freshview setup`` sets it too)."""
        row = self.conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s",
                                (self.publication,)).fetchone()
        if row is not None and not row[0]:
            self.conn.execute(psql.SQL("ALTER PUBLICATION {} SET (publish_via_partition_root = true)").format(
                psql.Identifier(self.publication)))

    def retain(self, tables: Collection[str]) -> None:
        """Every other table leaves the publication (found by OID: a renamed table too), so it no longer
        constrains the application's writes; one the service may not remove is left, with a warning."""
        wanted = {self._now(t) for t in tables}
        for oid, name in self._members().items():
            if name in wanted:
                continue
            self.followed_oids.pop(oid, None)
            try:
                self.conn.execute(psql.SQL("ALTER PUBLICATION {} DROP TABLE ONLY {}").format(
                    psql.Identifier(self.publication), identifier(name)))
            except psycopg.Error as exc:
                log.warning("cannot remove %s from publication %s (%s); as its owner run: ALTER PUBLICATION %s "
                            "DROP TABLE ONLY %s;", name, self.publication, str(exc).strip(), self.publication, name)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[PostgresSnapshot]:
        with self._replication("freshview snapshot") as repl:
            # A name of its own each time: a killed snapshot's temporary slot may outlive its session a moment.
            name = f"{self.slot}_snap_{os.getpid()}_{next(_SNAPSHOTS)}"
            yield PostgresSnapshot(self.dsn, self.conn, repl, name, self.slot)

    def retained_bytes(self) -> int | None:
        row = self.conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                                "FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)).fetchone()
        return None if row is None else row[0]

    def position_from_text(self, text: str) -> Lsn:
        return Lsn.from_text(text)

    def close(self) -> None:
        pass  # the connection is the connector's
