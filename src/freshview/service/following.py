"""Following base tables: loading them from a snapshot, which changes of the stream they take, DDL on them.

A table is followed from a snapshot at position Y (``Source.snapshot``): its
rows are loaded from the snapshot (``follow``), and the changes of
transactions at or before Y, which the snapshot already holds, are ignored
in the stream (``relevant``).

DDL on a followed table (``ddl_effect``, pure) never leaves a view ``active``
and wrong: the views reading the table either stay right or fail, with the
change named.  Only what the views read matters (``plan.rewrite.prune.columns_read``): a column
they read dropped, renamed or changing type, the table renamed or dropped, or
no longer followable (its replica identity gone) fails them (``Fail``); a
change the engine's copy of the table cannot absorb but no view reads (an
unread column dropped or retyped, the key, the replica identity or the
partitions changed, the table re-created) makes the table followed anew from
a new snapshot, its views recomputed (``Refollow``); added columns change
nothing.  Signs of DDL come from the stream (``Transaction.definitions`` and
``ddl``) and from a periodic look at the catalog (``check_catalog``), so an
idle table's rename is seen too; either way the catalog's present
description (``Source.recheck``) is what is judged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Collection, Iterable, Mapping, Sequence

from freshview.connectors.base import ChangeError, Recheck, SourceTable, Transaction, after
from freshview.errors import FreshviewError
from freshview.plan.rewrite.prune import columns_read
from freshview.schema import SqlType, TableSchema
from freshview.service import requests

if TYPE_CHECKING:
    from freshview.service.core import Core

log = logging.getLogger("freshview.service")

REFOLLOW_ATTEMPTS = 3  # a view's re-creation when its table is followed anew (the table may change meanwhile)
IDENTITY_KEY = "follow_identity"  # engine meta: followed table -> its ``SourceTable.identity`` when followed
# engine meta: followed table -> all its column names when followed (the engine keeps only those read)
COLUMNS_KEY = "follow_columns"


def relevant(txn: Transaction, follow_from: Mapping[str, Any]) -> Transaction:
    """The transaction's changes to followed tables not already in their snapshots."""
    return txn.restricted({t for t in (*txn.rows, *txn.truncated)
                           if t in follow_from and after(txn.position, follow_from[t])})


def truncates(txn: Transaction, follow_from: Mapping[str, Any]) -> bool:
    return any(t in follow_from for t in txn.truncated)


def differs(columns: Mapping[str, SqlType | None], schema: TableSchema) -> bool:
    """Whether a definition the stream carried is not the followed one (added columns aside)."""
    return any(columns.get(c.name, False) != c.type for c in schema.columns)


@dataclass(frozen=True)
class Fail:
    """The views reading the table fail with ``error``."""

    error: str


@dataclass(frozen=True)
class Refollow:
    """The table is followed anew from a new snapshot and its views recomputed: they stay right."""

    reason: str


def ddl_effect(table: str, schema: TableSchema, read: Collection[str], now: Recheck,
               identity: Iterable[tuple[str, str]] = (), statement: str | None = None,
               table_columns: Sequence[str] | None = None) -> Fail | Refollow | None:
    """What DDL on followed ``table`` (followed as ``schema`` with ``identity``, its views reading the columns
    ``read``; ``now`` as the catalog describes it, ``statement`` the DDL if the stream carried it) does to its
    views; None: nothing (no change, added columns).  ``table_columns``: all the table's columns when it was
    followed, in order (``schema`` may hold only those read); None: ``schema``'s."""
    by = f" (by `{_short(statement)}`)" if statement else ""

    def fail(what: str) -> Fail:
        return Fail(f"freshview: {what}{by}; freshview does not follow this change yet: drop and re-create the "
                    "view to follow the new definition")

    if now.name is None:
        return fail(f"{table} no longer exists (dropped, or renamed)")
    if now.name != table:
        return fail(f"{table} was renamed to {now.name} (ALTER TABLE ... RENAME TO / SET SCHEMA)")
    if now.refusal:
        refusal = now.refusal.removeprefix("freshview: ")
        return Fail(f"freshview: {table} can no longer be followed{by}: {refusal}")
    unread: list[str] = []
    followed = list(table_columns) if table_columns else schema.names
    new_names = [n for n in now.columns if n not in followed]
    for col in schema.columns:
        if col.name not in now.columns:
            current, i = list(now.columns), followed.index(col.name) if col.name in followed else -1
            renamed = (current[i] if i >= 0 and len(current) == len(followed) and current[i] in new_names
                       and now.columns[current[i]] == col.type else None)
            what = (f"column {col.name} of {table} was renamed to {renamed} (ALTER TABLE ... RENAME COLUMN)"
                    if renamed else f"column {col.name} of {table} was dropped or renamed (ALTER TABLE ... DROP "
                    "COLUMN / RENAME COLUMN)")
        elif now.columns[col.name] is None:
            what = (f"column {col.name} of {table} now has a type freshview does not maintain (ALTER TABLE ... "
                    "ALTER COLUMN ... TYPE)")
        elif now.columns[col.name] != col.type:
            what = (f"column {col.name} of {table} changed type from {col.type} to {now.columns[col.name]} "
                    "(ALTER TABLE ... ALTER COLUMN ... TYPE)")
        else:
            continue
        if col.name in read:
            return fail(what)
        unread.append(f"{what}, which no view reads")
    before, current_identity = dict(identity), dict(now.identity)
    if before and current_identity:
        unread += [f"its {what} changed" for what, value in before.items() if current_identity.get(what) != value]
    return Refollow("; ".join(unread) + by) if unread else None


