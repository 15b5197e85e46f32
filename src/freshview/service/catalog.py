"""``ViewCatalog``: the views of one database and the base tables they follow, kept in the engine.

What the service's views are is decided here, between the engine (``TwoPhaseFlow``) and the database
(the connector): views are created (a user's request, or a rebuild after a lost slot or lost state:
``populate`` checks and plans it, a ``population`` computes it beside the loop and ``join`` adds it; a
re-creation after DDL, or a view that must be created in the loop: ``create``, at once: compiled, their
new tables followed from a snapshot, computed, their result tables written) and dropped (``drop``); at
every attach the engine's views are made to agree with the database's (``reconcile``, which lists the
views to rebuild: ``rebuilds``, started by ``start_rebuilds``); DDL on a followed table keeps its views right or
fails them (``check_ddl``, ``check_catalog``: decisions in ``following``); a view that cannot go on
fails, and so do the views reading it (``fail_views``, ``fail_table``, ``fail_step``).  The followed
tables and the snapshot position each was loaded from (``follow_from``) are kept with the engine's
state.  ``Core`` keeps the loop and the positions: it hands the catalog the engine's position where a
new result table must start from.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Mapping

import pyarrow as pa

from freshview.connectors.base import (
    ChangeError, Connector, Renamed, ResultSpec, SourceTable, Transaction, after,
)
from freshview.errors import CatalogError, Fault, FreshviewError, SinkError
from freshview.flow import TwoPhaseFlow
from freshview.plan.rewrite.prune import columns_read
from freshview.service import access, loading, populating, recovery, requests, sink_errors
from freshview.service.altering import ALTERING, Altering
from freshview.service.following import (
    VIEW, Fail, Refollow, Rename, awaits_statement, ddl_effect, differs, kept_columns,
)
from freshview.service.names import Names
from freshview.service.probe import TableProbe
from freshview.service.sink_errors import SINK_ERROR, SinkErrors
from freshview.service.population import Followed, New, Plan
from freshview.service.widening import Widening
from freshview.sql import compile_view
from freshview.sql.rename import renamed as renamed_sql

if TYPE_CHECKING:
    from freshview.service.metrics import ServiceMetrics

log = logging.getLogger("freshview.service")

_DONE: Any = object()  # ``_admit``: the view is there already, the request answered
REFOLLOW_ATTEMPTS = 3  # a view's re-creation when its table is followed anew (the table may change meanwhile)
IDENTITY_KEY = "follow_identity"  # engine meta: followed table -> its ``SourceTable.identity`` when followed
FOLLOW_FROM_KEY = "follow_from"  # engine meta: followed table -> the position of its snapshot
# engine meta: followed table -> all its column names as last seen (the engine keeps only those read)
COLUMNS_KEY = "follow_columns"
# engine meta: followed table renamed since followed -> [its name now, {the engine's column: its name now}]
RENAMES_KEY = "follow_renamed"
PLACES_KEY = "follow_places"  # engine meta: followed table -> its columns' places as last seen (``SourceTable``)

# (table, rows done, estimated total rows or None, finished) while a base table is snapshotted (from a
# population's worker thread when a view is populated beside the stream: ``population``)
SnapshotProgress = Callable[[str, int, "int | None", bool], None]


class ViewCatalog(Altering, Widening):
    """The views of one database in one engine (module docstring); made anew at every attach."""

    def __init__(self, flow: TwoPhaseFlow, connector: Connector, names: Names, *, chunk_rows: int,
                 snapshot_progress: SnapshotProgress | None = None, metrics: "ServiceMetrics | None" = None,
                 keepalive: Callable[[], None] = lambda: None, sink_retry_s: float = 30.0) -> None:
        self.flow = flow
        self.connector = connector
        self.names = names
        self.chunk_rows = chunk_rows
        self.snapshot_progress = snapshot_progress
        self.metrics = metrics
        self.keepalive = keepalive  # keeps the change stream alive through a long snapshot
        source = connector.source
        self.follow_from: dict[str, Any] = {t: source.position_from_text(str(v))
                                            for t, v in flow.get_meta(FOLLOW_FROM_KEY, {}).items()}
        self.errors: tuple[type[BaseException], ...] = (FreshviewError, ChangeError, *connector.errors)
        # table -> (where the stream settles what the catalog showed, when first seen): ``awaits_statement``
        self._awaiting: dict[str, tuple[Any, float]] = {}
        # table -> columns its next snapshot reads besides what the view being created reads (``widen``)
        self.wanted_columns: dict[str, set[str]] = {}
        self.running: dict[str, Plan] = {}  # views being populated (``populate``), not joined yet
        self.rebuilds: dict[str, str] = {}  # views to rebuild beside the loop (``reconcile``): name -> SQL
        self.sink_errors = SinkErrors(sink_retry_s)  # views stopped by their result table (``fail_sink``)
        source.rename(self._renames())

    # ------------------------------------------------------------------ views
    def result_spec(self, name: str) -> ResultSpec:
        return ResultSpec.of(name, self.flow.view_plan(self.names.engine(name)))

    def reconcile(self, position: Any) -> None:
        """Make the engine's views and the database's agree (after a crash, a lost position, lost state):
        views nobody wants go, wanted ones are known again; those the engine lacks are to be rebuilt beside
        the loop (``rebuilds``, in creation order: ``start_rebuilds``)."""
        listed = self.connector.control.views()
        wanted = recovery.wanted_views(listed)
        self.sink_errors.found_at_start(listed)
        self.connector.results.drop_prefill()  # (what a stopped service's populations wrote aside)
        for view in recovery.views_to_drop(list(self.flow.views), {self.names.engine(n) for n in wanted}):
            self.flow.drop_view(view)
        for name in recovery.half_swapped(listed):  # (its engine view may be either definition: rebuilt)
            if self.names.engine(name) in self.flow.views and not self.flow.readers(self.names.engine(name)):
                self.flow.drop_view(self.names.engine(name))
        for name, view_sql in wanted.items():
            if self.names.engine(name) in self.flow.views:
                self.connector.results.attach(self.result_spec(name))
            else:
                self.rebuilds[name] = view_sql
        self.connector.control.mark_rebuilding(recovery.LOST_STATE, recovery.still_active(listed, self.rebuilds))
        self.drop_unused_sources()
        self._want_columns(self.rebuilds.items())

    def start_rebuilds(self, position: Any, processed: Any) -> list[Plan]:
        """The views to rebuild (``reconcile``) that may start now, as plans to populate beside the loop
        (``populate(rebuild=True)``); each stays ``rebuilding`` until it joins, one that fails is failed,
        one that must wait (for a view it reads, for a table another follows anew) is tried again later."""
        plans = []
        for name, view_sql in list(self.rebuilds.items()):
            try:
                plan = self.populate(name, view_sql, position, blocking=False, processed=processed, rebuild=True)
            except populating.MustWait:
                continue
            except Fault:
                raise  # (the next attach finds the views to rebuild again)
            except Exception as exc:  # noqa: BLE001 - the view failed (``populate``), not the service
                if not isinstance(exc, self.errors):
                    log.error("rebuilding view %s failed", name, exc_info=True)
                plan = None
            del self.rebuilds[name]
            if plan is not None:
                plans.append(plan)
        if not self.rebuilds:
            self.wanted_columns.clear()
        return plans

    def _want_columns(self, views: Iterable[tuple[str, str]]) -> None:
        """Before rebuilding ``views`` (name, SQL) one by one: what each reads of a table is wanted of it
        (``wanted_columns``), so the first population to follow a table anew reads what they all read and
        the next ones find its copy whole (else each would follow it anew again, recomputing the others)."""
        for name, view_sql in views:
            probe = TableProbe(self.flow, self.connector.source, self.names)
            try:
                plan, _ = compile_view(view_sql, probe, self.connector.dialect)
            except Fault:
                raise
            except Exception:  # noqa: BLE001 - its populate says why
                continue
            reads = columns_read(plan)
            for table in probe.tables:
                self.wanted_columns.setdefault(table, set()).update(reads.get(self.names.engine(table), ()))

    def create(self, name: str, view_sql: str, position: Any, *, replace: bool = False, request: int | None = None,
               reader: str | None = None, keep_table: bool = False) -> None:
        """Compile, follow the new base tables (snapshots), compute, write the result table (one transaction,
        starting at ``position``, the engine's), all at once, inside the loop (a rebuild, a table followed
        anew; a user's request goes beside the loop: ``populate``).  On any failure the engine and the
        database are left as before (the view is not half there)."""
        name = self.names.qualify(name)
        reader = self._admit(name, view_sql, replace, request, reader)
        if reader is _DONE:
            return
        self._create_now(name, view_sql, position, replace, request, reader, *self._compile(name, view_sql, reader,
                                                                                        request, replace, position),
                         keep_table=keep_table)

    def _admit(self, name: str, view_sql: str, replace: bool, request: int | None, reader: str | None) -> Any:
        """Whether ``name`` may be created (a rebuild: yes; the same view active: ``_DONE``, the request
        answered); its ``populating`` row is inserted.  The reader it runs as."""
        control = self.connector.control
        if replace and reader is None:  # a rebuild runs with the rights of the view's requester (access)
            return control.owners().get(name)
        if replace:
            return reader
        existing = control.view(name)
        if existing is not None:
            if existing[0] == view_sql and existing[1] == "active":
                if request is not None:
                    control.finish_request(request)
                return _DONE
            raise CatalogError(f"freshview: view {name} already exists (status {existing[1]}); "
                               f"drop it first with CALL freshview.drop_view('{name}')")
        users = request is not None and control.uses_existing_table(request)  # fill the user's table
        if control.relation_exists(name) != users:
            raise CatalogError(f"freshview: there is no table {name} to fill (use_existing_table)" if users
                               else f"freshview: a table named {name} already exists; choose another view name, "
                                    f"or have the view fill it (use_existing_table)")
        control.begin_create(name, view_sql, reader, users)
        return reader

    def _compile(self, name: str, view_sql: str, reader: str | None, request: int | None,
                 replace: bool, position: Any, unfinished: Collection[str] = ()) -> tuple[Any, str, "TableProbe"]:
        """The view's plan and engine SQL, its reader's rights checked (``access``); the tables it reads (a
        renamed followed table it names is settled first, from ``position``: ``_settle_rename``).  Naming a
        view of ``unfinished`` (being populated or rebuilt) raises ``populating.MustWait``."""
        probe = TableProbe(self.flow, self.connector.source, self.names, lambda t: self._settle_rename(t, position),
                           unfinished)
        try:  # SQL errors surface here, with positions, before any work; the engine compiles the view's text
            # with the database's views and inheritance parents read through their definitions (sql.expand)
            plan, engine_sql = compile_view(view_sql, probe, self.connector.dialect)
        except FreshviewError:
            access.check_tables(self.connector, name, probe.tables, reader, request)
            raise
        access.check(self.connector, name, access.reads(plan, self.names), reader, request, existing=replace)
        return plan, engine_sql, probe

    def _create_now(self, name: str, view_sql: str, position: Any, replace: bool, request: int | None,
                    reader: str | None, plan: Any, engine_sql: str, probe: "TableProbe",
                    abandon: bool = True, keep_table: bool = False) -> None:
        """``create``'s work (``keep_table``: the view's result table is there and stays, refilled in one
        transaction as ``alter_view``'s swap does: a view recomputed because its table is followed anew keeps
        its table's identity, indexes and grants)."""
        flow, results = self.flow, self.connector.results
        view = self.names.engine(name)
        registered = False
        try:
            if view in flow.views:
                flow.drop_view(view)
            self._compute_now(name, plan, engine_sql, probe, position)
            registered = True
            initial: pa.Table = flow.snapshot(view, weighted=True)
            if keep_table:
                results.alter(self.result_spec(name), view_sql, initial, position, reader=reader, request=request,
                              altered=False)
            else:
                results.create(self.result_spec(name), view_sql, initial, position, replace=replace, reader=reader,
                               request=request)
        except BaseException:
            self._undo_create(view, name, registered, abandon=abandon and request is not None and not replace)
            raise
        log.info("view %s created (%d rows)", name, initial.num_rows)

    def _compute_now(self, name: str, plan: Any, engine_sql: str, probe: "TableProbe", position: Any) -> None:
        """The view's tables followed (or widened) and its first result computed in the engine, in the loop."""
        started = time.perf_counter()
        # Only the columns the view reads are read and kept (a table's copy is shared by its views: one
        # that lacks columns this view reads is read again, widened, its views recomputed).
        reads = columns_read(plan)
        wanted = {q: reads.get(self.names.engine(q), frozenset()) for q in probe.tables}
        self.widen(wanted, position)
        self.follow({q: t for q, t in probe.tables.items() if q not in self.follow_from}, wanted)
        read = time.perf_counter()
        loading.compute_first(self.flow, self.names.engine(name), engine_sql)
        log.info("view %s: sources read in %.1f s, first computation %.1f s", name, read - started,
                 time.perf_counter() - read)

    # ------------------------------------------------------------------ populations (beside the loop)
    def populate(self, name: str, view_sql: str, position: Any, *, request: int | None = None,
                 reader: str | None = None, blocking: bool = True, processed: Any = None, admitted: bool = False,
                 rebuild: bool = False, alter: bool = False) -> Plan | None:
        """A user's ``create_view`` (or, ``rebuild``, a view of ``freshview.views`` whose state is lost): checked
        and compiled here, then (the plan returned) populated beside the loop (``population``); ``processed``:
        the last position the loop processed (the pinned copies hold it; default ``position``, the engine's).
        None when nothing is left to do: the view was there, or it was created at once, from ``position`` (a
        view that reads another freshview view, or columns a followed table's copy lacks: ``create``'s path).
        Raises ``populating.MustWait`` while running populations are in its way (its row stays, phase
        ``waiting``; ``admitted``: it is tried again).  A failure of a request nobody waits for (``blocking``
        False) leaves the view ``failed`` with its message; else no trace.

        ``alter`` (``alter_view``): the active view ``name`` gets the new SQL, populated the same way beside the
        loop while the old view goes on (``Plan.replaces``); ``join`` swaps them.  Refused (the old view
        untouched) as a create is, and when the view is not active, is being populated or altered, or is
        read by other views (``_admit_alter``)."""
        name = self.names.qualify(name)
        processed = position if processed is None else processed
        replaces = stopped = None
        if alter:
            admitted_alter = self._admit_alter(name, view_sql, request, reader)
            if admitted_alter is None:
                return None
            replaces, stopped = admitted_alter
        elif rebuild or not admitted:  # (one admitted waited: its row is there, phase waiting)
            reader = self._admit(name, view_sql, rebuild, request, reader)
            if reader is _DONE:
                return None
        abandon = blocking and request is not None and not rebuild and not alter
        try:
            unfinished = {*self.running, *self.rebuilds} - {name}
            plan, engine_sql, probe = self._compile(name, view_sql, reader, request, rebuild, position, unfinished)
            reads = columns_read(plan)
            wanted = {q: reads.get(self.names.engine(q), frozenset()) for q in probe.tables}
            lacking, of_views = self._lacking(wanted), any(r in self.flow.views for r in reads)
            widen = self._widen_beside(lacking, position, name) if lacking and not of_views else None
            in_loop = of_views or bool(lacking) and widen is None
            tables = {**(widen.described if widen is not None else {}), **probe.tables}
            anew = [q for q in tables if q not in self.follow_from or widen is not None and q in widen.tables]
            waits = populating.must_wait(anew, in_loop, {n: list(p.new) for n, p in self.running.items()},
                                         list(tables), unfinished, {n: list(p.widen.tables) for n, p in
                                                                    self.running.items() if p.widen is not None})
            if waits is None and in_loop and replaces is not None:
                self._alter_now(name, view_sql, replaces, position, request, reader, plan, engine_sql, probe, stopped)
                return None
            if waits is None and in_loop:
                self._create_now(name, view_sql, position, rebuild, request, reader, plan, engine_sql, probe,
                                 abandon=blocking)
                return None
            if waits is None:
                followed = {q: Followed(self.names.engine(q), self.flow.source_schema(self.names.engine(q)),
                                        self.flow.pin_source(self.names.engine(q)),
                                        populating.followed_pin(processed, self.follow_from[q]), self.follow_from[q])
                            for q in tables if q not in anew}
                new = {q: New(self.names.engine(q), tables[q], kept_columns(tables[q].schema, set(wanted.get(q, ())) | (
                    widen.read.get(q, set()) if widen is not None else set()) | self.wanted_columns.get(q, set())))
                       for q in anew}
                self.connector.source.prepare(list(new))  # their changes are streamed from now on
        except populating.MustWait as wait:  # (it names a view not created yet)
            waits = str(wait)
        except Exception as exc:
            if replaces is not None:  # a refused alter: the old view goes on as it was (one stopped: failed)
                self._alter_failed(name, stopped, None if isinstance(exc, Fault) else
                                   requests.failure_text("alter", name, exc, self.errors))
                raise
            self._undo_create(self.names.engine(name), name, False, abandon=abandon)
            if rebuild and not isinstance(exc, Fault):
                self.fail_views([name], str(exc))
            elif not blocking and not isinstance(exc, Fault):
                self.connector.control.mark_failed(name, requests.failure_text("create", name, exc, self.errors))
            raise
        except BaseException:
            if replaces is None:
                self._undo_create(self.names.engine(name), name, False, abandon=request is not None and not rebuild)
            raise
        if waits is not None:
            if replaces is not None:
                self._altering(name, stopped, populating.Phase.WAITING.value)
            else:
                self.connector.control.show_population(name, populating.Phase.WAITING.value, 0, None, 0.0)
            raise populating.MustWait(waits)
        found = Plan(name, self.names.engine(name), view_sql, engine_sql, request, reader, blocking, followed, new,
                     rebuild, replaces, widen, stopped, self._reusable(name, replaces, widen))
        self.running[name] = found
        if replaces is not None:
            self._altering(name, stopped, ALTERING)
        return found

    @property
    def populating(self) -> set[str]:
        """Tables followed anew by running populations (``populate``), not joined yet."""
        return {t for plan in self.running.values() for t in plan.new}

    def join(self, plan: Plan, scratch: TwoPhaseFlow, pins: Mapping[str, Any], position: Any,
             prefilled: tuple[str, pa.Table] | None = None) -> None:
        """A population caught up to ``position`` (the loop's, the engine's) joins: the engine adopts its view
        and new tables (``IncrementalFlow.adopt_view``), then the result table is created, filled and made
        active at ``position`` in one database transaction (``prefilled``: the table its worker wrote aside
        and the rows in it: renamed into place, only what changed since written).  On failure nothing of it
        stays."""
        if plan.replaces is not None:
            self._join_alter(plan, scratch, pins, position)
            return
        flow = self.flow
        registered = False
        before = dict(self.follow_from)
        started = time.perf_counter()
        previous = None
        try:
            if plan.widen is not None:  # (its recomputed views and the narrower copies leave the engine)
                previous = self._join_widened(plan.widen, position)
            new = [t for t in plan.new if t not in self.follow_from]
            flow.adopt_view(scratch, plan.view, [plan.new[t].engine for t in new])
            adopted = time.perf_counter()
            registered = True
            for table in new:
                self._remember(table, plan.new[table].described, pins[table])
            if plan.widen is not None:
                self._adopt_widened(plan.widen, scratch, previous or {}, position)
            initial: pa.Table = flow.snapshot(plan.view, weighted=True)
            self.connector.results.create(self.result_spec(plan.name), plan.view_sql, initial, position,
                                          replace=plan.rebuild, reader=plan.reader, request=plan.request,
                                          prefilled=prefilled)
        except BaseException:
            self._follow_as_before(before, plan.widen, previous is not None)
            self.running.pop(plan.name, None)
            self._undo_create(plan.view, plan.name, registered, abandon=False)
            if plan.widen is not None and previous is not None:  # (its views over them had left the engine)
                self._recompute_widened(plan.widen, previous, position)
            raise
        self.running.pop(plan.name, None)
        log.info("view %s created beside the stream (%d rows; joined in %.2f s: state adopted %.3f s, result "
                 "table %.2f s)", plan.name, initial.num_rows, time.perf_counter() - started, adopted - started,
                 time.perf_counter() - adopted)

    def abandon(self, plan: Plan, error: str | None, dropped: bool = False) -> None:
        """A population that will not join: its tables are no longer wanted; its request is answered with
        ``error`` (None: it goes back to the queue, the service stopping); a CALL waiting for it leaves no
        trace, one that did not wait finds the view ``failed`` with the error (``dropped``: its row is left
        to the drop that ended it)."""
        self.running.pop(plan.name, None)
        control = self.connector.control
        if dropped:
            pass
        elif plan.replaces is not None:  # an alter: the old view goes on (one that had stopped: failed)
            self._alter_failed(plan.name, plan.stopped, error)
        elif plan.rebuild:
            if error is not None:
                self.fail_views([plan.name], error)
            else:  # (a fault: it stays ``rebuilding``, populated again)
                self.rebuilds[plan.name] = plan.view_sql
        elif error is not None and not plan.blocking:
            control.mark_failed(plan.name, error)
        else:
            control.abandon_create(plan.name)
        if plan.request is not None:
            if error is None:
                control.requeue_request(plan.request)
            else:
                control.finish_request(plan.request, error)
        self.drop_unused_sources(pinned=True)
        if set(plan.new) - set(self.follow_from):  # streamed for the population only: no longer
            self.connector.source.retain([*self.follow_from, *self.populating])

    def _undo_create(self, view: str, name: str, registered: bool, abandon: bool) -> None:
        """Leave no trace of a failed create: the engine's view and the sources nothing else reads, the
        ``creating`` row.  A failure here is logged; the create's own error is the one reported."""
        steps = []
        if registered and view in self.flow.views:
            steps.append(lambda: self.flow.drop_view(view))
        if abandon:
            steps.append(lambda: self.connector.control.abandon_create(name))
        steps.append(self.drop_unused_sources)
        for step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001
                log.warning("cleaning up after the failed creation of %s", name, exc_info=True)

    def drop(self, name: str, request: int | None = None, requested_by: str | None = None) -> None:
        flow = self.flow
        name = self.names.qualify(name)
        view = self.names.engine(name)
        if self.connector.control.view(name) is None and view not in flow.views:
            raise CatalogError(f"freshview: no view named {name}")
        if request is not None:  # a user's request: only the view's creator or an administrator may drop it
            refusal = self.connector.control.drop_refusal(name, requested_by)
            if refusal:
                raise CatalogError(refusal)
        if view in flow.views:
            readers = flow.readers(view)
            if readers:
                raise CatalogError(f"freshview: views {', '.join(self.names.qualified(r) for r in readers)} "
                                   f"read {name}; drop them first")
            flow.drop_view(view)
        self.connector.results.drop(name, request)
        self.drop_unused_sources(pinned=True)
        if self.metrics is not None:  # metrics hook
            self.metrics.forget_view(name)
        log.info("view %s dropped", name)

    # ------------------------------------------------------------------ followed tables
    def follow(self, tables: Mapping[str, SourceTable], columns: Mapping[str, Collection[str]] | None = None) -> None:
        """Start following base tables: make their changes streamed, then load them from one new snapshot
        and remember its position for each (saved with the engine's state).  ``columns``: what the views read
        of each (``plan.rewrite.prune.columns_read``; missing: every column); the engine keeps only those
        (``following.kept_columns``, with the columns ``widen`` asked for) and the snapshot reads only those."""
        if not tables:
            return
        source, flow = self.connector.source, self.flow
        source.prepare(list(tables))
        with source.snapshot() as snap:
            for table, described in tables.items():
                name = self.names.engine(table)
                read = None if columns is None or table not in columns else \
                    set(columns[table]) | self.wanted_columns.get(table, set())
                kept = kept_columns(described.schema, read)
                flow.register_source(name, kept)
                estimate = snap.estimate(table)

                def progress(done: int, table: str = table, finished: bool = False) -> None:
                    self.keepalive()  # keep the main stream alive through long snapshots
                    if self.snapshot_progress is not None:
                        self.snapshot_progress(table, done, estimate, finished)

                progress(0)
                loaded = loading.load(flow, name, snap.read(described, self.chunk_rows, progress, kept.names))
                progress(loaded, finished=True)
                self._remember(table, described, snap.position)

    def _remember(self, table: str, described: SourceTable, position: Any) -> None:
        """``table`` is followed from ``position`` (its snapshot's), as ``described`` (kept with the engine's state)."""
        flow = self.flow
        self.follow_from[table] = position
        identities = dict(flow.get_meta(IDENTITY_KEY, {}) or {})
        identities[table] = [list(p) for p in described.identity]
        flow.set_meta(IDENTITY_KEY, identities)
        flow.set_meta(COLUMNS_KEY, {**(flow.get_meta(COLUMNS_KEY, {}) or {}), table: described.schema.names})
        flow.set_meta(PLACES_KEY, {**(flow.get_meta(PLACES_KEY, {}) or {}), table: list(described.places)})
        self._save_follow_from()
        log.info("following %s from %s", table, position)

    def _save_follow_from(self) -> None:
        self.flow.set_meta(FOLLOW_FROM_KEY, {t: p.to_text() for t, p in self.follow_from.items()})

    def drop_unused_sources(self, pinned: bool = False) -> None:
        """Sources no view reads leave the engine (and the stream); with ``pinned`` (a view dropped, a
        population abandoned), one a running population reads pinned stays: it joins reading it.  (Else the
        population starts again: ``populating.stale``.)"""
        changed = False
        renames = self._renames()
        kept = {f.engine for plan in self.running.values() for f in plan.followed.values()} if pinned else set()
        for source in list(self.flow.sources):
            if not self.flow.readers(source) and source not in kept:
                self.flow.drop_source(source)
                self.follow_from.pop(self.names.qualified(source), None)
                renames.pop(self.names.qualified(source), None)
                changed = True
        if changed:
            self._save_follow_from()
            if renames != self._renames():
                self._save_renames(renames)
            # (e.g. leaves the publication; a table a population reads stays)
            self.connector.source.retain([*self.follow_from, *self.populating])

    def _columns_read(self, table: str) -> set[str]:
        """The columns of followed ``table`` its views read."""
        source = self.names.engine(table)
        read: set[str] = set()
        for view in self.flow.readers(source):
            read |= columns_read(self.flow.view_plan(view)).get(source, set())
        return read

    # ------------------------------------------------------------------ DDL on followed tables
    def check_ddl(self, group: Iterable[Transaction], position: Any) -> None:
        """Signs of DDL on followed tables in the stream: those tables are judged now (``judge``)."""
        suspects: dict[str, str | None] = {}
        for txn in group:
            for table, columns in txn.definitions.items():
                if table in self.follow_from and after(txn.position, self.follow_from[table]) and \
                        differs(columns, self.flow.source_schema(self.names.engine(table))):
                    suspects.setdefault(table, None)
            for table, statement in txn.ddl.items():
                if table in self.follow_from and after(txn.position, self.follow_from[table]):
                    suspects[table] = statement or suspects.get(table)
        if suspects:
            self.judge(suspects, position)

    def check_catalog(self, position: Any) -> None:
        """Every followed table as the catalog describes it now (an idle table's rename or DDL too)."""
        if self.follow_from:
            self.judge(dict.fromkeys(self.follow_from), position)

    def judge(self, tables: Mapping[str, str | None], position: Any) -> None:
        """Look the tables up in the catalog and apply what their DDL does to their views (``ddl_effect``);
        a view created anew starts at ``position``."""
        identities = self.flow.get_meta(IDENTITY_KEY, {}) or {}
        tables = {t: s for t, s in tables.items() if t in self.follow_from}
        found = self.connector.source.recheck({t: _pairs(identities.get(t)) for t in tables})
        unknown = {}
        for table, statement in tables.items():
            now = found.get(table)
            if now is None or table not in self.follow_from:
                continue
            schema = self.flow.source_schema(self.names.engine(table))
            renamed = self._renames().get(table)
            log.debug("DDL check of %s: %s (followed with %s)", table, now, identities.get(table))
            effect = ddl_effect(table, schema, self._columns_read(table), now, _pairs(identities.get(table)),
                                statement, (self.flow.get_meta(COLUMNS_KEY, {}) or {}).get(table),
                                renamed.name if renamed else None, renamed.columns if renamed else None,
                                (self.flow.get_meta(PLACES_KEY, {}) or {}).get(table))
            settles_at, first_seen = self._awaiting.setdefault(table, (now.settles_at, time.monotonic()))
            if awaits_statement(effect, statement, settles_at, position, time.monotonic() - first_seen):
                continue  # the stream's statement is still to come: the change is applied (or named) with it
            self._awaiting.pop(table, None)
            if isinstance(effect, Fail):
                self._fail_readers(table, effect, position)
                continue
            if isinstance(effect, Refollow):
                if effect.rename is not None:
                    self._rewrite_readers(table, effect.rename)  # (their SQL reads the new names)
                self._refollow(table, effect.reason, position)
                continue
            if isinstance(effect, Rename):
                self._follow_rename(table, effect)
            self._seen(table, list(now.columns), now.places, now.identity if table in identities else ())
            if table not in identities and now.identity:
                unknown[table] = [list(p) for p in now.identity]  # followed before identities were kept
        if unknown:
            self.flow.set_meta(IDENTITY_KEY, {**(self.flow.get_meta(IDENTITY_KEY, {}) or {}), **unknown})

    def _fail_readers(self, table: str, effect: Fail, position: Any) -> None:
        """The views reading the columns ``effect`` names fail (all the table's views when it names none);
        the table is followed anew for the others, which do not read them."""
        if not effect.columns:
            self.fail_table(table, effect.error)
            return
        source = self.names.engine(table)
        doomed = [self.names.qualified(v) for v in self.flow.readers(source)
                  if columns_read(self.flow.view_plan(v)).get(source, set()) & effect.columns]
        self.fail_views(doomed, effect.error)
        if not self.flow.readers(source):
            self.drop_unused_sources()
            return
        if effect.rename is not None:
            self._rewrite_readers(table, effect.rename)
        self._refollow(table, f"the views reading its columns {', '.join(sorted(effect.columns))} failed", position)

    def _seen(self, table: str, columns: list[str], places: Iterable[int], identity: Iterable[tuple[str, str]]) -> None:
        """The table's columns (their places, its identity) as now seen: what the next DDL is told from
        (``ddl_effect``)."""
        for key, value in ((COLUMNS_KEY, columns), (PLACES_KEY, list(places))):
            known = self.flow.get_meta(key, {}) or {}
            if known.get(table) != value:
                self.flow.set_meta(key, {**known, table: value})
        identities = self.flow.get_meta(IDENTITY_KEY, {}) or {}
        pairs = [list(p) for p in identity]
        if pairs and identities.get(table) != pairs:
            self.flow.set_meta(IDENTITY_KEY, {**identities, table: pairs})

    # ------------------------------------------------------------------ renamed tables and columns
    def _renames(self) -> dict[str, Renamed]:
        """Followed tables known to the engine by other names than the database's now (``RENAMES_KEY``)."""
        return {t: Renamed(str(v[0]), dict(v[1])) for t, v in (self.flow.get_meta(RENAMES_KEY, {}) or {}).items()}

    def _save_renames(self, renames: Mapping[str, Renamed]) -> None:
        self.flow.set_meta(RENAMES_KEY, {t: [r.name, dict(r.columns)] for t, r in renames.items()})
        self.connector.source.rename(renames)

    def _settle_rename(self, table: str, position: Any) -> None:
        """A new view names ``table``, a renamed followed table's name now or the name it was followed by: the
        table is followed anew under its name now (its views compiled from their rewritten SQL), so the new
        view shares it, or reads the table that has the old name now."""
        for followed, renamed in self._renames().items():
            if table in (followed, renamed.name):
                self._refollow(followed, f"a new view reads it as {table} (renamed from {followed} to {renamed.name})",
                               position, level=logging.INFO)
                return

    def _follow_rename(self, table: str, rename: Rename) -> None:
        """``table`` (or columns the engine keeps of it) renamed: its views keep running, their SQL rewritten
        to the new names (one that cannot be fails, saying why); the engine keeps its names and the connector
        hands the table's changes under them (``base.Renamed``)."""
        log.info("%s: %s; its views keep running, their SQL rewritten to the new names", table, rename.what)
        self._rewrite_readers(table, rename)
        renames = self._renames()
        if rename.name == table and not rename.mapping:
            renames.pop(table, None)  # back to the names it was followed by
        else:
            renames[table] = Renamed(rename.name, dict(rename.mapping))
        self._save_renames(renames)
        self.drop_unused_sources()  # (a view whose SQL could not be rewritten failed: maybe the table's last)

    def _rewrite_readers(self, table: str, rename: Rename) -> None:
        """The stored SQL of the views reading ``table`` rewritten to its new names (``sql.rename``)."""
        control = self.connector.control
        definitions = {name: sql for name, sql, _ in control.views()}
        before = self.names.engine(rename.before)
        schema, new_table = self.names.rules.split(rename.name)
        schema = schema or self.names.default
        spelled_schema = self.names.rules.spell(schema, "x")[:-2]  # (each part quoted only when it must be)
        spelled_table = self.names.rules.spell(schema, new_table)[len(spelled_schema) + 1:]
        new = None if rename.name == rename.before else \
            (None if schema == self.names.default else spelled_schema, spelled_table)
        last = (self.flow.get_meta(COLUMNS_KEY, {}) or {}).get(table)
        probe = TableProbe(self.flow, self.connector.source, self.names)

        def columns_of(relation: str) -> list[str] | None:
            if relation == before and last:
                return list(last)
            found = probe.relation_columns(relation)
            return None if found is None else [c for c, _ in found[0]]

        for view in self.flow.readers(self.names.engine(table)):
            name = self.names.qualified(view)
            if name not in definitions:
                continue
            try:
                sql = renamed_sql(definitions[name], self.connector.dialect, self.names.default, before, new,
                                  rename.columns, columns_of)
            except self.errors as exc:
                self.fail_views([name], f"freshview: {rename.what}; the view's SQL cannot be rewritten to the new "
                                        f"names ({exc}): CALL freshview.alter_view('{name}', ...) with a "
                                        "query for them")
                continue
            if sql != definitions[name]:
                control.set_sql(name, sql)
                log.info("view %s now reads: %s", name, sql)

    def _refollow(self, table: str, reason: str, position: Any, level: int = logging.WARNING,
                  extra: Collection[str] = ()) -> None:
        """Follow ``table`` anew from a new snapshot: its views (and the views reading them) are dropped from
        the engine and created again from their SQL, their result tables replaced; one that cannot be fails.
        The new snapshot reads every column the views read and ``extra`` (``wanted_columns``), whichever view
        is created first."""
        self.wanted_columns[table] = self._columns_read(table) | set(extra)
        try:
            self._recreate_readers(table, reason, position, level)
        finally:
            self.wanted_columns.pop(table, None)

    def _recreate_readers(self, table: str, reason: str, position: Any, level: int) -> None:
        doomed = self._with_readers(self.flow.readers(self.names.engine(table)))
        ordered = [v for v in self.flow.views if v in doomed]  # registration order: a view before its readers
        definitions = {name: sql for name, sql, _ in self.connector.control.views()}
        log.log(level, "%s changed: %s; following it anew from a new snapshot and recomputing %s", table, reason,
                ", ".join(self.names.qualified(v) for v in ordered))
        for view in reversed(ordered):
            self.flow.drop_view(view)
        self.drop_unused_sources()  # (followed anew, whoever reads it pinned: ``populating.stale``)
        for view in ordered:
            name = self.names.qualified(view)
            if name not in definitions:
                continue
            for attempt in range(REFOLLOW_ATTEMPTS):  # more DDL may land between the definition and the snapshot
                try:
                    self.create(name, definitions[name], position, replace=True,  # with its requester's rights
                                keep_table=self.connector.results.knows(name))
                    break
                except self.errors as exc:
                    if attempt + 1 == REFOLLOW_ATTEMPTS:
                        self.fail_views([name], f"freshview: {table} changed ({reason}) and following it anew "
                                                f"failed: {exc}")
                    else:
                        log.warning("following %s anew for %s failed (%s); trying again", table, name, exc)

    # ------------------------------------------------------------------ failures
    def fail_step(self, exc: FreshviewError) -> bool:
        """An engine step failed with ``exc``: the view it names fails (or the views reading the source it
        names); False when it names neither (not a view's failure)."""
        if exc.view is not None:
            self.fail_views([self.names.qualified(exc.view)], f"freshview: {exc}")
        elif exc.source is not None:
            self.fail_table(self.names.qualified(exc.source), f"freshview: {exc}")
        else:
            return False
        return True

    def fail_sink(self, exc: SinkError, now: float) -> None:
        """A result table refused a step's rows: its view and the views reading it stop (``sink_errors``)."""
        stopped = self.fail_views([exc.table], sink_errors.message(str(exc), self.sink_errors.retry_s), SINK_ERROR)
        self.sink_errors.stopped(stopped, now)

    def rebuild_sinks(self, now: float) -> bool:
        """Views stopped by a sink error whose wait is over go to ``rebuilds`` (status ``rebuilding``); True if
        any did (a view dropped meanwhile is not rebuilt)."""
        due = self.sink_errors.take_due(now)
        if not due:
            return False
        rows = {name: (view_sql, status) for name, view_sql, status in self.connector.control.views()}
        for name in due:
            if name in rows and rows[name][1] == SINK_ERROR:
                self.rebuilds[name] = rows[name][0]
                self.connector.control.mark_failed(name, "freshview: rebuilding after its result table refused "
                                                         "rows", "rebuilding")
        return True

    def fail_table(self, table: str, error: str) -> None:
        """Stop every view that reads ``table`` and forget the table."""
        readers = self.flow.readers(self.names.engine(table))
        self.fail_views([self.names.qualified(v) for v in readers], error)
        self.drop_unused_sources()

    def fail_views(self, names: list[str], error: str, status: str = "failed") -> list[str]:
        """Views (and the views reading them) go to ``status``; their tables stay as they were (``VIEW`` in
        ``error``: the view's name; for the views reading it, the failed view's, when one failed).  The views
        stopped (qualified names)."""
        primary = {self.names.engine(n) for n in names}
        doomed = self._with_readers(self.names.engine(n) for n in names)
        for view in reversed(list(self.flow.views)):
            if view in doomed:
                self.flow.drop_view(view)
        for view in doomed:
            name = self.names.qualified(view)
            self.connector.results.forget(name)
            message = error.replace(VIEW, name) if view in primary else \
                f"freshview: a view it reads failed: {error.replace(VIEW, names[0] if len(names) == 1 else VIEW)}"
            log.error("view %s %s: %s", name, status, message)
            self.connector.control.mark_failed(name, message, status)
        return [self.names.qualified(v) for v in doomed]

    def _with_readers(self, views: Iterable[str]) -> dict[str, None]:
        """``views`` and every view reading them, directly or not (in the order found)."""
        doomed: dict[str, None] = {}
        todo = list(views)
        while todo:
            view = todo.pop()
            if view in doomed:
                continue
            doomed[view] = None
            if view in self.flow.views:
                todo.extend(self.flow.readers(view))
        return doomed

    def recheck_access(self, position: Any = None) -> None:
        """A view whose requester lost a right it needs fails, and its requester loses its table (``access``).
        DDL on the followed tables is judged first (``position``: the engine's), so a renamed column is asked
        about by its name now; a table whose DDL is still to be judged (``_awaiting``) is not asked about."""
        if position is not None:
            self.check_catalog(position)
        pending = {self.names.engine(t) for t in self._awaiting}
        plans = {self.names.qualified(v): self.flow.view_plan(v) for v in self.flow.views
                 if not pending & set(columns_read(self.flow.view_plan(v)))}
        for found in access.recheck(self.connector, plans, self.names, self._renames()):
            self.fail_views([found.name], found.reason)
            self.connector.results.revoke_reader(found.name, found.requester)


def _pairs(stored: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), str(v)) for k, v in stored or ())
