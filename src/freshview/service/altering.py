"""``alter_view`` in ``ViewCatalog`` (which this class is a part of): a view's new SQL, checked as a create's,
is populated beside the loop while the old view goes on (``ViewCatalog.populate(alter=True)``, a ``Plan`` with
``replaces``), then swapped in when it joins (``_join_alter``): the old view leaves the engine, the new one is
adopted under its name, and the result table gets its rows and the view's row its SQL in one database
transaction (``ResultSink.alter``: the table kept where the database can).  A new SQL that reads another
freshview view is done at once, in the loop (``_alter_now``), as such a create is; one reading columns the
engine does not keep has their tables read again beside the loop (``widening``: the other views over them
computed again too, moved to the wider copies at the join).  A failure after the old view left the engine computes it again (``_restore``).  A crash during
the swap (``freshview.views.phase`` ``swapping``) leaves the view to be rebuilt from its stored SQL at the
next start (``ControlSchema.start``, ``ViewCatalog.reconcile``); a crash before it leaves the old view as it
was, the request retried (``requests.recover``).

A view that stopped (status ``failed``, or ``sink error``: not in the engine any more, its result table left as it
was) is altered the same way (``Plan.stopped``): the new SQL checked as a create's, populated beside the loop, and
at the join adopted and swapped into the table the view had (kept, altered or replaced as for an active view; the
sink describes the table from the database's catalog: ``ResultSink.alter``), the view ``active`` again.  There is
no old view to put back: a refused or failed alter leaves it ``failed``, with the alter's error (``_alter_failed``).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

import pyarrow as pa

from freshview.errors import CatalogError, Fault
from freshview.flow import TwoPhaseFlow
from freshview.service import populating
from freshview.service.population import Plan
from freshview.service.sink_errors import SINK_ERROR, SinkErrors
from freshview.service.widening import Widen

log = logging.getLogger("freshview.service")

ALTERING = "altering"  # freshview.views.phase of an active view being altered (then the population's phases)
SWAPPING = "swapping"  # ... whose new definition is being swapped in (a crash then: rebuilt, ``reconcile``)
STOPPED = ("failed", SINK_ERROR)  # the statuses of views that stopped, which an alter makes active again


class Altering:
    """``ViewCatalog``'s ``alter_view`` part (module docstring); the attributes are ``ViewCatalog``'s."""

    flow: TwoPhaseFlow
    connector: Any
    names: Any
    running: dict[str, Plan]
    rebuilds: dict[str, str]
    follow_from: dict[str, Any]
    errors: tuple[type[BaseException], ...]
    sink_errors: SinkErrors

    def _reusable(self, name: str, replaces: str | None, widen: Widen | None) -> dict[str, Any]:
        """Per view a population computes, the circuit whose state it may start from (``Plan.reusing``),
        pinned now with the sources' copies: an alter's old view, each view a widening computes again."""
        views = [r.view for r in widen.readers] if widen is not None else []
        if replaces is not None:
            views.append(self.names.engine(name))
        return {view: self.flow.pin_view(view) for view in views if view in self.flow.views}

    def _admit_alter(self, name: str, view_sql: str, request: int | None,
                     reader: str | None) -> tuple[str, str | None] | None:
        """Whether view ``name`` may be altered to ``view_sql`` now (refusals raise ``CatalogError``): its SQL
        now and, for a view that stopped, its status (``STOPPED``); None when it is active with ``view_sql``
        already (the request answered)."""
        control = self.connector.control
        existing = control.view(name)
        if existing is None:
            raise CatalogError(f"freshview: no view named {name} to alter; create it with "
                               f"CALL freshview.create_view('{name}', ...)")
        if name in self.rebuilds or (name in self.running and self.running[name].rebuild):
            raise populating.MustWait(f"{name} is being rebuilt")  # (an alter retried after a crash mid-swap)
        if name in self.running:
            raise CatalogError(f"freshview: view {name} is being populated or altered; alter it once it is active "
                               f"again (freshview.views shows its phase)")
        if existing[1] != "active" and existing[1] not in STOPPED:
            raise CatalogError(f"freshview: view {name} is {existing[1]}; only an active, failed or sink error view "
                               f"can be altered (alter it once it is active again)")
        if request is not None:
            refusal = control.drop_refusal(name, reader)
            if refusal:
                raise CatalogError(refusal.replace("to drop view", "to alter view").replace("may drop it",
                                                                                            "may alter it"))
        readers = self.flow.readers(self.names.engine(name))
        if readers:
            raise CatalogError(f"freshview: views {', '.join(self.names.qualified(r) for r in readers)} read {name}; "
                               f"drop them before altering it")
        if existing[0] == view_sql and existing[1] == "active":
            if request is not None:
                control.finish_request(request)
            return None
        return str(existing[0]), (None if existing[1] == "active" else str(existing[1]))

    def _altering(self, name: str, stopped: str | None, phase: str) -> None:
        """An alter starts (``phase`` in ``freshview.views``); a ``sink error`` view's rebuild is no longer due
        (its new definition replaces it)."""
        if stopped is not None:
            self.sink_errors.due.pop(name, None)
        self.connector.control.show_alter(name, phase)

    def _alter_failed(self, name: str, stopped: str | None, error: str | None) -> None:
        """An alter ended without its swap (``error``; None: it is tried again, the service stopping or its
        database lost): an active view goes on as it was; one that had stopped (``failed``, ``sink error``) is
        ``failed`` with the alter's error."""
        if stopped is None or error is None:
            self.connector.control.show_alter(name, None)
        else:
            self.sink_errors.due.pop(name, None)
            self.connector.control.mark_failed(name, error)

    def _alter_now(self, name: str, view_sql: str, replaces: str, position: Any, request: int | None,
                   reader: str | None, plan: Any, engine_sql: str, probe: Any, stopped: str | None = None) -> None:
        """An alter whose new SQL reads another freshview view, or columns a followed table's copy lacks: done
        at once, in the loop (as ``create`` is): the old view leaves the engine, its tables are widened (their
        other views recomputed), the new view is computed and swapped in (``_swap``); on failure the old
        view is computed again (``_restore``).  A view that ``stopped`` has no old view in the engine: a
        failure leaves it failed (``populate``'s caller says so: ``_alter_failed``)."""
        self._altering(name, stopped, SWAPPING)  # a crash from here on: rebuilt from its stored SQL
        view = self.names.engine(name)
        if stopped is None:
            self.flow.drop_view(view)
        try:
            self._compute_now(name, plan, engine_sql, probe, position)
            self._swap(name, view_sql, position, request, reader)
        except BaseException:
            if stopped is None:
                self._restore(name, replaces, position)
            elif view in self.flow.views:
                self.flow.drop_view(view)
                self.drop_unused_sources()
            raise

    def _swap(self, name: str, view_sql: str, position: Any, request: int | None, reader: str | None,
              altered: bool = True, previous: pa.Table | None = None) -> None:
        """The engine's view ``name`` (computed at ``position``) replaces the result table's rows and the
        stored SQL in one database transaction (``ResultSink.alter``; ``previous``: the rows the table holds,
        so only the difference is written where the table is kept)."""
        initial: pa.Table = self.flow.snapshot(self.names.engine(name), weighted=True)
        self.connector.results.alter(self.result_spec(name), view_sql, initial, position, reader=reader,
                                     request=request, altered=altered, previous=previous)
        log.info("view %s %s (%d rows)", name, "altered" if altered else "restored", initial.num_rows)

    def _restore(self, name: str, old_sql: str, position: Any) -> None:
        """An alter failed after the old view left the engine: the old SQL is computed again and its rows put
        back (the table kept).  If even that fails the view fails (a fault: it is rebuilt at the next attach,
        its row still ``swapping``)."""
        view = self.names.engine(name)
        try:
            if view in self.flow.views:
                self.flow.drop_view(view)
            owner = self.connector.control.owners().get(name)
            plan, engine_sql, probe = self._compile(name, old_sql, owner, None, True, position)
            self._compute_now(name, plan, engine_sql, probe, position)
            self._swap(name, old_sql, position, None, owner, altered=False)
        except Fault:
            log.warning("view %s: the old definition could not be restored after a failed alter (the service "
                        "lost the database); it is rebuilt when the service attaches again", name)
        except Exception as exc:  # noqa: BLE001 - the alter's own error is the one reported
            log.error("view %s: the old definition could not be restored after a failed alter", name, exc_info=True)
            self.fail_views([name], f"freshview: an alter_view failed and the view's old definition could not be "
                                    f"computed again: {exc}")

    def _join_alter(self, plan: Plan, scratch: TwoPhaseFlow, pins: Mapping[str, Any], position: Any) -> None:
        """An alter's population joins: the old view leaves the engine, the new one is adopted in its place
        and swapped into the result table (``_swap``); on failure the old one is restored (``_restore``).  (A
        view that stopped: no old view to drop or restore.)"""
        flow = self.flow
        before = dict(self.follow_from)
        started = time.perf_counter()
        self.connector.control.show_alter(plan.name, SWAPPING)  # a crash from here on: rebuilt from its stored SQL
        self.running.pop(plan.name, None)
        others = None  # (a widening: the rows of the other views over the tables read again, ``widening``)
        stopped = plan.stopped is not None  # (no old view in the engine: a failure leaves the view failed)
        try:
            # the old view's rows, which its table holds if the results are at ``position`` (not replaying)
            previous = flow.snapshot(plan.view, weighted=True) \
                if not stopped and self.connector.results.stored_position() == position else None
            if not stopped:
                flow.drop_view(plan.view)
            if plan.widen is not None:
                others = self._join_widened(plan.widen, position)
            new = [t for t in plan.new if t not in self.follow_from]
            flow.adopt_view(scratch, plan.view, [plan.new[t].engine for t in new])
            for table in new:
                self._remember(table, plan.new[table].described, pins[table])
            if plan.widen is not None:
                self._adopt_widened(plan.widen, scratch, others or {}, position)
            self._swap(plan.name, plan.view_sql, position, plan.request, plan.reader, previous=previous)
        except BaseException:
            self._follow_as_before(before, plan.widen, others is not None)
            assert plan.replaces is not None
            if plan.view in flow.views and (stopped or plan.widen is not None and others is not None):
                flow.drop_view(plan.view)
            if plan.widen is not None and others is not None:  # (the views over them had left the engine)
                self._recompute_widened(plan.widen, others, position)
            if stopped:
                self.drop_unused_sources(pinned=True)
            else:
                self._restore(plan.name, plan.replaces, position)
            raise
        self.drop_unused_sources(pinned=True)  # (what only the old definition read)
        log.info("view %s altered beside the stream (joined in %.2f s)", plan.name, time.perf_counter() - started)
