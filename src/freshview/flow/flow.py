"""IncrementalFlow: sources, SQL views over them, atomic ticks, snapshots and watches.

A flow owns one state directory.  Its catalog (sources, views, step number)
lives in the same store as operator state, so a step commits catalog,
state and outputs in one transaction, and ``IncrementalFlow(state_dir=...)``
on an existing directory resumes exactly where the last commit left off.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import DeltaBatch, consolidate, to_arrow_delta
from freshview.circuit import Circuit, incrementalize, render
from freshview.errors import CatalogError, DeltaError, FreshviewError, StateError
from freshview.plan import nodes as pn
from freshview.plan.explain import render as render_plan
from freshview.runtime.delta import col_name
from freshview.runtime.executor import CircuitRunner
from freshview.runtime import state as _state
from freshview.schema import WEIGHT, TableSchema, schema_from_arrow, schema_from_ddl
from freshview.sql import build_plan

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$")
CATALOG_KEY = "catalog"


@dataclass
class ViewStep:
    rows_out: int = 0
    duration_ms: float = 0.0
    skipped: bool = False


@dataclass
class StepSummary:
    """What one tick did: rows in (consolidated), rows out (all views), time, per-view detail."""

    step: int
    rows_in: int
    rows_out: int
    duration_ms: float
    views: dict[str, ViewStep] = field(default_factory=dict)

    def __str__(self) -> str:
        changed = [n for n, v in self.views.items() if not v.skipped]
        return (f"step {self.step}: {self.rows_in} rows in, {self.rows_out} rows out, "
                f"{self.duration_ms:.0f} ms, views run: {', '.join(changed) or 'none'}")


@dataclass
class _View:
    name: str
    sql: str
    plan: pn.Node
    circuit: Circuit
    runner: CircuitRunner

    @property
    def columns(self) -> pn.Columns:
        return self.plan.columns


class Watch:
    """An iterator over a view's changes: one DeltaBatch per step in which it changed.

    Iteration blocks until the next change; it ends when the flow closes or
    ``timeout`` seconds pass without a change.  ``poll()`` returns what is
    pending without waiting.
    """

    def __init__(self, flow: "IncrementalFlow", view: str, timeout: float | None) -> None:
        self._flow = flow
        self.view = view
        self.timeout = timeout
        self._pending: list[DeltaBatch] = []
        self._cond = threading.Condition()
        self.closed = False

    def _push(self, batch: DeltaBatch) -> None:
        with self._cond:
            self._pending.append(batch)
            self._cond.notify_all()

    def _close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def poll(self) -> list[DeltaBatch]:
        with self._cond:
            out, self._pending = self._pending, []
            return out

    def __iter__(self) -> Iterator[DeltaBatch]:
        return self

    def __next__(self) -> DeltaBatch:
        with self._cond:
            if not self._pending and not self.closed:
                self._cond.wait_for(lambda: self._pending or self.closed, timeout=self.timeout)
            if self._pending:
                return self._pending.pop(0)
            raise StopIteration

    def close(self) -> None:
        """Stop receiving changes."""
        watches = self._flow._watches.get(self.view, [])
        if self in watches:
            watches.remove(self)
        self._close()


class IncrementalFlow:
    """Incrementally maintained SQL views over changing sources, executed on Spark.

    >>> flow = IncrementalFlow()  # doctest: +SKIP
    >>> flow.register_source("t", "id INT, v INT", primary_key=["id"])  # doctest: +SKIP
    """

    def __init__(self, spark: Any = None, state_dir: str | Path | None = None, *, cache_mb: int = 256) -> None:
        if spark is None:
            from freshview.runtime.spark import get_session

            spark = get_session()
        self.spark = spark
        self._tmp = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="freshview-")
            state_dir = self._tmp.name
        self.state_dir = Path(state_dir)
        self.store = _state.SqliteStateStore(self.state_dir, cache_mb=cache_mb)
        self._lock = threading.RLock()
        self._sources: dict[str, TableSchema] = {}
        self._views: dict[str, _View] = {}
        self._watches: dict[str, list[Watch]] = {}
        self._step = 0
        self._closed = False
        self._resume()

    # ------------------------------------------------------------------ catalog
    def _resume(self) -> None:
        data = self.store.get_meta(CATALOG_KEY)
        if not data:
            return
        if data.get("format") != 1:
            raise StateError(f"{self.state_dir} holds state of an unknown format")
        self._step = data["step"]
        for name, schema in data["sources"].items():
            self._sources[name] = TableSchema.from_json(schema)
        for name, sql in data["views"]:
            self._views[name] = self._compile(name, sql)

    def _save_catalog(self) -> None:
        self.store.set_meta(CATALOG_KEY, {
            "format": 1,
            "step": self._step,
            "sources": {n: s.to_json() for n, s in self._sources.items()},
            "views": [[v.name, v.sql] for v in self._views.values()],
        })

    @contextlib.contextmanager
    def _transaction(self, undo: Callable[[], Any] | None = None) -> Iterator[None]:
        """One atomic change of catalog and state; on any error, roll back and ``undo``."""
        self.store.begin()
        try:
            yield
            self._save_catalog()
            self.store.commit()
        except BaseException:
            self.store.rollback()
            if undo is not None:
                undo()
            raise

    def relation_columns(self, name: str):
        """Catalog protocol for the SQL front end."""
        if name in self._sources:
            return tuple((c.name, c.type) for c in self._sources[name].columns), False
        if name in self._views:
            return self._views[name].columns, True
        return None

    @property
    def sources(self) -> list[str]:
        return list(self._sources)

    @property
    def views(self) -> list[str]:
        return list(self._views)

    @property
    def step(self) -> int:
        return self._step

    def source_schema(self, name: str) -> TableSchema:
        if name not in self._sources:
            raise CatalogError(f"unknown source {name!r}")
        return self._sources[name]

    def view_columns(self, name: str) -> pn.Columns:
        return self._view(name).columns

    def view_plan(self, name: str) -> pn.Node:
        """The view's logical plan (after pushdown and pruning)."""
        return self._view(name).plan

    def readers(self, name: str) -> list[str]:
        """Views that read the source or view ``name`` directly, in registration order."""
        return [v.name for v in self._views.values() if name in v.circuit.sources and v.name != name]

    # ------------------------------------------------------------------ sources
    def register_source(self, name: str, schema: str | pa.Schema | TableSchema,
                        primary_key: list[str] | tuple[str, ...] | None = None) -> None:
        """Declare a source table: a DDL column list, a pyarrow.Schema or a TableSchema."""
        with self._lock:
            self._check_open()
            _check_name(name, "source")
            pk = tuple(k.lower() if isinstance(schema, str) else k for k in (primary_key or ()))
            if isinstance(schema, TableSchema):
                parsed = TableSchema(schema.columns, pk or schema.primary_key)
            elif isinstance(schema, pa.Schema):
                parsed = schema_from_arrow(schema, pk)
            elif isinstance(schema, str):
                parsed = schema_from_ddl(schema, pk)
            else:
                raise CatalogError(f"a source schema is a string, pyarrow.Schema or TableSchema, not {type(schema).__name__}")
            if name in self._sources:
                if self._sources[name] == parsed:
                    return  # resumed flow: same declaration
                raise CatalogError(f"source {name!r} is already registered with a different schema")
            if name in self._views:
                raise CatalogError(f"{name!r} is already a view")
            with self._transaction(undo=lambda: self._sources.pop(name, None)):
                self.store.ensure_arrangement(_source_state(name), _source_row_schema(parsed),
                                              [col_name(parsed.names.index(k)) for k in parsed.primary_key])
                self._sources[name] = parsed

    # ------------------------------------------------------------------ views
    def _compile(self, name: str, sql: str) -> _View:
        plan = build_plan(sql, self)
        circuit = incrementalize(name, plan)
        return _View(name, sql, plan, circuit, CircuitRunner(circuit, self.spark, self.store))

    def register_view(self, name: str, sql: str) -> None:
        """Compile ``sql`` into an incremental circuit and compute its current result."""
        with self._lock:
            self._check_open()
            _check_name(name, "view")
            if name in self._views:
                if self._views[name].sql == sql:
                    return
                raise CatalogError(f"view {name!r} already exists with a different definition; drop_view it first")
            if name in self._sources:
                raise CatalogError(f"{name!r} is already a source")
            view = self._compile(name, sql)
            with self._transaction(undo=lambda: self._views.pop(name, None)):
                self.store.ensure_arrangement(view.circuit.output_state, _row_schema(view.columns), [])
                out = view.runner.step(self._current_contents, force=True)
                if out is not None and out.num_rows:
                    self.store.apply(view.circuit.output_state, out)
                self._views[name] = view

    def drop_view(self, name: str) -> None:
        with self._lock:
            view = self._view(name)
            users = self.readers(name)
            if users:
                raise CatalogError(f"cannot drop view {name!r}: views {', '.join(users)} read it")
            with self._transaction(undo=lambda: self._views.__setitem__(name, view)):
                for arr in self.store.list_arrangements(f"view/{name}/"):
                    self.store.drop_arrangement(arr)
                del self._views[name]
            for w in self._watches.pop(name, []):
                w._close()

    def drop_source(self, name: str) -> None:
        """Forget a source and its state (refused while a view reads it)."""
        with self._lock:
            schema = self.source_schema(name)
            users = self.readers(name)
            if users:
                raise CatalogError(f"cannot drop source {name!r}: views {', '.join(users)} read it")
            with self._transaction(undo=lambda: self._sources.__setitem__(name, schema)):
                self.store.drop_arrangement(_source_state(name))
                del self._sources[name]

    # ------------------------------------------------------------------ application metadata
    def get_meta(self, key: str, default: Any = None) -> Any:
        """A JSON value a connector keeps with the engine's state (e.g. its source position)."""
        with self._lock:
            return self.store.get_meta(f"app/{key}", default)

    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON value; inside ``before_commit`` it commits with the step, else at once."""
        with self._lock:
            if self.store.in_transaction:
                self.store.set_meta(f"app/{key}", value)
            else:
                with self._transaction():
                    self.store.set_meta(f"app/{key}", value)

    def _current_contents(self, relation: str) -> pa.Table | None:
        if relation in self._sources:
            return self.store.scan(_source_state(relation))
        return self.store.scan(self._views[relation].circuit.output_state)

    # ------------------------------------------------------------------ ticks
    def tick(self, source: str | Mapping[str, Any], delta: Any = None, *,
             before_commit: Callable[[dict[str, pa.Table]], None] | None = None) -> StepSummary:
        """Apply one atomic step: ``tick("orders", delta)`` or ``tick({"a": d1, "b": d2})``.

        ``before_commit(changes)`` runs inside the step's transaction with each
        changed view's delta (named columns + ``_weight``); if it raises, the
        step is rolled back.  A connector uses it to write results and its
        source position elsewhere before the engine's state commits, so the two
        can never disagree by more than one replayable step.  When a view's
        operator fails, the error's ``view`` attribute names the view.
        """
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            if isinstance(source, str):
                if delta is None:
                    raise DeltaError("tick(source, delta) needs a delta")
                changes = {source: delta}
            elif isinstance(source, Mapping):
                if delta is not None:
                    raise DeltaError("tick(mapping) takes no second argument")
                changes = dict(source)
            else:
                raise DeltaError("tick takes a source name and a delta, or a mapping of source name to delta")
            deltas: dict[str, pa.Table] = {}
            for name, data in changes.items():
                schema = self.source_schema(name)
                table = to_arrow_delta(data, schema.arrow(with_weight=True))
                table = consolidate(table)
                deltas[name] = table.rename_columns([col_name(i) for i in range(len(schema.columns))] + [WEIGHT])
            step = self._step + 1
            summary = StepSummary(step, sum(t.num_rows for t in deltas.values()), 0, 0.0)
            outputs: dict[str, pa.Table] = {}
            previous_step = self._step
            with self._transaction(undo=lambda: setattr(self, "_step", previous_step)):
                for name, table in deltas.items():
                    if table.num_rows:
                        try:
                            self._apply_source(name, table)
                        except FreshviewError as exc:
                            exc.source = name  # type: ignore[attr-defined]
                            raise
                changed: dict[str, pa.Table] = {n: t for n, t in deltas.items() if t.num_rows}
                for view in self._views.values():
                    vt = time.perf_counter()
                    if not (view.circuit.sources & changed.keys()):
                        summary.views[view.name] = ViewStep(skipped=True)
                        continue
                    try:
                        out = view.runner.step(changed.get)
                    except FreshviewError as exc:
                        exc.view = view.name  # type: ignore[attr-defined]
                        raise
                    rows = 0
                    if out is not None and out.num_rows:
                        self.store.apply(view.circuit.output_state, out)
                        changed[view.name] = out
                        outputs[view.name] = out
                        rows = out.num_rows
                    summary.views[view.name] = ViewStep(rows, (time.perf_counter() - vt) * 1000)
                    summary.rows_out += rows
                self._step = step
                if before_commit is not None:
                    before_commit({n: self._named(n, t) for n, t in outputs.items()})
            summary.duration_ms = (time.perf_counter() - started) * 1000
            for name, out in outputs.items():
                batch = None
                for w in list(self._watches.get(name, [])):
                    batch = batch or DeltaBatch(self._named(name, out), step)
                    w._push(batch)
            return summary

    def _apply_source(self, name: str, table: pa.Table) -> None:
        schema = self._sources[name]
        result = self.store.apply(_source_state(name), table)
        negative = result.filter(pc.less(result.column(WEIGHT), 0))
        if negative.num_rows:
            row = _row_text(negative, schema)
            raise DeltaError(f"source {name!r}: delete of a row that is not present: {row}")
        if schema.primary_key:
            keys = [col_name(schema.names.index(k)) for k in schema.primary_key]
            nulls = [k for k, c in zip(schema.primary_key, keys) if table.column(c).null_count]
            if nulls:
                raise DeltaError(f"source {name!r}: primary key column {nulls[0]!r} is NULL")
            live = self.store.lookup(_source_state(name), table.select(keys).group_by(keys).aggregate([]))
            if live.num_rows:
                counts = live.group_by(keys).aggregate([(WEIGHT, "sum")])
                dup = counts.filter(pc.greater(counts.column(f"{WEIGHT}_sum"), 1))
                if dup.num_rows:
                    key = ", ".join(f"{k}={dup.column(c)[0].as_py()!r}" for k, c in zip(schema.primary_key, keys))
                    raise DeltaError(f"source {name!r}: duplicate primary key ({key}); "
                                     "an update is the old row at -1 and the new row at +1")

    # ------------------------------------------------------------------ reading
    def snapshot(self, name: str, weighted: bool = False) -> pa.Table:
        """Current rows of a view (or source); a row present n times appears n times.

        ``weighted=True`` returns each distinct row once with its multiplicity
        in ``_weight`` instead (a delta that builds the view from nothing).
        """
        with self._lock:
            if name in self._views:
                table = self.store.scan(self._views[name].circuit.output_state)
                columns = self._views[name].columns
            elif name in self._sources:
                table = self.store.scan(_source_state(name))
                columns = tuple((c.name, c.type) for c in self._sources[name].columns)
            else:
                raise CatalogError(f"unknown view {name!r}")
            if weighted:
                out = table.select([col_name(i) for i in range(len(columns))] + [WEIGHT])
                return out.rename_columns([n for n, _ in columns] + [WEIGHT]).cast(
                    pa.schema([pa.field(n, t.arrow) for n, t in columns] + [pa.field(WEIGHT, pa.int64())]))
            weights = table.column(WEIGHT).to_numpy()
            if len(weights) and (weights != 1).any():
                table = table.take(pa.array(np.repeat(np.arange(len(weights)), np.maximum(weights, 0))))
            out = table.select([col_name(i) for i in range(len(columns))])
            return out.rename_columns([n for n, _ in columns]).cast(
                pa.schema([pa.field(n, t.arrow) for n, t in columns]))

    def source_rows(self, name: str, keys: pa.Table) -> pa.Table:
        """Current rows of a keyed source whose primary key is in ``keys`` (index lookups).

        A change stream that carries only the key of a deleted or updated row
        (PostgreSQL's REPLICA IDENTITY DEFAULT) takes the old row from here.
        """
        with self._lock:
            schema = self.source_schema(name)
            if not schema.primary_key:
                raise CatalogError(f"source {name!r} has no primary key to look rows up by")
            renamed = keys.select(list(schema.primary_key)).rename_columns(
                [col_name(schema.names.index(k)) for k in schema.primary_key])
            found = self.store.lookup(_source_state(name), renamed)
            out = found.select([col_name(i) for i in range(len(schema.columns))])
            return out.rename_columns(schema.names).cast(schema.arrow())

    def watch_output(self, name: str, timeout: float | None = None) -> Watch:
        """Subscribe to a view's changes from the next step on (see ``Watch``)."""
        with self._lock:
            self._view(name)
            w = Watch(self, name, timeout)
            self._watches.setdefault(name, []).append(w)
            return w

    def explain(self, name: str) -> str:
        with self._lock:
            view = self._view(name)
            counts = {a: self.store.count(a) for a in self.store.list_arrangements(f"view/{name}/")}
            cols = ", ".join(f"{n} {t}" for n, t in view.columns)
            return "\n".join([
                f"view {name} ({cols})",
                "logical plan (after pushdown and pruning):",
                _indent(render_plan(view.plan)),
                "incremental circuit:",
                render(view.circuit, counts),
            ])

    def _named(self, name: str, table: pa.Table) -> pa.Table:
        columns = self._views[name].columns
        return table.rename_columns([n for n, _ in columns] + [WEIGHT])

    def _view(self, name: str) -> _View:
        if name not in self._views:
            raise CatalogError(f"unknown view {name!r}")
        return self._views[name]

    def _check_open(self) -> None:
        if self._closed:
            raise FreshviewError("this IncrementalFlow is closed")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for watches in self._watches.values():
                for w in watches:
                    w._close()
            self.store.close()
            if self._tmp is not None:
                self._tmp.cleanup()

    def __enter__(self) -> "IncrementalFlow":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _source_state(name: str) -> str:
    return f"source/{name}"


def _source_row_schema(schema: TableSchema) -> pa.Schema:
    return pa.schema([pa.field(col_name(i), c.type.arrow) for i, c in enumerate(schema.columns)])


def _row_schema(columns: pn.Columns) -> pa.Schema:
    return pa.schema([pa.field(col_name(i), t.arrow) for i, (_, t) in enumerate(columns)])


def _row_text(table: pa.Table, schema: TableSchema) -> str:
    row = table.slice(0, 1).to_pylist()[0]
    return "(" + ", ".join(f"{c.name}={row[col_name(i)]!r}" for i, c in enumerate(schema.columns)) + ")"


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise CatalogError(f"invalid {what} name {name!r}: use letters, digits and _ (optionally schema.name)")


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
