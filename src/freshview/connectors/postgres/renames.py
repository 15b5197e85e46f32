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
    return dataclasses.replace(txn, changes={names.get(n, n): c for n, c in txn.changes.items()},
                               truncated=[names.get(n, n) for n in txn.truncated],
                               relations={names.get(n, n): r for n, r in txn.relations.items()})


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
