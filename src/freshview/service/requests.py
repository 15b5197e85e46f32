"""``create_view`` / ``drop_view`` requests: served between steps, from the control schema's queue."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import pyarrow as pa

from freshview.connectors.base import ChangeError, SourceTable
from freshview.errors import CatalogError, FreshviewError
from freshview.flow import IncrementalFlow
from freshview.service import access
from freshview.service.names import Names
from freshview.sql import build_plan

if TYPE_CHECKING:
    from freshview.service.core import Core

log = logging.getLogger("freshview.service")


def serve(core: "Core") -> None:
    """Answer every pending request; a refused one gets its error (``freshview: ...``)."""
    control = core.connector.control
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
        except (FreshviewError, ChangeError, CatalogError) as exc:
            message = str(exc) if str(exc).startswith("freshview") else f"freshview: {exc}"
            control.finish_request(request.id, message)


def create(core: "Core", name: str, view_sql: str, *, replace: bool = False, request: int | None = None,
           reader: str | None = None) -> None:
    """Compile, follow the new base tables (snapshots), compute, write the result table (one transaction)."""
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
    try:
        probe = TableProbe(flow, core.connector.source, core.names)
        try:  # SQL errors surface here, with positions, before any work
            plan = build_plan(view_sql, probe, core.connector.dialect)
        except FreshviewError:
            access.check_tables(core.connector, name, probe.tables, reader, request)
            raise
        access.check(core.connector, name, access.reads(plan, core.names), reader, request, existing=replace)
        if view in flow.views:
            flow.drop_view(view)
        started = time.perf_counter()
        core.follow({q: t for q, t in probe.tables.items() if q not in core.follow_from})
        read = time.perf_counter()
        flow.register_view(view, view_sql)
        log.info("view %s: sources read in %.1f s, first computation %.1f s", name, read - started,
                 time.perf_counter() - read)
    except BaseException:
        if request is not None and not replace:
            control.abandon_create(name)
        core.drop_unused_sources()
        raise
    spec = core.result_spec(name)
    initial: pa.Table = flow.snapshot(view, weighted=True)
    try:
        results.create(spec, view_sql, initial, core.at.engine, replace=replace, reader=reader, request=request)
    except CatalogError:
        flow.drop_view(view)
        core.drop_unused_sources()
        raise
    log.info("view %s created (%d rows)", name, initial.num_rows)


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
    """Catalog for a first compile: engine relations, else the database's tables (recorded)."""

    def __init__(self, flow: IncrementalFlow, source, names: Names) -> None:
        self.flow = flow
        self.source = source
        self.names = names
        self.default_schema = names.default  # bare table names are this schema's (sql.build.Catalog)
        self.tables: dict[str, SourceTable] = {}

    def relation_columns(self, name: str):
        found = self.flow.relation_columns(name)
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
