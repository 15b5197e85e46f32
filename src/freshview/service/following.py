"""Following base tables: loading them from a snapshot, which changes of the stream they take, DDL on them.

The decisions, pure; ``ViewCatalog`` (``service.catalog``) acts on them.

A table is followed from a snapshot at position Y (``Source.snapshot``): its
rows are loaded from the snapshot (``ViewCatalog.follow``), and the changes of
transactions at or before Y, which the snapshot already holds, are ignored
in the stream (``relevant``).

DDL on a followed table (``ddl_effect``, pure) never leaves a view ``active``
and wrong: the views reading the table either stay right or fail, with the
change named.  Only what the engine keeps of the table matters (the key and
the columns its views read: ``kept_columns``):

* added columns, and columns the engine does not keep dropped, retyped or
  renamed, change nothing (no snapshot, the views keep running);
* the table renamed (``ALTER TABLE ... RENAME TO``, ``RENAME TABLE``, ``SET
  SCHEMA``), or columns it keeps renamed (``Rename``): the views keep running
  with no snapshot, as PostgreSQL's own views do: the engine keeps the names
  it followed the table by, the connector hands the table's changes under
  them (``base.Renamed``), and the views' stored SQL is rewritten to the new
  names (``sql.rename``), which the service compiles when it next must;
* a column the views read dropped or retyped, the table dropped, or no longer
  followable (its replica identity gone) fails them, naming the change and
  the way out (``Fail``: ``CALL freshview.alter_view(view, ...)`` with a query
  for the new definition, which keeps the view's result table where it can);
* a change the engine's copy cannot absorb but no view reads (a kept, unread
  column dropped or retyped, the key, the replica identity or the partitions
  changed, the table re-created) makes the table followed anew from a new
  snapshot, its views recomputed (``Refollow``).

Signs of DDL come from the stream (``Transaction.definitions`` and ``ddl``)
and from a periodic look at the catalog (``ViewCatalog.check_catalog``), so an
idle table's rename is seen too; either way the catalog's present
description (``Source.recheck``) is what is judged, against the table as
last seen (its name, its columns in order, its identity).  A transaction
carrying DDL of a followed table is a step of its own (``alters``), so no
step mixes rows from before and after a rename.
"""

from __future__ import annotations

import re
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


def alters(txn: Transaction, follow_from: Mapping[str, Any]) -> bool:
    """Whether the stream says ``txn`` holds DDL of a followed table (its step is its own)."""
    return any(t in follow_from for t in txn.ddl)


def differs(columns: Mapping[str, SqlType | None], schema: TableSchema) -> bool:
    """Whether a definition the stream carried is not the followed one (added columns aside)."""
    return any(columns.get(c.name, False) != c.type for c in schema.columns)


@dataclass(frozen=True)
class Fail:
    """The views reading the table fail with ``error``: those reading ``columns`` (the engine's names) alone
    when given, every view reading the table else (it is gone, or can no longer be followed).  The views
    that read none of them go on: the table is then followed anew for them (``rename`` applied first)."""

    error: str
    columns: frozenset[str] = frozenset()
    rename: "Rename | None" = None


@dataclass(frozen=True)
class Rename:
    """The table, or columns the engine keeps of it, were renamed: its views keep running (no snapshot).
    The engine keeps the names it followed the table by; the connector hands the table's changes under them
    (``base.Renamed``: ``name`` and ``mapping``), and the views' SQL is rewritten to the new names
    (``sql.rename``: ``before`` as ``name``, the columns ``columns``)."""

    before: str  # the table's name before this change
    name: str  # its name now
    columns: Mapping[str, str]  # columns renamed by this change: name before -> name now
    mapping: Mapping[str, str]  # every renamed column the engine keeps: the engine's name -> the name now
    what: str  # the change, as the log says it


@dataclass(frozen=True)
class Refollow:
    """The table is followed anew from a new snapshot and its views recomputed: they stay right
    (``rename``: after their SQL is rewritten to the new names)."""

    reason: str
    rename: Rename | None = None


VIEW = "<view>"  # in a ``Fail``'s error: the failed view's name (``ViewCatalog.fail_views`` puts it there)


