"""Renamed tables and columns, followed by OID: their changes handed under the names they were followed by. No I/O.

A followed table keeps its OID through ``ALTER TABLE ... RENAME TO`` / ``SET
SCHEMA``, and each column its place through ``RENAME COLUMN``; pgoutput
describes the relation with its names at the time of each change.  The
engine knows the table by the names it followed it by (``base.Renamed``), so:

* ``as_followed``: a transaction's tables are keyed by the name their OID
  was followed by (at once: the OID says it, whatever the service has judged);
* ``followed_columns``: a relation's columns under the names the engine
  keeps, once the service has judged the rename (``Source.rename``; a
  relation sent before the rename still has the old names, and keeps them).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from freshview.connectors.base import Renamed
from freshview.connectors.postgres import protocol as p
from freshview.connectors.postgres.changes import RawChanges, SourceTransaction


def as_followed(txn: SourceTransaction, followed: Mapping[int, str]) -> SourceTransaction:
    """``txn`` with each followed relation keyed by its followed name (``followed``: OID -> that name)."""
    names = {name: followed[rel.oid] for name, rel in txn.relations.items()
             if rel.oid in followed and followed[rel.oid] != name}
    if not names:
        return txn
    changes: dict = {}
    for name, found in txn.changes.items():  # (renamed inside the transaction: its changes under both names)
        key = names.get(name, name)
        changes[key] = found if key not in changes else _joined(changes[key], found)
    relations = {}
    for name, rel in txn.relations.items():  # the last relation of the table: as ``_assemble`` keeps it
        relations[names.get(name, name)] = rel
    return dataclasses.replace(txn, changes=changes, truncated=list(dict.fromkeys(names.get(n, n) for n in txn.truncated)),
                               relations=relations)


def _joined(first, then):
    """One table's changes sent under two names in one transaction, in order.  Raw changes keep each run's
    relation; decoded ones (``TransactionAssembler.feed``, not the stream's path) are read with the last
    relation, which a rename alone leaves in place."""
    if isinstance(first, RawChanges) and isinstance(then, RawChanges):
        out = RawChanges()
        out.extend(first)
        out.extend(then)
        return out
    return [*first, *then]


def followed_columns(txn: SourceTransaction, renamed: Mapping[str, Renamed]) -> SourceTransaction:
    """``txn`` (keyed by followed names) with the relations of tables whose columns were renamed describing
    them under the engine's column names."""
    tables = [t for t in txn.relations if t in renamed and renamed[t].columns]
    if not tables:
        return txn
    changes, relations = dict(txn.changes), dict(txn.relations)
    for table in tables:
        inverse = {now: was for was, now in renamed[table].columns.items()}
        cache: dict[int, p.Relation] = {}

        def translate(rel: p.Relation) -> p.Relation:
            if id(rel) not in cache:
                cache[id(rel)] = dataclasses.replace(rel, columns=tuple(
                    dataclasses.replace(c, name=inverse.get(c.name, c.name)) for c in rel.columns))
            return cache[id(rel)]

        relations[table] = translate(relations[table])
        found = changes.get(table)
        if isinstance(found, RawChanges):
            copy = RawChanges()
            copy.payloads, copy.starts = found.payloads, found.starts
            copy.runs = [(i, translate(r)) for i, r in found.runs]
            changes[table] = copy
    return dataclasses.replace(txn, changes=changes, relations=relations)


def followed_definition(columns: Mapping[str, object], renamed: Renamed | None) -> Mapping[str, object]:
    """A relation's column types (``Transaction.definitions``) under the engine's column names."""
    if renamed is None or not renamed.columns:
        return columns
    inverse = {now: was for was, now in renamed.columns.items()}
    return {inverse.get(n, n): t for n, t in columns.items()}
