"""``create_view`` / ``drop_view`` requests: served between steps, from the control schema's queue.

No request, however malformed, stops the service: every failure of one is
caught, answered to its CALL with a message and recorded in the queue
(``finish_request``); an unexpected one (a bug, not a refusal) is answered
in one line and its traceback goes to the log only.  Only what is not an
``Exception`` (``KeyboardInterrupt``, ``SystemExit``) goes through, and the
request goes back to the queue.

A request that kills the process itself (the first computation of a view
running out of memory, a crash in native code) cannot be caught: it is
counted instead.  Claiming a request counts an attempt, durably, before any
work on it; at start, the requests a dead service was working on are
retried once and then failed (``after_crash``, ``recover``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING

import pyarrow as pa

from freshview.connectors.base import ChangeError, ControlSchema, Request, SourceTable
from freshview.errors import CatalogError, Fault, FreshviewError
from freshview.flow import IncrementalFlow
from freshview.plan.rewrite.prune import columns_read
from freshview.service import access
from freshview.service.names import Names
from freshview.sql import compile_view

if TYPE_CHECKING:
    from freshview.service.core import Core

log = logging.getLogger("freshview.service")

NOT_RETRIED = "freshview: this request stopped the service; not retried"
MAX_ATTEMPTS = 2  # a request that was running when the service died is retried at most once


def after_crash(attempts: int) -> str | None:
    """A request found running at start (the service died working on it ``attempts`` times): None to
    retry it, or the error to fail it with."""
    return None if attempts < MAX_ATTEMPTS else NOT_RETRIED


def recover(control: ControlSchema) -> None:
    """At start: the requests a dead service was working on are retried once, then failed."""
    for request in control.interrupted_requests():
        error = after_crash(request.attempts)
        if error is None:
            log.warning("request %s (%s %s) was running when the service stopped; retrying it once",
                        request.id, request.action, request.name)
            control.requeue_request(request.id)
        else:
            log.error("request %s (%s %s) was running each of the %d times the service stopped; failing it",
                      request.id, request.action, request.name, request.attempts)
            control.finish_request(request.id, error)


def failure(request: Request, exc: Exception, expected: tuple[type[BaseException], ...]) -> str:
    """The answer to a request that failed with ``exc``: a refusal's own message, or one line naming
    what failed for anything else (an internal error: its traceback is logged, not sent)."""
    if isinstance(exc, expected):
        text = str(exc)
        return text if text.startswith("freshview") else f"freshview: {text}"
    what = f"creating view {request.name}" if request.action == "create" else f"dropping view {request.name}"
    detail = (str(exc).strip().splitlines() or [""])[0][:300]
    return (f"freshview: {what} failed with an internal error ({type(exc).__name__}"
            f"{': ' + detail if detail else ''}); the service's log has the details")


def serve(core: "Core") -> None:
    """Answer every pending request; a failed one gets its error (``freshview: ...``)."""
    control = core.connector.control
    expected = (FreshviewError, ChangeError, *core.connector.errors)
    while not core.stopping():
        request = control.next_request()
        if request is None:
            return
        log.info("request %s: %s %s", request.id, request.action, request.name)
        try:
            if request.action == "create":
                create(core, request.name, request.sql or "", request=request.id, reader=request.requested_by)
            else:
                drop(core, request.name, request=request.id, requested_by=request.requested_by)
        except Fault:  # the database or the disk, not the request: served again once the service is back
            with contextlib.suppress(Exception):  # (on a dead connection: requeued when it attaches again)
                control.requeue_request(request.id)
            raise
        except Exception as exc:  # noqa: BLE001 - a request must never stop the service
            message = failure(request, exc, expected)
            if isinstance(exc, expected):
                log.info("request %s refused: %s", request.id, message.splitlines()[0])
            else:
                log.error("request %s (%s %s) failed", request.id, request.action, request.name, exc_info=True)
            control.finish_request(request.id, message)
        except BaseException:  # interrupted (stopped, ^C): not the request's fault; it goes back to the queue
            with contextlib.suppress(Exception):
                control.requeue_request(request.id)
            raise


def create(core: "Core", name: str, view_sql: str, *, replace: bool = False, request: int | None = None,
           reader: str | None = None) -> None:
    """Compile, follow the new base tables (snapshots), compute, write the result table (one transaction).
    On any failure the engine and the database are left as before (the view is not half there)."""
    flow, control, results = core.flow, core.connector.control, core.connector.results
    name = core.names.qualify(name)
    view = core.names.engine(name)
    if replace and reader is None:  # a rebuild runs with the rights of the view's requester (access)
        reader = control.owners().get(name)
    if not replace:
        existing = control.view(name)
        if existing is not None:
            if existing[0] == view_sql and existing[1] == "active":
                if request is not None:
                    control.finish_request(request)
                return
            raise CatalogError(f"freshview: view {name} already exists (status {existing[1]}); "
                               f"drop it first with CALL freshview.drop_view('{name}')")
        if control.relation_exists(name):
            raise CatalogError(f"freshview: a table named {name} already exists; choose another view name")
        control.begin_create(name, view_sql, reader)
    registered = False
    try:
        probe = TableProbe(flow, core.connector.source, core.names)
        try:  # SQL errors surface here, with positions, before any work; the engine compiles the view's text
            # with the database's views and inheritance parents read through their definitions (sql.expand)
            plan, engine_sql = compile_view(view_sql, probe, core.connector.dialect)
        except FreshviewError:
            access.check_tables(core.connector, name, probe.tables, reader, request)
            raise
        access.check(core.connector, name, access.reads(plan, core.names), reader, request, existing=replace)
        if view in flow.views:
            flow.drop_view(view)
        started = time.perf_counter()
        # Only the columns the view reads are read and kept (a table's copy is shared by its views: one
        # that lacks columns this view reads is read again, widened, its views recomputed).
        reads = columns_read(plan)
        read = {q: reads.get(core.names.engine(q), frozenset()) for q in probe.tables}
        core.widen(read)
        core.follow({q: t for q, t in probe.tables.items() if q not in core.follow_from}, read)
        read = time.perf_counter()
        flow.register_view(view, engine_sql)
        registered = True
        log.info("view %s: sources read in %.1f s, first computation %.1f s", name, read - started,
                 time.perf_counter() - read)
        spec = core.result_spec(name)
        initial: pa.Table = flow.snapshot(view, weighted=True)
        results.create(spec, view_sql, initial, core.at.engine, replace=replace, reader=reader, request=request)
    except BaseException:
        _undo_create(core, view, name, registered, abandon=request is not None and not replace)
        raise
    log.info("view %s created (%d rows)", name, initial.num_rows)


def _undo_create(core: "Core", view: str, name: str, registered: bool, abandon: bool) -> None:
    """Leave no trace of a failed create: the engine's view and the sources nothing else reads, the
    ``creating`` row.  A failure here is logged; the create's own error is the one reported."""
    steps = []
    if registered and view in core.flow.views:
        steps.append(lambda: core.flow.drop_view(view))
    if abandon:
        steps.append(lambda: core.connector.control.abandon_create(name))
    steps.append(core.drop_unused_sources)
    for step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001
            log.warning("cleaning up after the failed creation of %s", name, exc_info=True)