def ddl_effect(table: str, schema: TableSchema, read: Collection[str], now: Recheck,
               identity: Iterable[tuple[str, str]] = (), statement: str | None = None,
               table_columns: Sequence[str] | None = None, name: str | None = None,
               mapping: Mapping[str, str] | None = None, places: Sequence[int] | None = None
               ) -> Fail | Rename | Refollow | None:
    """What DDL on followed ``table`` (the engine's name for it; followed as ``schema`` with ``identity``, its
    views reading the columns ``read``; ``now`` as the catalog describes it, ``statement`` the DDL if the
    stream carried it) does to its views; None: nothing (no change, added columns, columns the engine does
    not keep).  ``name``, ``table_columns``: the table's name and all its columns, in order, as last seen
    (None: ``table``, ``schema``'s); ``mapping``: the engine's column -> its name as last seen, for the
    columns renamed so far (``Rename.mapping``).

    A rename is told from the catalog: the table is found by its OID (PostgreSQL) or by the name the
    stream's statement gave it (MySQL); a column by its place (the same number of columns, a new name of
    the same type where an old one was).  A column dropped and another of its type added in one step at its
    place cannot be told from a rename: such a change reads as one."""
    by = f" (by `{_short(statement)}`)" if statement else ""
    before = name or table
    mapping = dict(mapping or {})

    def fail(what: str, columns: Collection[str] = (), rename: Rename | None = None) -> Fail:
        return Fail(f"freshview: {what}{by}; the view cannot follow this change: give it a query for the new "
                    f"definition with CALL freshview.alter_view('{VIEW}', ...) (its result table is kept where the "
                    "columns allow)", frozenset(columns), rename)

    if now.name is None:
        return fail(f"{before} no longer exists (dropped, or renamed and the new name not known)")
    if now.refusal:
        refusal = now.refusal.removeprefix("freshview: ")
        return Fail(f"freshview: {now.name} can no longer be followed{by}: {refusal}")
    last = list(table_columns) if table_columns else [mapping.get(c, c) for c in schema.names]
    types = {mapping.get(c.name, c.name): c.type for c in schema.columns}
    if places and now.places and len(places) == len(last):
        at = dict(zip(now.places, now.columns))
        columns = {old: at[p] for old, p in zip(last, places) if p in at and at[p] != old}
    else:
        columns = _renamed_columns(last, now.columns, types)
    mapping = {c: columns.get(mapping.get(c, c), mapping.get(c, c)) for c in schema.names}
    mapping = {c: n for c, n in mapping.items() if c != n}
    unread: list[str] = []
    failing: dict[str, str] = {}  # column the views read -> what happened to it
    for col in schema.columns:
        current = mapping.get(col.name, col.name)
        if current not in now.columns:
            what = (f"column {current} of {now.name} was dropped (ALTER TABLE ... DROP COLUMN, or renamed with "
                    "other changes at once)")
        elif now.columns[current] is None:
            what = (f"column {current} of {now.name} now has a type freshview does not maintain (ALTER TABLE ... "
                    "ALTER COLUMN ... TYPE)")
        elif now.columns[current] != col.type:
            what = (f"column {current} of {now.name} changed type from {col.type} to {now.columns[current]} "
                    "(ALTER TABLE ... ALTER COLUMN ... TYPE)")
        else:
            continue
        if col.name in read:
            failing[col.name] = what
        else:
            unread.append(f"{what}, which no view reads")
    was, current_identity = _renamed_identity(dict(identity), columns), dict(now.identity)
    if was and current_identity:
        explained = REBUILT_BY_ALTER if statement is not None and _ALTERS.match(statement) else set()
        unread += [f"its {what} changed" for what, value in was.items()
                   if current_identity.get(what) != value and what not in explained]
    if statement is not None and _recreates(statement, (before, now.name)):
        unread.append(f"{now.name} was dropped and created again")
    kept = {c: n for c, n in columns.items() if c in types}  # (a column the engine does not keep: nothing)
    rename = None
    if now.name != before or kept:
        changes = ([f"{before} was renamed to {now.name}"] if now.name != before else []) + \
            [f"column {c} of {now.name} was renamed to {n}" for c, n in kept.items()]
        rename = Rename(before, now.name, kept, mapping, "; ".join(changes) + by)
    if failing:
        return fail("; ".join(failing.values()), failing, rename)
    if unread:
        return Refollow("; ".join(unread) + by, rename)
    return rename