def _short(statement: str, limit: int = 200) -> str:
    text = " ".join(statement.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def columns_read_of(core: "Core", table: str) -> set[str]:
    """The columns of followed ``table`` its views read."""
    source = core.names.engine(table)
    read: set[str] = set()
    for view in core.flow.readers(source):
        read |= columns_read(core.flow.view_plan(view)).get(source, set())
    return read


def check_ddl(core: "Core", group: Iterable[Transaction]) -> None:
    """Signs of DDL on followed tables in the stream: those tables are judged now (``judge``)."""
    suspects: dict[str, str | None] = {}
    for txn in group:
        for table, columns in txn.definitions.items():
            if table in core.follow_from and after(txn.position, core.follow_from[table]) and \
                    differs(columns, core.flow.source_schema(core.names.engine(table))):
                suspects.setdefault(table, None)
        for table, statement in txn.ddl.items():
            if table in core.follow_from and after(txn.position, core.follow_from[table]):
                suspects[table] = statement or suspects.get(table)
    if suspects:
        judge(core, suspects)


def check_catalog(core: "Core") -> None:
    """Every followed table as the catalog describes it now (an idle table's rename or DDL too)."""
    if core.follow_from:
        judge(core, dict.fromkeys(core.follow_from))


def judge(core: "Core", tables: Mapping[str, str | None]) -> None:
    """Look the tables up in the catalog and apply what their DDL does to their views (``ddl_effect``)."""
    identities = core.flow.get_meta(IDENTITY_KEY, {}) or {}
    tables = {t: s for t, s in tables.items() if t in core.follow_from}
    found = core.connector.source.recheck({t: _pairs(identities.get(t)) for t in tables})
    unknown = {}
    for table, statement in tables.items():
        now = found.get(table)
        if now is None or table not in core.follow_from:
            continue
        schema = core.flow.source_schema(core.names.engine(table))
        log.debug("DDL check of %s: %s (followed with %s)", table, now, identities.get(table))
        effect = ddl_effect(table, schema, columns_read_of(core, table), now, _pairs(identities.get(table)),
                            statement, (core.flow.get_meta(COLUMNS_KEY, {}) or {}).get(table))
        if isinstance(effect, Fail):
            core._fail_table(table, effect.error)
        elif isinstance(effect, Refollow):
            refollow(core, table, effect.reason)
        elif table not in identities and now.identity:
            unknown[table] = [list(p) for p in now.identity]  # followed before identities were kept
    if unknown:
        core.flow.set_meta(IDENTITY_KEY, {**identities, **unknown})


def _pairs(stored: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), str(v)) for k, v in stored or ())


def lacking(core: "Core", read: Mapping[str, Collection[str]]) -> dict[str, set[str]]:
    """Of followed tables a new view reads (``read``: table -> columns), the columns the engine's copy lacks."""
    missing = {}
    for table, columns in read.items():
        if table in core.follow_from:
            kept = set(core.flow.source_schema(core.names.engine(table)).names)
            if set(columns) - kept:
                missing[table] = set(columns) - kept
    return missing


def widen(core: "Core", table: str, columns: Collection[str]) -> None:
    """The engine's copy of followed ``table`` lacks ``columns`` a new view reads: the table is followed
    anew from a new snapshot reading them too (``refollow``: its views recomputed); its views' columns are
    kept (``refollow`` adds them)."""
    refollow(core, table, f"a new view reads its columns {', '.join(sorted(columns))}, which were not read",
             level=logging.INFO, extra=columns)


