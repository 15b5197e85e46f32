"""``base.ResultSink`` for PostgreSQL: result tables, and each step's changes with its LSN in one transaction.

The LSN lives in ``freshview.progress`` (one row per slot), committed in the
same transaction as the result changes it covers; ``freshview.views`` gets
each changed view's row count and lag in that transaction too.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from typing import Mapping

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql as psql

from freshview.connectors.base import ResultSpec, StepStats, sink_refused
from freshview.connectors.edge import guarded
from freshview.connectors.postgres import control, existing as users_table, faults, swap
from freshview.connectors.postgres.identifiers import identifier, qualified, split
from freshview.connectors.postgres.lsn import Lsn
from freshview.connectors.postgres.sink import ResultShape, ResultTable
from freshview.connectors.result_changes import replacing
from freshview.errors import CatalogError, SinkError
from freshview.schema import WEIGHT

log = logging.getLogger("freshview.service")

PREFILL_TXN_ROWS = 20_000  # rows per transaction of a result written aside (``PostgresResults.prefill``)

# After a step's result writes: the changed views get their row count and lag, every active view
# the position its table now holds, the service its position and counters; returns the server's clock.
_AFTER_STEP = (
    "WITH views AS (UPDATE freshview.views SET last_lsn = CASE WHEN status = 'active' THEN %(lsn)s::pg_lsn "
    "ELSE last_lsn END, rows = rows + COALESCE((%(added)s::bigint[])[array_position(%(names)s::text[], name)], 0), "
    "changes_applied = changes_applied + "
    "COALESCE((%(written)s::bigint[])[array_position(%(names)s::text[], name)], 0), "
    "lag_ms = CASE WHEN name = ANY(%(names)s::text[]) THEN %(lag)s ELSE lag_ms END, "
    "updated_at = CASE WHEN name = ANY(%(names)s::text[]) THEN now() ELSE updated_at END, "
    "changes_received = changes_received + COALESCE((%(received)s::bigint[])[array_position(%(ran)s::text[], name)], 0), "
    "last_step_at = CASE WHEN name = ANY(%(ran)s::text[]) THEN now() ELSE last_step_at END, "
    "last_step_ms = COALESCE((%(ms)s::float8[])[array_position(%(ran)s::text[], name)], last_step_ms), "
    "executor = COALESCE((%(executors)s::text[])[array_position(%(ran)s::text[], name)], executor) "
    "WHERE status = 'active' OR name = ANY(%(names)s::text[])) "
    "UPDATE freshview.progress SET lsn = %(lsn)s, steps = steps + 1, changes = changes + %(changes)s, "
    "lag_ms = %(lag)s, changes_per_s = %(rate)s, status = 'running', heartbeat_at = now(), updated_at = now() "
    "WHERE slot = %(slot)s RETURNING extract(epoch FROM clock_timestamp())")


def readable_only_by(conn: psycopg.Connection, table: psql.Composable, reader: str | None) -> None:
    """A new result table, owned by the service's role, may be read by ``reader`` (the view's requester,
    and so the roles that are members of it), who may grant that on (WITH GRANT OPTION: it could copy
    the rows anyway), and nobody else: grants the table got from default privileges
    (``ALTER DEFAULT PRIVILEGES ... TO PUBLIC``) are revoked."""
    others = conn.execute(
        "SELECT DISTINCT a.grantee FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a "
        "WHERE c.oid = %s::regclass AND a.grantee <> c.relowner", (table.as_string(conn),)).fetchall()
    for (grantee,) in others:
        who = psql.SQL("PUBLIC") if grantee == 0 else psql.Identifier(
            conn.execute("SELECT pg_get_userbyid(%s)", (grantee,)).fetchone()[0])
        conn.execute(psql.SQL("REVOKE ALL ON {} FROM {}").format(table, who))
    if reader and reader != conn.info.user:
        conn.execute(psql.SQL("GRANT SELECT ON {} TO {} WITH GRANT OPTION").format(table, psql.Identifier(reader)))


def result_table(spec: ResultSpec) -> ResultTable:
    columns = tuple((name, t.pg) for name, t in spec.columns)
    shape = ResultShape(columns, tuple(columns[i][0] for i in spec.key.key), spec.key.counted, spec.key.nullable)
    return ResultTable(spec.name, shape)


def _fill_name(name: str) -> str:
    """Where a population fills result table ``name`` aside (``prefill``): ``_fv_fill_<hash of the name>_<a
    nonce>`` in its schema, a table of each population's own."""
    schema, _ = split(name)
    tag = hashlib.blake2b(name.encode(), digest_size=6).hexdigest()
    return qualified(schema or "public", f"_fv_fill_{tag}_{secrets.token_hex(4)}")