def drop(core: "Core", name: str, request: int | None = None, requested_by: str | None = None) -> None:
    flow = core.flow
    name = core.names.qualify(name)
    view = core.names.engine(name)
    if core.connector.control.view(name) is None and view not in flow.views:
        raise CatalogError(f"freshview: no view named {name}")
    if request is not None:  # a user's request: only the view's creator or an administrator may drop it
        refusal = core.connector.control.drop_refusal(name, requested_by)
        if refusal:
            raise CatalogError(refusal)
    if view in flow.views:
        readers = flow.readers(view)
        if readers:
            raise CatalogError(f"freshview: views {', '.join(core.names.qualified(r) for r in readers)} "
                               f"read {name}; drop them first")
        flow.drop_view(view)
    core.connector.results.drop(name, request)
    core.drop_unused_sources()
    if core.metrics is not None:  # metrics hook
        core.metrics.forget_view(name)
    log.info("view %s dropped", name)


class TableProbe:
    """Catalog for a first compile: engine relations, else the database's tables (recorded); the database's
    views and inheritance parents are read through their definitions (``Source.expansion``)."""

    def __init__(self, flow: IncrementalFlow, source, names: Names) -> None:
        self.flow = flow
        self.source = source
        self.names = names
        self.default_schema = names.default  # bare table names are this schema's (sql.build.Catalog)
        self.tables: dict[str, SourceTable] = {}
        self.expansions: dict[str, str | None] = {}

    def relation_expansion(self, name: str) -> str | None:
        if name in self.flow.views:  # a freshview view: its result table is a table
            return None
        qualified = self.names.qualified(name)
        if qualified not in self.expansions:
            self.expansions[qualified] = self.source.expansion(qualified)
        return self.expansions[qualified]

    def relation_columns(self, name: str):
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