def refollow(core: "Core", table: str, reason: str, level: int = logging.WARNING,
             extra: Collection[str] = ()) -> None:
    """Follow ``table`` anew from a new snapshot: its views (and the views reading them) are dropped from the
    engine and created again from their SQL, their result tables replaced; one that cannot be fails.  The
    new snapshot reads every column the views read and ``extra`` (``core.wanted_columns``), whichever view
    is created first."""
    core.wanted_columns[table] = columns_read_of(core, table) | set(extra)
    try:
        _refollow(core, table, reason, level)
    finally:
        core.wanted_columns.pop(table, None)


def _refollow(core: "Core", table: str, reason: str, level: int) -> None:
    engine_views = list(core.flow.views)
    doomed: set[str] = set()
    todo = list(core.flow.readers(core.names.engine(table)))
    while todo:
        view = todo.pop()
        if view not in doomed:
            doomed.add(view)
            todo.extend(core.flow.readers(view))
    ordered = [v for v in engine_views if v in doomed]  # registration order: a view before its readers
    definitions = {name: sql for name, sql, _ in core.connector.control.views()}
    log.log(level, "%s changed: %s; following it anew from a new snapshot and recomputing %s", table, reason,
            ", ".join(core.names.qualified(v) for v in ordered))
    for view in reversed(ordered):
        core.flow.drop_view(view)
    core.drop_unused_sources()
    for view in ordered:
        name = core.names.qualified(view)
        if name not in definitions:
            continue
        for attempt in range(REFOLLOW_ATTEMPTS):  # more DDL may land between reading the definition and the snapshot
            try:
                requests.create(core, name, definitions[name], replace=True)  # with its requester's rights (access)
                break
            except (FreshviewError, ChangeError, *core.connector.errors) as exc:
                if attempt + 1 == REFOLLOW_ATTEMPTS:
                    core._mark_failed([name], f"freshview: {table} changed ({reason}) and following it anew "
                                              f"failed: {exc}")
                else:
                    log.warning("following %s anew for %s failed (%s); trying again", table, name, exc)


def kept_columns(schema: TableSchema, read: Collection[str] | None) -> TableSchema:
    """What the engine keeps of a table its views read ``read`` of (None: every column): those columns and
    the key's (old rows are found by key); a table without a key of which nothing is read keeps its first
    column (its rows still count)."""
    if read is None:
        return schema
    names = (set(read) & set(schema.names)) | set(schema.primary_key)  # (a column gone: its view fails itself)
    if not names and schema.columns:
        names = {schema.columns[0].name}
    return schema.projected(names)


def follow(core: "Core", tables: Mapping[str, SourceTable],
           columns: Mapping[str, Collection[str]] | None = None) -> None:
    """Start following base tables: make their changes streamed, then load them from one new snapshot
    and remember its position for each (saved with the engine's state).  ``columns``: what the views read
    of each (``plan.rewrite.prune.columns_read``; missing: every column); the engine keeps only those
    (``kept_columns``, with the columns ``widen`` asked for) and the snapshot reads only those."""
    if not tables:
        return
    source, flow = core.connector.source, core.flow
    source.prepare(list(tables))
    with source.snapshot() as snap:
        for table, described in tables.items():
            name = core.names.engine(table)
            read = None if columns is None or table not in columns else \
                set(columns[table]) | core.wanted_columns.get(table, set())
            kept = kept_columns(described.schema, read)
            flow.register_source(name, kept)
            estimate = snap.estimate(table)

            def progress(done: int, table: str = table, finished: bool = False) -> None:
                if core.stream is not None:
                    core.stream.keepalive()  # keep the main stream alive through long snapshots
                if core.snapshot_progress is not None:
                    core.snapshot_progress(table, done, estimate, finished)

            progress(0)
            loaded = 0
            for chunk in snap.read(described, core.options.snapshot_chunk_rows, progress, kept.names):
                flow.tick(name, chunk)
                loaded += chunk.num_rows
            progress(loaded, finished=True)
            core.follow_from[table] = snap.position
            identities = dict(core.flow.get_meta(IDENTITY_KEY, {}) or {})
            identities[table] = [list(p) for p in described.identity]
            core.flow.set_meta(IDENTITY_KEY, identities)
            core.flow.set_meta(COLUMNS_KEY, {**(core.flow.get_meta(COLUMNS_KEY, {}) or {}),
                                             table: described.schema.names})
            core.save_follow_from()
            log.info("following %s from %s", table, snap.position)