@guarded(faults.classify)
class PostgresResults:
    """Result tables of one database; positions are the slot's row of ``freshview.progress``."""

    def __init__(self, conn: psycopg.Connection, slot: str) -> None:
        self.conn = conn
        self.slot = slot
        self.tables: dict[str, ResultTable] = {}

    def stored_position(self) -> Lsn | None:
        row = self.conn.execute("SELECT lsn FROM freshview.progress WHERE slot = %s", (self.slot,)).fetchone()
        lsn = Lsn.from_text(str(row[0])) if row and row[0] is not None else None
        return lsn if lsn is not None and lsn.value else None

    def attach(self, spec: ResultSpec) -> None:
        self.tables[spec.name] = result_table(spec)

    def forget(self, name: str) -> None:
        self.tables.pop(name, None)

    def knows(self, name: str) -> bool:
        return name in self.tables

    def prefill(self, spec: ResultSpec, rows: pa.Table, request: int | None) -> str | None:
        """(A population's worker, on its own connection.)  The view's ``rows`` written aside, into a table of
        its own beside the result table (``_fill_name``), which ``create(prefilled=...)`` renames into place
        at the join, writing only the rows that changed since: the fill leaves the step loop.  That table's
        name; None (nothing written) for a view that fills the user's table.

        Written in transactions of ``PREFILL_TXN_ROWS`` rows: the replication slot's walsender decodes every
        transaction in the WAL, published or not, before the changes committed after it, so one large
        transaction here held back every other view's next change for as long as its decoding took
        (~0.8 s for 300k rows); the other views' changes now wait for one part at most."""
        if self._existing(spec.name, request):
            return None
        name = _fill_name(spec.name)
        shadow = ResultTable(name, result_table(spec).shape)
        with self.conn.transaction():
            for statement in shadow.create_sql():
                self.conn.execute(statement)
        for start in range(0, rows.num_rows, PREFILL_TXN_ROWS):  # (a crash between two: dropped at the next start)
            with self.conn.transaction():
                shadow.apply(self.conn, rows.slice(start, PREFILL_TXN_ROWS))
        return name

    def drop_prefill(self, shadow: str | None = None) -> None:
        """A prefilled table nobody will rename into place (the population ended otherwise; None: all)."""
        with self.conn.transaction():
            names = [shadow] if shadow is not None else [qualified(s, t) for s, t in self.conn.execute(
                "SELECT schemaname, tablename FROM pg_tables WHERE tablename LIKE '\\_fv\\_fill\\_%'")]
            for name in names:
                self.conn.execute(psql.SQL("DROP TABLE IF EXISTS {}").format(identifier(name)))

    def create(self, spec: ResultSpec, sql: str, initial: pa.Table, position: Lsn | None, *,
               replace: bool, reader: str | None, request: int | None,
               prefilled: tuple[str, pa.Table] | None = None) -> None:
        table = result_table(spec)
        conn = self.conn
        change = None
        try:
            with conn.transaction():
                users = self._existing(spec.name, request)
                if users:  # the user's table: checked, its rows replaced (indexes, grants ... kept)
                    self._refill(table, spec.name, reader)
                else:
                    if replace:
                        conn.execute(psql.SQL("DROP TABLE IF EXISTS {}").format(table.name))
                    shadow, rows = prefilled if prefilled is not None else (None, None)
                    if shadow is not None and conn.execute("SELECT to_regclass(%s)", (shadow,)).fetchone()[0]:
                        change = replacing(rows, initial)  # (None: refilled)
                        conn.execute(psql.SQL("ALTER TABLE {} RENAME TO {}").format(
                            identifier(shadow), psql.Identifier(split(spec.name)[1])))
                        if change is None:
                            conn.execute(psql.SQL("DELETE FROM {}").format(table.name))
                    else:
                        for statement in table.create_sql():
                            conn.execute(statement)
                    readable_only_by(conn, table.name, reader)
                table.apply(conn, initial if change is None else change)
                conn.execute(
                    "INSERT INTO freshview.views (name, sql, status, rows, last_lsn, owner) "
                    "VALUES (%s, %s, 'active', %s, %s, %s) "
                    "ON CONFLICT (name) DO UPDATE SET sql = EXCLUDED.sql, status = 'active', error = NULL, phase = NULL, "
                    "rows = EXCLUDED.rows, last_lsn = EXCLUDED.last_lsn, updated_at = now(), "
                    "owner = COALESCE(EXCLUDED.owner, freshview.views.owner)",
                    (spec.name, sql, pc.sum(initial.column(WEIGHT)).as_py() or 0,
                     (position or Lsn(0)).to_text(), reader))
                if users:
                    conn.execute("UPDATE freshview.views SET existing = true WHERE name = %s", (spec.name,))
                if request is not None:
                    control.finish_request(conn, request)
        except psycopg.Error as exc:
            if faults.classify(exc) is not None:
                raise  # the connection, not the table: the guard raises its fault
            raise CatalogError(f"freshview: cannot create the result table {spec.name}: {exc}".strip()) from None
        self.tables[spec.name] = table

    def alter(self, spec: ResultSpec, sql: str, initial: pa.Table, position: Lsn | None, *,
              reader: str | None, request: int | None, altered: bool = True,
              previous: pa.Table | None = None) -> None:
        """``alter_view``'s swap, one transaction: the table kept, altered or replaced (``swap.reshape``; a table
        not known, of a view that stopped, as the catalog describes it: ``swap.found``), filled, the view's row
        given the new SQL (and ``altered_at``), the request done.  A table the user made (``use_existing_table``)
        is checked and refilled, never altered."""
        table = result_table(spec)
        old = self.tables.get(spec.name)
        conn = self.conn
        change = None
        try:
            with conn.transaction():
                if self._existing(spec.name, None):
                    self._refill(table, spec.name, reader)
                    chosen = swap.How.REFILL
                else:
                    shape = old.shape if old is not None else swap.found(conn, spec.name, table.shape)
                    change = replacing(previous, initial) if previous is not None and old is not None and \
                        swap.how(shape, table.shape) is swap.How.REFILL else None
                    chosen = swap.reshape(conn, shape, table, keep_rows=change is not None)
                if chosen is swap.How.REPLACE:
                    owner = conn.execute("SELECT owner FROM freshview.views WHERE name = %s", (spec.name,)).fetchone()
                    readable_only_by(conn, table.name, owner[0] if owner else reader)
                table.apply(conn, initial if change is None else change)
                conn.execute(
                    "UPDATE freshview.views SET sql = %s, status = 'active', error = NULL, phase = NULL, "
                    "rows_read = NULL, rows_total = NULL, elapsed_s = NULL, rows = %s, last_lsn = %s, "
                    "updated_at = now(), altered_at = CASE WHEN %s THEN now() ELSE altered_at END WHERE name = %s",
                    (sql, pc.sum(initial.column(WEIGHT)).as_py() or 0, (position or Lsn(0)).to_text(), altered,
                     spec.name))
                if request is not None:
                    control.finish_request(conn, request)
        except psycopg.Error as exc:
            if faults.classify(exc) is not None:
                raise
            raise CatalogError(f"freshview: cannot alter the result table {spec.name}: {exc}".strip()) from None
        self.tables[spec.name] = table
        log.info("view %s: result table %s", spec.name, {swap.How.REFILL: "kept and refilled" if change is None else
                                                          f"kept, {change.num_rows} rows changed",
                                                          swap.How.ALTER: "altered in place and refilled",
                                                          swap.How.REPLACE: "replaced"}[chosen])

    def _existing(self, name: str, request: int | None) -> bool:
        """Whether the view fills a table the user made: its request asked so, or it did when created."""
        return bool(self.conn.execute(
            "SELECT coalesce((SELECT existing FROM freshview.requests WHERE id = %s), false) "
            "OR coalesce((SELECT existing FROM freshview.views WHERE name = %s), false)", (request, name)).fetchone()[0])

    def _refill(self, table: ResultTable, name: str, reader: str | None) -> None:
        """The user's table, checked (``existing.refusal``) and emptied, in the caller's transaction.  The view's
        requester (``reader``) must hold INSERT and DELETE on it: the service writes it with its own rights, and
        would otherwise overwrite, for anyone who asks, any table it may write."""
        described = users_table.describe(self.conn, name)
        if described is None:
            raise CatalogError(f"freshview: there is no table {name} to fill (use_existing_table => true): "
                               f"create it first, or leave use_existing_table out")
        if reader is not None and reader != self.conn.info.user:
            lacking = [p for p in ("INSERT", "DELETE") if not self.conn.execute(
                "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = %s) AND has_table_privilege(%s, %s, %s)",
                (reader, reader, name, p)).fetchone()[0]]
            if lacking:
                raise CatalogError(f"freshview: permission denied to fill table {name} (use_existing_table): the "
                                   f"view's requester {reader} may not {' or '.join(lacking)} it; the table's owner "
                                   f"can GRANT {', '.join(lacking)} ON {name} TO {reader}")
        refusal = users_table.refusal(name, table.shape, described)
        if refusal:
            raise CatalogError(refusal)
        self.conn.execute(psql.SQL("DELETE FROM {}").format(table.name))

    def revoke_reader(self, name: str, reader: str) -> None:
        if reader == self.conn.info.user:
            return
        try:
            with self.conn.transaction():
                self.conn.execute(psql.SQL("REVOKE ALL ON {} FROM {} CASCADE").format(  # and whom it granted
                    identifier(name), psql.Identifier(reader)))
        except psycopg.Error as exc:  # the table or the role is gone: nothing left to read
            log.warning("cannot revoke %s's SELECT on %s: %s", reader, name, exc)

    def drop(self, name: str, request: int | None) -> None:
        self.tables.pop(name, None)
        with self.conn.transaction():
            if not self._existing(name, None):  # a table the user made stays (as it was at the drop)
                self.conn.execute(psql.SQL("DROP TABLE IF EXISTS {}").format(identifier(name)))
            self.conn.execute("DELETE FROM freshview.views WHERE name = %s", (name,))
            if request is not None:
                control.finish_request(self.conn, request)

    def commit_step(self, outputs: Mapping[str, pa.Table], position: Lsn, stats: StepStats) -> float:
        """One transaction: one statement per changed view (two for a counted view), then one that
        updates ``freshview.views`` and ``freshview.progress`` and reads the server's clock."""
        changed: list[str] = []
        added: list[int] = []
        written: list[int] = []
        with self.conn.transaction():
            for name, delta in outputs.items():
                table = self.tables.get(name)
                if table is None:
                    continue
                try:
                    table.apply(self.conn, delta)
                except psycopg.Error as exc:
                    if faults.classify(exc) is not None:
                        raise
                    raise SinkError(sink_refused(name, exc), name) from exc
                changed.append(name)
                added.append(pc.sum(delta.column(WEIGHT)).as_py() or 0)
                written.append(delta.num_rows)
            ran = list(stats.views)
            row = self.conn.execute(_AFTER_STEP, {
                "lsn": position.to_text(), "names": changed, "added": added, "written": written, "lag": stats.lag_ms,
                "changes": stats.changes, "rate": stats.rate, "slot": self.slot, "ran": ran,
                "received": [stats.views[v].received for v in ran], "ms": [stats.views[v].duration_ms for v in ran],
                "executors": [stats.views[v].executor for v in ran]}).fetchone()
        # The server's clock, like the source commit times (read just before COMMIT).
        return float(row[0]) if row else time.time()

    def record_position(self, position: Lsn) -> None:
        with self.conn.transaction():
            self.conn.execute("UPDATE freshview.progress SET lsn = %s, updated_at = now() WHERE slot = %s "
                              "AND lsn < %s", (position.to_text(), self.slot, position.to_text()))
