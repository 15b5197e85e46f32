"""A new view reading columns a followed table's copy lacks: the table read again, wider, beside the loop.

The engine keeps of a followed table only the columns its views read (``following.kept_columns``), and a
table's copy is shared by its views.  A new view reading more needs a wider copy, and the views over the
narrower one hold state computed from it (their plans name its columns), so they are computed again over
the wider copy.  Done inside the loop (``ViewCatalog.widen``, ``_refollow``), that stopped every view for
the read and the recomputations; done here it runs beside the loop as the new view's population does:

- ``_widen_beside`` (when the view is planned): the tables that lack columns are followed anew by the
  population (``Plan.new``: a new snapshot, the columns every view of theirs reads), and the views reading
  them (``Widen.readers``, compiled again from their stored SQL with their requesters' rights) are computed
  in the population's scratch engine too (``Population``), over the tables they read (the others pinned);
- ``_join_widened`` (when it joins): those views' rows, as their result tables hold them, are kept; the
  views and the narrower copies leave the engine; the caller adopts the new view with the wider copies,
  and each recomputed view is adopted in turn and written into its own table by difference
  (``ResultSink.alter``), its table kept.

Not beside the loop (``None``: the old in-loop path): a view over those tables that reads another freshview
view or is read by one.  A view created over such a table meanwhile makes the join fail with a message
(create the view again); a recomputed view dropped meanwhile is left out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

import pyarrow as pa

from freshview.connectors.base import SourceTable
from freshview.errors import CatalogError
from freshview.flow import TwoPhaseFlow
from freshview.plan.rewrite.prune import columns_read

log = logging.getLogger("freshview.service")


@dataclass(frozen=True)
class Recomputed:
    """A view over a table read again, computed again beside the loop over the wider copy."""

    name: str  # schema-qualified
    view: str  # its engine name
    view_sql: str
    engine_sql: str


@dataclass(frozen=True)
class Widen:
    """What a population widens (``_widen_beside``)."""

    tables: frozenset[str]  # followed tables read again, wider
    readers: tuple[Recomputed, ...] = ()  # the views over them, in registration order
    described: Mapping[str, SourceTable] = field(default_factory=dict)  # every table those views read
    read: Mapping[str, frozenset[str]] = field(default_factory=dict)  # table -> the columns those views read


class Widening:
    """``ViewCatalog``'s part that widens followed tables (module docstring); the attributes are its own."""

    flow: TwoPhaseFlow
    connector: Any
    names: Any
    follow_from: dict[str, Any]

    def _lacking(self, read: Mapping[str, Collection[str]]) -> dict[str, set[str]]:
        """Of followed tables a new view reads (``read``: table -> columns), the columns the engine's copy lacks."""
        missing = {}
        for table, columns in read.items():
            if table in self.follow_from:
                kept = set(self.flow.source_schema(self.names.engine(table)).names)
                if set(columns) - kept:
                    missing[table] = set(columns) - kept
        return missing

    def widen(self, read: Mapping[str, Collection[str]], position: Any) -> None:
        """In the loop: followed tables whose copies lack columns of ``read`` (table -> columns a new view reads)
        are followed anew from a new snapshot reading them too (``_refollow``: their views recomputed, from
        ``position``; their views' columns kept).  ``_widen_beside`` does it beside the loop."""
        for table, missing in self._lacking(read).items():
            self._refollow(table, f"a new view reads its columns {', '.join(sorted(missing))}, which were not read",
                           position, level=logging.INFO, extra=missing)

    def _widen_beside(self, lacking: Collection[str], position: Any, altered: str | None = None) -> Widen | None:
        """How the followed tables ``lacking`` columns are read again beside the loop, with the views over them
        computed again there (compiled now: a refusal raises; ``altered``: a view being altered, which its new
        definition replaces, not computed again); None when it is done in the loop instead."""
        flow = self.flow
        skip = self.names.engine(altered) if altered is not None else None
        doomed = self._with_readers(r for t in lacking for r in flow.readers(self.names.engine(t)) if r != skip)
        views = [v for v in flow.views if v in doomed]  # (registration order)
        if any(set(columns_read(flow.view_plan(v))) & set(flow.views) for v in views):
            return None  # a view of a view: its readers would follow
        definitions = {name: sql for name, sql, _ in self.connector.control.views()}
        owners = self.connector.control.owners()
        readers, described, read = [], {}, {}
        for view in views:
            name = self.names.qualified(view)
            if name not in definitions:
                return None
            plan, engine_sql, probe = self._compile(name, definitions[name], owners.get(name), None, True, position)
            readers.append(Recomputed(name, view, definitions[name], engine_sql))
            described.update(probe.tables)
            for source, columns in columns_read(plan).items():
                table = self.names.qualified(source)
                read[table] = read.get(table, frozenset()) | frozenset(columns)
        return Widen(frozenset(lacking), tuple(readers), described, read)

    def _join_widened(self, widen: Widen, position: Any) -> dict[str, pa.Table | None]:
        """Before a widening population joins at ``position``: the rows of the views it recomputed as their
        result tables hold them (None: not known, the results are not at ``position``), then those views
        and the narrower copies leave the engine (module docstring)."""
        flow = self.flow
        recomputed = {r.view for r in widen.readers if r.view in flow.views}
        for table in widen.tables:  # (an altered view left the engine already)
            created = set(flow.readers(self.names.engine(table))) - recomputed
            if created:
                raise CatalogError(f"freshview: views {', '.join(sorted(self.names.qualified(v) for v in created))} "
                                   f"were created over {table} while it was read again for this view; create this "
                                   f"view again")
        at = self.connector.results.stored_position() == position
        previous = {r.name: flow.snapshot(r.view, weighted=True) if at else None
                    for r in widen.readers if r.view in recomputed}
        for reader in reversed(widen.readers):
            if reader.view in recomputed:
                flow.drop_view(reader.view)
        for table in widen.tables:
            flow.drop_source(self.names.engine(table))
            self.follow_from.pop(table, None)
        return previous

    def _adopt_widened(self, widen: Widen, scratch: TwoPhaseFlow, previous: Mapping[str, pa.Table | None],
                       position: Any) -> None:
        """After the new view joined with the wider copies: each view recomputed beside it is adopted and
        written into its own result table, by difference where its rows were known (its table kept)."""
        owners = self.connector.control.owners()
        for reader in widen.readers:
            if reader.name not in previous:
                continue  # (dropped meanwhile)
            self.flow.adopt_view(scratch, reader.view, [])
            rows = self.flow.snapshot(reader.view, weighted=True)
            self.connector.results.alter(self.result_spec(reader.name), reader.view_sql, rows, position,
                                         reader=owners.get(reader.name), request=None, altered=False,
                                         previous=previous[reader.name])
            log.info("view %s: computed again over the wider copy beside the stream (%d rows)", reader.name,
                     rows.num_rows)

    def _follow_as_before(self, before: Mapping[str, Any], widen: Widen | None, left: bool) -> None:
        """A join failed: the followed tables as before it, less the tables read again whose narrower copies
        left the engine (``left``: ``_join_widened`` ran); their views are computed again (``_recompute_widened``)."""
        widened = widen.tables if widen is not None and left else frozenset()
        self.follow_from = {t: p for t, p in before.items() if t not in widened}
        self._save_follow_from()

    def _recompute_widened(self, widen: Widen, previous: Mapping[str, Any], position: Any) -> None:
        """A widening join failed after the views over its tables left the engine: they are computed again in
        the loop (the tables followed anew, their result tables kept), as before; one that cannot be fails."""
        for reader in widen.readers:
            if reader.view in self.flow.views:
                self.flow.drop_view(reader.view)
        self.drop_unused_sources()
        for reader in widen.readers:
            if reader.name not in previous:
                continue
            try:
                self.create(reader.name, reader.view_sql, position, replace=True,
                            keep_table=self.connector.results.knows(reader.name))
            except self.errors as exc:
                self.fail_views([reader.name], f"freshview: {exc}")