# Identity items every ALTER TABLE changes (MySQL rebuilds the table, its creation time is new): a statement
# that alters or renames the table explains them (the same table); the table re-created does not.
REBUILT_BY_ALTER = {"creation time"}
_ALTERS = re.compile(r"\s*(?:/\*.*?\*/\s*)*(ALTER|RENAME)\b", re.I | re.S)
_RECREATES = re.compile(r"\s*(?:/\*.*?\*/\s*)*(DROP|CREATE)\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+"
                        r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?", re.I | re.S)
_NAME = re.compile(r"\s*((?:`(?:[^`]|``)*`|\"(?:[^\"]|\"\")*\"|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)*`|\"(?:[^\"]|\"\")*\"|[\w$]+))?)"
                   r"\s*(,)?")


_PART = re.compile(r"`(?:[^`]|``)*`|\"(?:[^\"]|\"\")*\"|[\w$]+")


def _recreates(statement: str, tables: Iterable[str | None]) -> bool:
    """Whether ``statement`` drops or creates one of ``tables`` (qualified names): the table(s) the statement
    is about, not any name in it (the stream reports a statement for every followed name it mentions, a column
    named like a table too: ``CREATE TABLE t (orders int)`` does not re-create ``orders``)."""
    head = _RECREATES.match(statement)
    if head is None:
        return False
    targets, at = [], head.end()
    while (m := _NAME.match(statement, at)) is not None:
        parts = [p[1:-1].replace(p[0] * 2, p[0]).lower() if p[0] in '`"' else p.lower()
                 for p in _PART.findall(m.group(1))]
        targets.append(parts)
        at = m.end()
        if m.group(2) is None:  # (DROP TABLE a, b: a list)
            break
    wanted = [t.lower().split(".") for t in tables if t]
    return any(target == table[-len(target):] for target in targets for table in wanted)


def _renamed_columns(last: Sequence[str], now: Mapping[str, SqlType | None],
                     types: Mapping[str, SqlType]) -> dict[str, str]:
    """Columns renamed from ``last`` (the table's columns as last seen) to ``now``: at the same place, among
    as many columns, a name that is new where one that is gone was, of the same type (``types``: of the
    columns the engine keeps, by their names as last seen)."""
    current = list(now)
    if len(current) != len(last):
        return {}
    return {old: new for old, new in zip(last, current)
            if old != new and old not in now and new not in last and types.get(old, now[new]) == now[new]}


def _renamed_identity(identity: dict[str, str], columns: Mapping[str, str]) -> dict[str, str]:
    """The identity as last seen, its key's columns under their new names."""
    if columns and "primary key" in identity:
        key = [columns.get(c, c) for c in identity["primary key"].split(", ")]
        identity = {**identity, "primary key": ", ".join(key)}
    return identity


def missing_row(table: str, key: Mapping[str, Any]) -> str:
    """The error of a change to a row of ``table`` the engine does not hold (an UPDATE or DELETE whose old
    row the stream did not carry, for a row whose insert freshview never saw)."""
    text = ", ".join(f"{k}={v!r}" for k, v in key.items())
    return (f"{table}: no old row for key ({text}); set REPLICA IDENTITY FULL on {table} or make sure "
            "freshview saw the row's insert")


STATEMENT_PATIENCE_S = 30.0  # how long a failure the catalog shows waits for the stream's statement at most


def awaits_statement(effect: Fail | Rename | Refollow | None, statement: str | None, settles_at: Any,
                     position: Any, waited_s: float, patience_s: float = STATEMENT_PATIENCE_S) -> bool:
    """Whether a change the catalog shows (``effect``, found without the stream's ``statement``) waits: the
    stream carries DDL statements and has not yet passed ``settles_at`` (the server's position when the
    catalog was read; ``position`` is the engine's), so the statement is still to come: a failure is better
    named with it, and a rename must not apply to the rows the stream still holds from before it.  It waits
    ``patience_s`` at most (a stream that stopped moving)."""
    if effect is None or statement is not None or settles_at is None:
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
