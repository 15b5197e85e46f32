"""``base.ResultSink`` for MySQL/MariaDB: result tables (``sink``), each step's changes with its binlog
position in one transaction (``sink.commit_step``), the position read back (``control.read_position``).

MySQL commits DDL implicitly, so ``create`` cannot make the new table and its
rows one transaction as on PostgreSQL: the table is created first, then filled
and the view marked active in one transaction; if that fails the table is
dropped again, and a table left by a crash in between is dropped when the
service starts (``MySqlControl.start``: views still ``creating``).  A table
replaced (a view recomputed) is built and filled under another name, then
swapped in by one atomic ``RENAME TABLE``, so its readers never find it
missing or empty.

A table the user made (``create_view_use_existing_table``, ``existing.py``) is
never created, altered, swapped or dropped: it is checked (its columns and key,
and the requester's right to write it), emptied and filled in the transaction
that makes the view active, then written by each step.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from freshview.connectors.base import ResultSpec, StepStats
from freshview.connectors.edge import guarded
from freshview.connectors.mysql import control, existing as users_table, faults, sink
from freshview.connectors.mysql.access import Account, MySqlGrants, resolve_account
from freshview.connectors.mysql.catalog import quote, spell, split_table_name
from freshview.connectors.mysql.transactions import BinlogPosition
from freshview.connectors.result_changes import replacing
from freshview.errors import CatalogError, SchemaError
from freshview.schema import WEIGHT

log = logging.getLogger("freshview.service")


def _drop_quietly(conn: Any, table: sink.ResultTable) -> None:
    """Drop a table being created after a failure; never raises over it (on a dead connection the table
    goes when the service attaches again, as a view still 'creating')."""
    try:
        with conn.cursor() as cur:
            for statement in table.drop_sql():
                cur.execute(statement)
    except (pymysql.err.MySQLError, OSError):
        pass


def result_table(spec: ResultSpec) -> sink.ResultTable:
    return sink.ResultTable(spec.name, sink.result_shape(spec.columns, spec.key))


@guarded(faults.classify)
class MySqlResults:
    """Result tables of one followed database (``source``: its name, the key of ``freshview.progress``)."""

    def __init__(self, conn: Any, source: str) -> None:
        self.conn = conn
        self.source = source
        self.tables: dict[str, sink.ResultTable] = {}
        sink.prepare_session(conn)

    def stored_position(self) -> BinlogPosition | None:
        text = control.read_position(self.conn, self.source)
        return BinlogPosition.from_text(text) if text else None

    def attach(self, spec: ResultSpec) -> None:
        self.tables[spec.name] = result_table(spec)

    def forget(self, name: str) -> None:
        self.tables.pop(name, None)

    def knows(self, name: str) -> bool:
        return name in self.tables

    def prefill(self, spec: ResultSpec, rows: pa.Table, request: int | None) -> str | None:
        """(A population's worker, on its own connection.)  The view's ``rows`` written aside, into a table of
        its own beside the result table (``_fv_fill_<tag>_<nonce>``), renamed into place by
        ``create(prefilled=...)`` at the join, which writes only the rows that changed since: the fill leaves
        the step loop.  That table's name."""
        conn = self.conn
        database, _ = split_table_name(spec.name)
        if not database or self._existing(spec.name, request):
            return None
        tag = hashlib.blake2b(spec.name.encode(), digest_size=6).hexdigest()
        shadow = sink.ResultTable(f"{spell(database)}._fv_fill_{tag}_{secrets.token_hex(4)}", result_table(spec).shape)
        _fill_aside(conn, shadow, rows)
        return shadow.qualified_name

    def drop_prefill(self, shadow: str | None = None) -> None:
        """A prefilled table nobody will rename into place (the population ended otherwise; None: all)."""
        try:
            with self.conn.cursor() as cur:
                if shadow is not None:
                    names = [shadow]
                else:
                    cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                                "WHERE TABLE_NAME LIKE '\\_fv\\_fill\\_%'")
                    names = [f"{spell(d)}.{spell(t)}" for d, t in cur.fetchall()]
                for name in names:
                    cur.execute(f"DROP TABLE IF EXISTS {sink.quote_table(name)}")
        except (pymysql.err.MySQLError, OSError):
            pass  # (a dead connection: the tables stay, dropped at the next attach)

    def create(self, spec: ResultSpec, sql: str, initial: pa.Table, position: BinlogPosition | None, *,
               replace: bool, reader: str | None, request: int | None,
               prefilled: tuple[str, pa.Table] | None = None) -> None:
        """``reader`` (the requester's account) gets SELECT on the table, and no other account keeps a
        table-level grant on its name; the result database's own privileges still apply (see README).
        ``prefilled``: the rows a population wrote aside (``prefill``), if that table is there."""
        conn = self.conn
        try:
            table = result_table(spec)
            if self._existing(spec.name, request):  # the user's table: checked, its rows replaced
                self._refill(spec.name, table, sql, initial, position, request, reader, existing=True)
                self.tables[spec.name] = table
                return
            database, name = split_table_name(spec.name)
            exists = bool(database) and self._exists(database, name)
            shadow, old = _shadow_of(spec.name, table.shape) if database else (None, "")
            write = initial
            if prefilled is not None and database and self._exists(database, split_table_name(prefilled[0])[1]):
                shadow = filled = sink.ResultTable(prefilled[0], table.shape)  # (a population's worker filled it:
                change = replacing(prefilled[1], initial)  # only what changed since is written)
                if change is None:
                    with conn.cursor() as cur:
                        cur.execute(f"DELETE FROM {shadow.table}")
                else:
                    write = change
                if not exists:  # (its name now, before its grants, which MariaDB gives a table that exists)
                    _rename_in(conn, table, shadow, old, exists)
                    filled = table
            else:
                filled = shadow if replace and exists and shadow is not None else table  # (aside, swapped in)
                with conn.cursor() as cur:
                    for statement in filled.drop_sql() + filled.create_sql():
                        cur.execute(statement)  # commits implicitly
            try:  # (grants are by name: the table swapped in under it has them)
                self._readable_only_by(spec.name, reader)  # GRANT and REVOKE commit implicitly too
            except BaseException:
                _drop_quietly(conn, filled)
                raise
            conn.begin()
            try:
                filled.apply(conn, write)
                control.activate_view(conn, spec.name, sql, pc.sum(initial.column(WEIGHT)).as_py() or 0,
                                      position.to_text() if position is not None else None)
                _commit(conn, request)
            except BaseException:
                faults.rollback_quietly(conn)
                _drop_quietly(conn, filled)
                raise
            if filled is not table:
                assert shadow is not None
                _rename_in(conn, table, shadow, old, exists)
        except (pymysql.err.MySQLError, SchemaError) as exc:
            if faults.classify(exc) is not None:
                raise  # the connection, not the table: the guard raises its fault
            raise CatalogError(f"freshview: cannot create the result table {spec.name}: {exc}") from None
        self.tables[spec.name] = table

    def alter(self, spec: ResultSpec, sql: str, initial: pa.Table, position: BinlogPosition | None, *,
              reader: str | None, request: int | None, altered: bool = True,
              previous: pa.Table | None = None) -> None:
        """``alter_view``'s swap.  The same columns: the table kept, emptied and filled in one transaction
        (InnoDB: readers see the old rows or the new).  Other columns: MariaDB's DDL commits, so a new table
        is filled aside and swapped in by one atomic ``RENAME TABLE`` (grants, made by name, stay; the old
        table's own indexes, triggers, and its identity do not); the view's row gets the new SQL just before the
        RENAME, so a crash between the two leaves the view (phase swapping) rebuilt from the definition its
        table has, not the old one (readers would see the old rows again until the alter's retry).  A table
        the service does not know (the view stopped) is compared by the catalog's columns (``_kept``); a table
        the user made is checked and refilled, never swapped."""
        conn = self.conn
        table = result_table(spec)
        old = self.tables.get(spec.name)
        try:
            users = self._existing(spec.name, None)
            if users or self._kept(spec.name, old, table):
                change = replacing(previous, initial) if previous is not None and old is not None and \
                    old.shape == table.shape and not users else None
                self._refill(spec.name, table, sql, initial, position, request, reader, existing=users,
                             altered=altered, change=change)
                how = "kept and refilled"
            else:
                # the new SQL first: the RENAME commits on its own, and a crash between it and the view's row
                # must leave a view (phase swapping) rebuilt from the definition its table now has
                before = self._store_sql(spec.name, sql)
                try:
                    self._swap_in(spec.name, table, initial)
                except Exception as exc:
                    if faults.classify(exc) is None and before is not None:  # (a fault: the restart rebuilds it)
                        self._store_sql(spec.name, before)
                    raise
                conn.begin()
                try:
                    self._activate(spec.name, sql, initial, position, altered)
                    _commit(conn, request)
                except BaseException:
                    faults.rollback_quietly(conn)
                    raise
                how = "filled aside and swapped in by RENAME TABLE"
        except (pymysql.err.MySQLError, SchemaError) as exc:
            if faults.classify(exc) is not None:
                raise
            raise CatalogError(f"freshview: cannot alter the result table {spec.name}: {exc}") from None
        self.tables[spec.name] = table
        log.info("view %s: result table %s", spec.name, how)

    def _store_sql(self, name: str, sql: str) -> str | None:
        """The view's stored SQL becomes ``sql``, committed; the SQL it had."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT `sql` FROM freshview.views WHERE name = %s", (name,))
            found = cur.fetchone()
            cur.execute("UPDATE freshview.views SET `sql` = %s WHERE name = %s", (sql, name))
        self.conn.commit()
        return found[0] if found else None

    def _kept(self, name: str, old: sink.ResultTable | None, table: sink.ResultTable) -> bool:
        """Whether result table ``name`` (known as ``old``, or else as the catalog describes it) is kept for
        ``table``'s shape: the same columns and types (which key columns ``_fv_key`` digests is the sink's
        business: a refill writes every row's anew)."""
        if old is not None:
            return old.shape == table.shape
        found = users_table.describe(self.conn, name, privileges=False)
        if found is None:
            return False
        return {n: c.type for n, c in found.columns.items()} == users_table.wanted(table.shape)

    def _refill(self, name: str, table: sink.ResultTable, sql: str, initial: pa.Table,
                position: BinlogPosition | None, request: int | None, reader: str | None, *, existing: bool,
                altered: bool = False, change: pa.Table | None = None) -> None:
        """The table kept: emptied (or, ``change``, only what differs written) and filled, the view active, in
        one transaction.  ``existing``: the user's table, checked first (``existing.refusal``; the requester
        must be allowed to write it: the service writes it with its own rights)."""
        conn = self.conn
        if existing:
            found = users_table.describe(conn, name)
            if found is None:
                raise CatalogError(f"freshview: there is no table {name} to fill (use_existing_table): create it "
                                   f"first, or call create_view")
            refusal = users_table.refusal(name, table.shape, found)
            lacking = MySqlGrants(conn).may_not_write(reader, name) if reader else []
            if lacking:
                refusal = (f"{refusal}; " if refusal else "freshview: ") + \
                    (f"the view's requester may not {', '.join(lacking)} {name}, which the service would write "
                     f"for it (GRANT INSERT, DELETE ON {name} TO its account)")
            if refusal:
                raise CatalogError(refusal)
        conn.begin()
        try:
            if change is None:
                with conn.cursor() as cur:
                    cur.execute(f"DELETE FROM {table.table}")
            table.apply(conn, initial if change is None else change)
            self._activate(name, sql, initial, position, altered)
            if existing:
                with conn.cursor() as cur:
                    cur.execute("UPDATE freshview.views SET existing = TRUE WHERE name = %s", (name,))
            _commit(conn, request)
        except BaseException:
            faults.rollback_quietly(conn)
            raise

    def _activate(self, name: str, sql: str, initial: pa.Table, position: BinlogPosition | None,
                  altered: bool) -> None:
        """In the open transaction: the view is active with ``sql``, its rows, at ``position`` (``altered``: and
        its ``altered_at`` now)."""
        control.activate_view(self.conn, name, sql, pc.sum(initial.column(WEIGHT)).as_py() or 0,
                              position.to_text() if position is not None else None)
        if altered:
            with self.conn.cursor() as cur:
                cur.execute("UPDATE freshview.views SET altered_at = CURRENT_TIMESTAMP(6) WHERE name = %s", (name,))

    def _existing(self, name: str, request: int | None) -> bool:
        """Whether the view fills a table the user made: its request asked so, or it did when created."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT COALESCE((SELECT existing FROM freshview.requests WHERE id = %s), FALSE) "
                        "OR COALESCE((SELECT existing FROM freshview.views WHERE name = %s), FALSE)", (request, name))
            return bool(cur.fetchone()[0])

    def _swap_in(self, name: str, table: sink.ResultTable, initial: pa.Table) -> None:
        """A new table of ``table``'s shape, filled aside, replaces ``name``'s by one atomic RENAME TABLE (or
        takes its name, when there is none)."""
        shadow, old = _shadow_of(name, table.shape)
        _fill_aside(self.conn, shadow, initial)
        database, table_name = split_table_name(name)
        _rename_in(self.conn, table, shadow, old, exists=self._exists(database or "", table_name))

    def _exists(self, database: str, name: str) -> bool:
        with self.conn.cursor() as cur:
            cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                        (database, name))
            return cur.fetchone() is not None

    def _readable_only_by(self, name: str, reader: str | None) -> None:
        """Revoke every table-level SELECT (and GRANT OPTION) on ``name`` (MySQL keeps grants of a dropped
        table, and they would apply to a new table of that name), then grant SELECT to ``reader``'s account,
        WITH GRANT OPTION: it may share what it could copy anyway."""
        database, table = split_table_name(name)
        target = sink.quote_table(name)
        with self.conn.cursor() as cur:
            cur.execute("SELECT User, Host, NULL, FIND_IN_SET('Grant', Table_priv) FROM mysql.tables_priv "
                        "WHERE Db = %s AND Table_name = %s AND (FIND_IN_SET('Select', Table_priv) "
                        "OR FIND_IN_SET('Grant', Table_priv)) UNION ALL SELECT User, Host, Column_name, 0 "
                        "FROM mysql.columns_priv WHERE Db = %s AND Table_name = %s "
                        "AND FIND_IN_SET('Select', Column_priv)", (database, table, database, table))
            for user, host, column, grant in cur.fetchall():
                what = ("SELECT" if column is None else f"SELECT ({quote(column)})") + (", GRANT OPTION" if grant else "")
                cur.execute(f"REVOKE {what} ON {target} FROM {Account(user, host)}")
            cur.execute("SELECT CURRENT_USER()")
            service = Account.parse(cur.fetchone()[0])
            account = resolve_account(self.conn, reader) if reader else None
            if reader and account is None:
                raise CatalogError(f"freshview: no account {Account.parse(reader)} to grant the result table to")
            if account is not None and account != service:
                cur.execute(f"GRANT SELECT ON {target} TO {account} WITH GRANT OPTION")

    def revoke_reader(self, name: str, reader: str) -> None:
        """MySQL's REVOKE does not cascade: every table-level grant on the table goes, the requester's and
        those it made."""
        try:
            self._readable_only_by(name, None)
        except pymysql.err.MySQLError as exc:
            log.warning("cannot revoke the grants on %s: %s", name, exc)

    def drop(self, name: str, request: int | None) -> None:
        self.tables.pop(name, None)
        if not self._existing(name, None):  # a table the user made stays (as it was at the drop)
            self._readable_only_by(name, None)
            with self.conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS {sink.quote_table(name)}")
        control.delete_view(self.conn, name)
        if request is not None:
            control.finish_request(self.conn, request)

    def commit_step(self, outputs: Mapping[str, pa.Table], position: BinlogPosition, stats: StepStats) -> float:
        writes = [(self.tables[name], delta) for name, delta in outputs.items() if name in self.tables]
        ran = {name: (v.received, v.duration_ms, v.executor) for name, v in stats.views.items()}
        return sink.commit_step(self.conn, writes, self.source, position.to_text(), changes=stats.changes,
                                lag_ms=stats.lag_ms, ran=ran)[1]

    def record_position(self, position: BinlogPosition) -> None:
        control.record_position(self.conn, self.source, position.to_text())


def _shadow_of(name: str, shape: Any) -> tuple[sink.ResultTable, str]:
    """A table to fill aside for result table ``name`` (``_fv_new_<tag>`` beside it), and the name the old
    table takes while ``_rename_in`` swaps them."""
    database, _ = split_table_name(name)
    tag = hashlib.blake2b(name.encode(), digest_size=6).hexdigest()
    return (sink.ResultTable(f"{spell(database)}._fv_new_{tag}", shape),
            f"{quote(database)}.{quote('_fv_old_' + tag)}")


def _fill_aside(conn: Any, shadow: sink.ResultTable, rows: pa.Table) -> None:
    """``shadow`` made anew (its DDL commits on its own) and filled with ``rows`` in one transaction; on a
    failure it is dropped."""
    with conn.cursor() as cur:
        for statement in shadow.drop_sql() + shadow.create_sql():
            cur.execute(statement)  # commits implicitly
    conn.begin()
    try:
        shadow.apply(conn, rows)
        conn.commit()
    except BaseException:
        faults.rollback_quietly(conn)
        _drop_quietly(conn, shadow)
        raise


def _rename_in(conn: Any, table: sink.ResultTable, shadow: sink.ResultTable, old: str, exists: bool = True) -> None:
    """``shadow`` replaces ``table`` by one atomic RENAME TABLE (readers see one or the other); the old one goes
    (``exists`` False: there is none, ``shadow`` takes its name)."""
    with conn.cursor() as cur:
        if not exists:
            cur.execute(f"RENAME TABLE {shadow.table} TO {table.table}")
            return
        cur.execute(f"DROP TABLE IF EXISTS {old}")
        cur.execute(f"RENAME TABLE {table.table} TO {old}, {shadow.table} TO {table.table}")
        cur.execute(f"DROP TABLE {old}")


def _commit(conn: Any, request: int | None) -> None:
    """Commit the open transaction, with ``request`` marked done in it (if any)."""
    if request is not None:
        control.finish_request(conn, request)  # commits the whole transaction
    else:
        conn.commit()
