"""``TableProbe``: what a view's first compile sees of the catalog (``ViewCatalog``'s)."""

from __future__ import annotations

from typing import Callable, Collection

from freshview.connectors.base import Source, SourceTable
from freshview.errors import CatalogError
from freshview.flow import TwoPhaseFlow
from freshview.service import populating
from freshview.service.names import Names


class TableProbe:
    """Catalog for a first compile: engine relations, else the database's tables (recorded); the database's
    views and inheritance parents are read through their definitions (``Source.expansion``)."""

    def __init__(self, flow: TwoPhaseFlow, source: Source, names: Names,
                 settle: Callable[[str], None] | None = None, unfinished: Collection[str] = ()) -> None:
        self.flow = flow
        self.source = source
        self.names = names
        self.settle = settle  # called with each table named, before it is looked up (``ViewCatalog._settle_rename``)
        self.default_schema = names.default  # bare table names are this schema's (sql.build.Catalog)
        self.tables: dict[str, SourceTable] = {}
        self.expansions: dict[str, str | None] = {}
        self.unfinished = unfinished  # views being populated or rebuilt: naming one waits (``MustWait``)

    def _check_finished(self, name: str) -> None:
        qualified = self.names.qualified(name)
        if qualified in self.unfinished:
            raise populating.MustWait(f"it reads {qualified}, not created yet")

    def relation_expansion(self, name: str) -> str | None:
        if name in self.flow.views:  # a freshview view: its result table is a table
            return None
        self._check_finished(name)
        qualified = self.names.qualified(name)
        if qualified not in self.expansions:
            self.expansions[qualified] = self.source.expansion(qualified)
        return self.expansions[qualified]

    def relation_columns(self, name: str):
        if name not in self.flow.views:
            self._check_finished(name)
        if self.settle is not None and name not in self.flow.views:
            self.settle(self.names.qualified(name))
        # A followed table as the database has it: the engine keeps only the columns its views read.
        found = self.flow.relation_columns(name) if name not in self.flow.sources else None
        if found is not None:
            return found
        qualified = self.names.qualified(name)  # the front end names tables as the engine does
        if qualified not in self.tables:
            try:
                self.tables[qualified] = self.source.describe(qualified)
            except CatalogError as exc:
                if "does not exist" in str(exc):
                    return None
                raise
        schema = self.tables[qualified].schema
        return tuple((c.name, c.type) for c in schema.columns), False
