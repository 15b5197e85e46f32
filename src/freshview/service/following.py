"""Following base tables: loading them from a snapshot, which changes of the stream they take, DDL on them.

The decisions, pure; ``ViewCatalog`` (``service.catalog``) acts on them.

A table is followed from a snapshot at position Y (``Source.snapshot``): its
rows are loaded from the snapshot (``ViewCatalog.follow``), and the changes of
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
``ddl``) and from a periodic look at the catalog (``ViewCatalog.check_catalog``), so an
idle table's rename is seen too; either way the catalog's present
description (``Source.recheck``) is what is judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping, Sequence

from freshview.connectors.base import Recheck, Transaction, after
from freshview.schema import SqlType, TableSchema


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


def missing_row(table: str, key: Mapping[str, Any]) -> str:
    """The error of a change to a row of ``table`` the engine does not hold (an UPDATE or DELETE whose old
    row the stream did not carry, for a row whose insert freshview never saw)."""
    text = ", ".join(f"{k}={v!r}" for k, v in key.items())
    return (f"{table}: no old row for key ({text}); set REPLICA IDENTITY FULL on {table} or make sure "
            "freshview saw the row's insert")


STATEMENT_PATIENCE_S = 30.0  # how long a failure the catalog shows waits for the stream's statement at most


def awaits_statement(effect: Fail | Refollow | None, statement: str | None, settles_at: Any, position: Any,
                     waited_s: float, patience_s: float = STATEMENT_PATIENCE_S) -> bool:
    """Whether a failure the catalog shows (``effect``, found without the stream's ``statement``) waits: the
    stream carries DDL statements and has not yet passed ``settles_at`` (the server's position when the
    catalog was read; ``position`` is the engine's), so the statement is still to come and the failure is
    better named with it.  It waits ``patience_s`` at most (a stream that stopped moving)."""
    if not isinstance(effect, Fail) or statement is not None or settles_at is None:
        return False
    return waited_s < patience_s and (position is None or position < settles_at)


def _short(statement: str, limit: int = 200) -> str:
    text = " ".join(statement.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


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
