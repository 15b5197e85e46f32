"""IncrementalFlow: sources, SQL views over them, atomic ticks, snapshots and watches.

A flow owns one state directory.  Its catalog (sources, views, step number)
lives in the same store as operator state, so a step commits catalog,
state and outputs in one transaction, and ``IncrementalFlow(state_dir=...)``
on an existing directory resumes exactly where the last commit left off.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra import hashing
from freshview.algebra.batch import DeltaBatch, consolidate, negate, repeat_by_weight, to_arrow_delta
from freshview.circuit import Circuit, incrementalize, render
from freshview.errors import CatalogError, DeltaError, FreshviewError, StateError, StateTooNew
from freshview.flow import checkpoint
from freshview.flow import dedup as dedup_module
from freshview.flow.vector_sinks import VectorSinkHandle, VectorSinks
from freshview.formats import debezium
from freshview.plan import nodes as pn
from freshview.plan import statistics as plan_statistics
from freshview.plan import vector as vector_plan
from freshview.plan.explain import render as render_plan
from freshview.plan.shape import result_key
from freshview.runtime.cost import MODES, Choice, CostModel, choose
from freshview.runtime import ttl
from freshview.runtime.executor import CircuitRunner
from freshview.runtime.kernels import Kernels
from freshview.runtime.kernels.arrow import ArrowKernels
from freshview.runtime.relation import col_name
from freshview.runtime.state.layout import Layout
from freshview.runtime.state.store import SpineStateStore
from freshview.schema import WEIGHT, TableSchema, array_length_mismatch, schema_from_arrow, schema_from_ddl
from freshview.sql import build_plan
from freshview.sql.dialect import get_dialect

# A name or schema.name; a part is any text without '.' or NUL (as a quoted SQL identifier: FROM "Big Totals").
_NAME = re.compile(r"^[^.\x00]+(\.[^.\x00]+)?$")
CATALOG_KEY = "catalog"
CATALOG_FORMAT = 3  # 2: state in a SpineStateStore; 3: each view with the statistics its join order was chosen with
METRICS_KEY = "metrics"  # the flow's counters (``IncrementalFlow.metrics``), committed with each step
_COUNTERS = ("rows_in_total", "rows_out_total", "dedup_skipped_total", "dedup_dropped_total")


@dataclass
class ViewStep:
    """One view in one step: rows out, time, and which executor ran it and why."""

    rows_out: int = 0
    duration_ms: float = 0.0
    skipped: bool = False
    executor: str | None = None  # "local" | "spark"; None when skipped
    reason: str = ""
    rows_in: int = 0


@dataclass
class StepSummary:
    """What one tick did: rows in (consolidated), rows out (all views), time, per-view detail."""

    step: int
    rows_in: int
    rows_out: int
    duration_ms: float
    views: dict[str, ViewStep] = field(default_factory=dict)
    deduplicated: list[str] = field(default_factory=list)  # sources whose batch was skipped as already seen
    evicted: int = 0  # state TTL: keys evicted at the start of the step (sources, joins, aggregates)
    late_deletes: int = 0  # state TTL: deletes of source rows the copy no longer held (evicted before)

    def __str__(self) -> str:
        changed = [n for n, v in self.views.items() if not v.skipped]
        extra = f", duplicate batches skipped: {', '.join(self.deduplicated)}" if self.deduplicated else ""
        extra += f", {self.evicted} keys evicted" if self.evicted else ""
        extra += f", {self.late_deletes} deletes of evicted rows" if self.late_deletes else ""
        return (f"step {self.step}: {self.rows_in} rows in, {self.rows_out} rows out, "
                f"{self.duration_ms:.0f} ms, views run: {', '.join(changed) or 'none'}{extra}")


@dataclass
class _View:
    name: str
    sql: str
    plan: pn.Node
    circuit: Circuit
    runner: CircuitRunner
    cost: CostModel = field(default_factory=CostModel)
    last: Choice | None = None
    statistics: dict[str, plan_statistics.RelationStats] = field(default_factory=dict)  # its plan's (catalog)

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


class DebeziumEncoder:
    """A view's changes as Debezium messages (dicts), one per changed result key (``formats.debezium``).

    A view whose rows may repeat (key: all columns + ``_fv_count``) needs each row's multiplicity after
    every step: ``counts`` starts from the view's rows when the encoder is made and is kept up by
    ``encode``, which must therefore see every step's change, in order.
    """

    def __init__(self, view: str, columns: pn.Columns, key: Sequence[int], counts: dict[tuple, int] | None,
                 decimal_handling: str, schemas: bool = True) -> None:
        self.view, self.columns, self.key, self.counts = view, columns, key, counts
        self.decimal_handling, self.schemas = decimal_handling, schemas

    def encode(self, table: pa.Table, step: int, ts_ms: int | None = None,
               source_ts_ms: int | None = None) -> list[dict]:
        counts = self.counts

        def counts_after(rows: list[tuple], weights: list[int]) -> list[int]:
            out = []
            for row, w in zip(rows, weights):
                k = debezium.row_key(row)
                counts[k] = n = counts.get(k, 0) + w  # type: ignore[index]
                if n <= 0:
                    del counts[k]  # type: ignore[union-attr]
                out.append(n)
            return out

        return debezium.encode(table, self.columns, self.key, counts is not None, self.view, step,
                               int(time.time() * 1000) if ts_ms is None else ts_ms,
                               counts_after=counts_after if counts is not None else None,
                               decimal_handling=self.decimal_handling, source_ts_ms=source_ts_ms,
                               schemas=self.schemas)


class DebeziumWatch(Watch):
    """A ``Watch`` whose items are Debezium messages (dicts), one per changed result key."""

    def __init__(self, flow: "IncrementalFlow", view: str, timeout: float | None, encoder: DebeziumEncoder) -> None:
        super().__init__(flow, view, timeout)
        self.encoder = encoder

    def _push(self, batch: DeltaBatch) -> None:
        messages = self.encoder.encode(batch.table, batch.step)
        with self._cond:
            self._pending.extend(messages)
            self._cond.notify_all()


class IncrementalFlow:
    """Incrementally maintained SQL views over changing sources.

    ``execution`` says where steps run: ``"auto"`` (default) picks, per step
    and per view, the in-process executor or Spark with a cost model fed by
    the step times it measures; ``"local"`` runs every step in-process;
    ``"spark"`` runs every step on Spark.  A view's first computation runs on
    Spark (``spark``, or a local session started when first needed), except over
    empty sources or with ``first_computation="local"``: in-process.

    ``state_ttl`` (seconds, or text such as ``"1 day"``; default None: exact
    results, state kept forever) evicts state keys untouched for longer:
    source rows by primary key, join keys, the groups of a view's top
    aggregate (``runtime.ttl``).  Eviction is silent (the view keeps its
    rows); a late change to an evicted key is treated as new (a late delete
    reaches the views, whose operators drop what they no longer hold), and a
    re-started group's row replaces the one from before its eviction.

    >>> flow = IncrementalFlow()  # doctest: +SKIP
    >>> flow.register_source("t", "id INT, v INT", primary_key=["id"])  # doctest: +SKIP
    """

    _clock = staticmethod(time.time)  # the wall clock of state_ttl (tests set a fake one on the flow)

    def __init__(self, spark: Any = None, state_dir: str | Path | None = None, *, cache_mb: int = 256,
                 execution: str = "auto", dialect: str = "postgres", default_schema: str = "public",
                 flush_interval: float | str | None = None, state_ttl: float | str | None = None,
                 first_computation: str = "spark") -> None:
        if execution not in MODES:
            raise FreshviewError(f"execution must be one of {', '.join(MODES)}, not {execution!r}")
        self.execution = execution
        if first_computation not in ("spark", "local"):
            raise FreshviewError(f"first_computation must be 'spark' or 'local', not {first_computation!r}")
        self.first_computation = first_computation  # "local": in-process (a shard on an executor has no Spark)
        self.default_schema = default_schema  # ``<default_schema>.x`` in view SQL is the relation ``x``
        try:
            self.dialect = get_dialect(dialect)  # how view SQL is read and computed (sql/dialect.py)
        except ValueError as err:
            raise FreshviewError(str(err)) from None
        self._spark = spark
        self._kernels: dict[str, Kernels] = {"local": ArrowKernels()}
        self._tmp = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="freshview-")
            state_dir = self._tmp.name
        self.state_dir = Path(state_dir)
        self._cache_mb = cache_mb
        self.store = SpineStateStore(self.state_dir, cache_mb=cache_mb)
        self._lock = threading.RLock()
        self._sources: dict[str, TableSchema] = {}
        self._dedup: dict[str, int] = {}  # source -> seen-set capacity, for sources registered with dedup=True
        self._metrics: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        self._views: dict[str, _View] = {}
        self._watches: dict[str, list[Watch]] = {}
        self._step = 0
        self._closed = False
        # Output held back between flushes (``flush_interval``): per view, its consolidated change since
        # it was last emitted, in the arrangement ``view/<name>/pending`` (committed with each step).
        self.flush_interval = parse_interval(flush_interval)
        self._last_flush: dict[str, float] = {}
        self._held: set[str] = set()  # views with a held-back change
        # State TTL: keys untouched for longer are evicted (``runtime.ttl``; bookkeeping in the store).
        self.state_ttl = parse_interval(state_ttl)
        if self.state_ttl == 0:
            raise FreshviewError("state_ttl must be longer than 0 (None keeps state forever)")
        self._source_owners: dict[str, ttl.TtlOwner] = {}
        self._ttl_marked = False  # a step without a TTL marked existing bookkeeping stale
        self._vector_sinks = VectorSinks()  # attach_vector_sink
        try:
            self._resume()
            self._held = {v for v in self._views if self.store.has_arrangement(f"view/{v}/pending")
                          and self.store.count(f"view/{v}/pending")}
            self._sync_ttl()
        except BaseException:
            self.store.close()
            raise

    @property
    def spark(self) -> Any:
        """The SparkSession of first computations and Spark steps (started on first use)."""
        if self._spark is None:
            from freshview.runtime.spark import get_session

            self._spark = get_session()
        return self._spark

    def kernels(self, executor: str) -> Kernels:
        """The kernels of ``executor``: "local", "spark", or "bulk" (first computations, on Spark)."""
        if executor not in self._kernels:
            from freshview.runtime.kernels.spark import BulkKernels, SparkKernels

            self._kernels[executor] = (BulkKernels if executor == "bulk" else SparkKernels)(self.spark)
        return self._kernels[executor]

    # ------------------------------------------------------------------ catalog
    def _resume(self) -> None:
        data = self.store.get_meta(CATALOG_KEY)
        if not data:
            return
        if isinstance(data.get("format"), int) and data["format"] > CATALOG_FORMAT:
            raise StateTooNew(f"{self.state_dir} holds the catalog of a newer freshview (format {data['format']}; "
                              f"this one reads {CATALOG_FORMAT}): run that version, or point --state-dir elsewhere")
        if data.get("format") != CATALOG_FORMAT:
            raise StateError(f"{self.state_dir} holds state of an unknown format")
        self._step = data["step"]
        for name, schema in data["sources"].items():
            self._sources[name] = TableSchema.from_json(schema)
        self._dedup = {name: int(capacity) for name, capacity in data.get("dedup", {}).items()}
        self._metrics = {**dict.fromkeys(_COUNTERS, 0), **self.store.get_meta(METRICS_KEY, {})}
        for name, sql, statistics in data["views"]:
            self._views[name] = self._compile(name, sql, plan_statistics.from_json(statistics))

    def _save_catalog(self) -> None:
        self.store.set_meta(CATALOG_KEY, {
            "format": CATALOG_FORMAT,
            "step": self._step,
            "sources": {n: s.to_json() for n, s in self._sources.items()},
            "dedup": dict(self._dedup),
            "views": [[v.name, v.sql, plan_statistics.to_json(v.statistics)] for v in self._views.values()],
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
                        primary_key: list[str] | tuple[str, ...] | None = None, *, dedup: bool = False,
                        dedup_capacity: int = dedup_module.DEFAULT_CAPACITY) -> None:
        """Declare a source table: a DDL column list, a pyarrow.Schema or a TableSchema.

        ``dedup=True``: each batch ticked into this source is hashed over its content (its
        consolidated rows and weights, in any order), and a batch identical to one already applied
        is skipped (``StepSummary.deduplicated``), so an at-least-once feed is applied exactly once.
        The source keeps the digests of its last ``dedup_capacity`` batches (16 bytes and a sequence
        number each, in the flow's state: they survive a restart and travel with checkpoints); older
        ones are dropped (``metrics()["dedup_dropped_total"]``).  A batch genuinely sent twice is
        skipped too: use it for feeds where identical batches are re-deliveries (``flow/dedup.py``).
        """
        with self._lock:
            self._check_open()
            _check_name(name, "source")
            if not isinstance(dedup, bool):
                raise CatalogError(f"dedup must be True or False, not {dedup!r}")
            try:
                capacity = dedup_module.check_capacity(dedup_capacity) if dedup else None
            except ValueError as exc:
                raise CatalogError(str(exc)) from None
            parsed = source_schema_of(schema, primary_key)
            if name in self._sources:
                if self._sources[name] != parsed:
                    raise CatalogError(f"source {name!r} is already registered with a different schema")
                if self._dedup.get(name) != capacity:
                    raise CatalogError(f"source {name!r} is already registered with "
                                       f"{_dedup_text(self._dedup.get(name))}, not {_dedup_text(capacity)}")
                return  # resumed flow: same declaration
            if name in self._views:
                raise CatalogError(f"{name!r} is already a view")

            def undo() -> None:
                self._sources.pop(name, None)
                self._dedup.pop(name, None)
            with self._transaction(undo=undo):
                # Keyed by the primary key, or by the whole row: a change's rows are found by lookups.
                key = [col_name(parsed.names.index(k)) for k in parsed.primary_key] or \
                    [col_name(i) for i in range(len(parsed.columns))]
                self.store.ensure_arrangement(_source_state(name), Layout(_source_row_schema(parsed), tuple(key)))
                if capacity is not None:
                    # The seen set: digests to look batches up by, and the same by sequence number for eviction.
                    self.store.ensure_arrangement(_seen_state(name), SEEN_LAYOUT)
                    self.store.ensure_arrangement(_seen_order_state(name), SEEN_ORDER_LAYOUT)
                    self._dedup[name] = capacity
                self._sources[name] = parsed
                if self.state_ttl is not None:
                    self._source_owner(name).index.ensure(self.store)

    # ------------------------------------------------------------------ views
    def _compile(self, name: str, sql: str, statistics: plan_statistics.Statistics | None = None) -> _View:
        """``statistics``: the relations' sizes to plan with (a resumed view's, from the catalog, so it gets
        the plan its state was built for); None: the state's now, as the planner asks for them."""
        used = plan_statistics.Observed(self._relation_statistics) if statistics is None else statistics
        if vector_plan.is_vector_definition(sql):  # register_vector_view's definition, not SQL
            plan = vector_plan.build(vector_plan.VectorDefinition.from_text(sql), self._sources.get)
        else:
            plan = build_plan(sql, self, self.dialect, statistics=used)
        circuit = incrementalize(name, plan)
        return _View(name, sql, plan, circuit, CircuitRunner(circuit, self.store), statistics=dict(used))

    def _relation_statistics(self, name: str) -> plan_statistics.RelationStats | None:
        """A source's or view's rows in state (and a source's primary key), for the planner."""
        if name in self._sources:
            schema = self._sources[name]
            keys = (schema.primary_key,) if schema.primary_key else ()
            return plan_statistics.RelationStats(self.store.count(_source_state(name)), keys)
        state = self._views[name].circuit.output_state if name in self._views else None
        if state is not None and self.store.has_arrangement(state):  # (not while registered with it)
            return plan_statistics.RelationStats(self.store.count(state))
        return None

    def _output_layout(self, view: _View) -> Layout:
        """The layout of a view's rows: keyed by its GROUP BY columns when its top aggregate evicts under
        a TTL (a re-started group's row is found by key and replaced), else by nothing."""
        key = view.runner.output_key if self.state_ttl is not None else None
        return Layout(_row_schema(view.columns), tuple(col_name(i) for i in key or ()))

    def register_view(self, name: str, sql: str) -> None:
        """Compile ``sql`` into an incremental circuit and compute its current result (on Spark)."""
        self.register_views([(name, sql)])

    def register_views(self, views: Sequence[tuple[str, str]]) -> None:
        """Register several views at once, in order (a later one may read an earlier one).

        All are compiled before any is computed (an error in any registers
        none), their first computations run in one transaction, and each
        source they read is read from state once for all of them.
        """
        with self._lock:
            self._check_open()
            new: list[_View] = []
            try:
                for name, sql in views:
                    _check_name(name, "view")
                    if name in self._views:
                        if self._views[name].sql == sql and all(v.name != name for v in new):
                            continue  # registered before, the same: nothing to do
                        raise CatalogError(f"view {name!r} already exists with a different definition; "
                                           "drop_view it first")
                    if name in self._sources:
                        raise CatalogError(f"{name!r} is already a source")
                    view = self._compile(name, sql)
                    new.append(view)
                    self._views[name] = view  # visible to the next views' SQL (views over views)
            except BaseException:
                for view in new:
                    self._views.pop(view.name, None)
                raise
            if not new:
                return
            contents: dict[str, pa.Table] = {}  # each input read once for all the new views

            def current(relation: str) -> pa.Table | None:
                if relation not in contents:
                    contents[relation] = self._current_contents(relation)
                return contents[relation]

            def undo() -> None:
                for view in new:
                    self._views.pop(view.name, None)

            # Over empty sources (a pipeline's start) the first computation is a step from nothing: in-process.
            # so is a vector view's (numpy under either executor).
            empty = self.first_computation == "local" or all(
                self.store.count(_source_state(s)) == 0 for s in self._sources) or \
                all(isinstance(v.plan, vector_plan.VectorSearch) for v in new)
            tick = self._tick_ttl()
            with self._transaction(undo=undo):
                bulk = self.kernels("local" if empty else "bulk")
                try:
                    for view in new:
                        self.store.ensure_arrangement(view.circuit.output_state, self._output_layout(view))
                        if tick is not None:
                            for owner in view.runner.ttl_owners().values():
                                owner.index.ensure(self.store)
                        out = view.runner.step(current, bulk, force=True, tick=tick)
                        if out is not None and out.num_rows:
                            self.store.load(view.circuit.output_state, out)
                            contents[view.name] = out
                finally:
                    if not empty:
                        bulk.finish()  # type: ignore[attr-defined]

    def register_vector_view(self, name: str, *, source: str, vector: str, k: int, metric: str = "cosine",
                             queries: str | None = None, query: Sequence[float] | None = None,
                             payload: Sequence[str] | None = None, query_vector: str | None = None,
                             index: str | None = None) -> None:
        """A view of the ``k`` nearest rows of ``source`` by its ``vector`` column: for each row of the
        ``queries`` source (``query_vector``, default the column of the same name), or for one fixed
        ``query`` vector.  Columns: the queries' primary key, ``rank`` (1..k), ``payload`` (default the
        source's primary key) and ``distance`` (``metric``: cosine | l2 | inner_product, pgvector's
        distances); ties break by the source's primary key; NULL vectors are ignored.  Maintained
        incrementally like any view (``runtime/operators/vector.py``)."""
        definition = vector_plan.define(source, vector, k, metric, queries, query, payload, query_vector, index)
        self.register_views([(name, definition.text())])

    def drop_view(self, name: str) -> None:
        with self._lock:
            view = self._view(name)
            users = self.readers(name)
            if users:
                raise CatalogError(f"cannot drop view {name!r}: views {', '.join(users)} read it")
            with self._transaction(undo=lambda: self._views.__setitem__(name, view)):
                for arr in self.store.list_arrangements(f"view/{name}/"):
                    self.store.drop_arrangement(arr)
                ttl.forget(self.store, view.runner.ttl_owners())
                del self._views[name]
            for w in self._watches.pop(name, []):
                w._close()
            self._vector_sinks.detach_all(name)

    def drop_source(self, name: str) -> None:
        """Forget a source and its state (refused while a view reads it)."""
        with self._lock:
            schema = self.source_schema(name)
            users = self.readers(name)
            if users:
                raise CatalogError(f"cannot drop source {name!r}: views {', '.join(users)} read it")
            capacity = self._dedup.get(name)

            def undo() -> None:
                self._sources[name] = schema
                if capacity is not None:
                    self._dedup[name] = capacity
            with self._transaction(undo=undo):
                index = self._source_owner(name).index  # (reads the copy's layout: before it goes)
                self.store.drop_arrangement(_source_state(name))
                for state in (_seen_state(name), _seen_order_state(name)):
                    if self.store.has_arrangement(state):
                        self.store.drop_arrangement(state)
                self.store.delete_meta(_seen_meta(name))
                for arr in (index.last, index.bucket):
                    if self.store.has_arrangement(arr):
                        self.store.drop_arrangement(arr)
                ttl.forget(self.store, [index.owner])
                del self._sources[name]
                self._dedup.pop(name, None)
            self._source_owners.pop(name, None)
            self._vector_sinks.detach_all(name)

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
            digests: dict[str, bytes] = {}
            for name, data in changes.items():
                deltas[name] = table = self._source_delta(name, data)
                if name in self._dedup and table.num_rows:  # (an empty batch changes nothing: never skipped)
                    digests[name] = dedup_module.digest(table)
            return self._run_step(deltas, digests, before_commit, started)

    def _source_delta(self, name: str, data: Any) -> pa.Table:
        """A source's change as the store's consolidated rows (``c0 .. cn`` + ``_weight``)."""
        schema = self.source_schema(name)
        table = consolidate(to_arrow_delta(data, schema.arrow(with_weight=True)))
        return table.rename_columns([col_name(i) for i in range(len(schema.columns))] + [WEIGHT])

    def _run_step(self, deltas: dict[str, pa.Table], digests: dict[str, bytes],
                  before_commit: Callable[[dict[str, pa.Table]], None] | None, started: float) -> StepSummary:
        """One step of consolidated source changes; a source whose batch digest is in ``digests`` and
        already seen is skipped (its digest is recorded otherwise)."""
        step = self._step + 1
        outputs: dict[str, pa.Table] = {}
        previous = (self._step, set(self._held), dict(self._last_flush), dict(self._metrics), self._ttl_marked)
        tick = self._tick_ttl()

        def undo() -> None:
            self._step, self._held, self._last_flush, self._metrics, self._ttl_marked = previous
        with self._transaction(undo=undo):
            skipped, dropped = self._deduplicate(digests)
            for name in skipped:
                deltas[name] = deltas[name].slice(0, 0)
            summary = StepSummary(step, sum(t.num_rows for t in deltas.values()), 0, 0.0, deduplicated=skipped)
            if tick is not None:  # first: a change to a key past the TTL meets no state (a new key)
                summary.evicted = sum(o.expire(self.store, tick) for o in self._ttl_owners().values())
            elif not self._ttl_marked:
                ttl.mark_stale(self.store)
                self._ttl_marked = True
            for name, table in deltas.items():
                if table.num_rows:
                    try:
                        summary.late_deletes += self._apply_source(name, table, tick)
                    except FreshviewError as exc:
                        exc.source = name  # type: ignore[attr-defined]
                        raise
            changed: dict[str, pa.Table] = {n: t for n, t in deltas.items() if t.num_rows}
            for view in self._views.values():
                vt = time.perf_counter()
                reads = view.circuit.sources & changed.keys()
                if not reads:
                    summary.views[view.name] = ViewStep(skipped=True)
                    continue
                rows_in = sum(changed[r].num_rows for r in reads)
                choice = view.last = choose(self.execution, rows_in, view.cost)
                try:
                    out = view.runner.step(changed.get, self.kernels(choice.executor), tick=tick)
                except FreshviewError as exc:
                    exc.view = view.name  # type: ignore[attr-defined]
                    raise
                if tick is not None:
                    out = self._replace_recreated(view, out)
                rows = 0
                if out is not None and out.num_rows:
                    self.store.apply(view.circuit.output_state, out)
                    changed[view.name] = out
                    outputs[view.name] = out
                    rows = out.num_rows
                ms = (time.perf_counter() - vt) * 1000
                view.cost.observe(choice.executor, rows_in, ms)
                summary.views[view.name] = ViewStep(rows, ms, False, choice.executor, choice.reason, rows_in)
                summary.rows_out += rows
            self._step = step
            self._count(rows_in_total=summary.rows_in, rows_out_total=summary.rows_out,
                        dedup_skipped_total=len(skipped), dedup_dropped_total=dropped)
            if self.flush_interval is not None:
                outputs = self._hold(outputs, force=False)
            if before_commit is not None:
                before_commit({n: self._named(n, t) for n, t in outputs.items()})
        summary.duration_ms = (time.perf_counter() - started) * 1000
        self._publish(outputs, step)
        for name in self._vector_sinks.handles.keys() & deltas.keys():  # sources' vector sinks
            self._vector_sinks.publish(name, self._source_named(name, deltas[name]), step)
        return summary

    # ------------------------------------------------------------------ dedup and metrics
    def _seen(self, source: str, digest: bytes) -> bool:
        """Whether ``digest`` is in the source's seen set (one lookup by digest)."""
        hi, lo = dedup_module.words(digest)
        found = self.store.lookup(_seen_state(source), pa.table({"hi": pa.array([hi], pa.uint64()),
                                                                 "lo": pa.array([lo], pa.uint64())}))
        return bool(found.num_rows) and bool(pc.any(pc.greater(found.column(WEIGHT), 0)).as_py())

    def _deduplicate(self, digests: dict[str, bytes]) -> tuple[list[str], int]:
        """Inside a step's transaction: the sources whose batch was seen before (to skip), having
        recorded the others' digests and dropped the oldest beyond capacity; and how many were dropped."""
        skipped, dropped = [], 0
        for name, digest in digests.items():
            state = dedup_module.SeenState.from_json(self.store.get_meta(_seen_meta(name)))
            decision = dedup_module.decide(state, self._seen(name, digest), self._dedup[name])
            if decision.skip:
                skipped.append(name)
            else:
                hi, lo = dedup_module.words(digest)
                order = pa.table({"seq": pa.array([decision.record], pa.int64()), "hi": pa.array([hi], pa.uint64()),
                                  "lo": pa.array([lo], pa.uint64()), WEIGHT: pa.array([1], pa.int64())})
                if decision.evict:  # the oldest digests, found by sequence number, leave both arrangements
                    old = self.store.lookup(_seen_order_state(name),
                                            pa.table({"seq": pa.array(list(decision.evict), pa.int64())}))
                    old = old.filter(pc.greater(old.column(WEIGHT), 0))
                    order = pa.concat_tables([order, negate(old).cast(order.schema)])
                    dropped += len(decision.evict)
                self.store.apply(_seen_order_state(name), order)
                self.store.apply(_seen_state(name), order.select(["hi", "lo", WEIGHT]))
            self.store.set_meta(_seen_meta(name), decision.after.to_json())
        return skipped, dropped

    def _count(self, **increments: int) -> None:
        """Add to the flow's counters, inside a step's transaction (they commit with it)."""
        for key, n in increments.items():
            self._metrics[key] = self._metrics.get(key, 0) + n
        self.store.set_meta(METRICS_KEY, self._metrics)

    def metrics(self) -> dict[str, int]:
        """The flow's counters, kept with its state (they survive a restart and travel with checkpoints).

        ``steps_total`` (the step number), ``rows_in_total`` (consolidated source rows applied),
        ``rows_out_total`` (view change rows), ``dedup_skipped_total`` (batches skipped as already
        seen), ``dedup_dropped_total`` (digests dropped from a seen set for capacity),
        ``dedup_recorded_total`` (digests recorded), ``dedup_entries`` (digests held now, all sources).
        """
        with self._lock:
            self._check_open()
            states = [dedup_module.SeenState.from_json(self.store.get_meta(_seen_meta(n))) for n in self._dedup]
            return {"steps_total": self._step, **{k: int(self._metrics.get(k, 0)) for k in _COUNTERS},
                    "dedup_recorded_total": sum(s.next for s in states),
                    "dedup_entries": sum(s.size for s in states)}

    # ------------------------------------------------------------------ flush interval
    def _pending(self, view: str) -> str:
        name = f"view/{view}/pending"
        if not self.store.has_arrangement(name):
            self.store.ensure_arrangement(name, Layout(_row_schema(self._views[view].columns)))
        return name

    def _hold(self, outputs: dict[str, pa.Table], force: bool) -> dict[str, pa.Table]:
        """Inside a step's transaction: add this step's view changes to what is held back, and take out
        (consolidated) what is due: every view not emitted for ``flush_interval`` seconds (all if ``force``)."""
        now = time.monotonic()
        emitted: dict[str, pa.Table] = {}
        for name in self._views:
            out = outputs.get(name)
            if out is None and name not in self._held:
                continue
            held = self._pending(name)
            if not flush_due(now, self._last_flush.get(name), self.flush_interval, force):
                if out is not None:
                    self.store.apply(held, out)
                    self._held.add(name)
                continue
            self._held.discard(name)
            parts = [self.store.scan(held)] + ([out] if out is not None else [])
            change = consolidate(pa.concat_tables([p.select(parts[0].column_names) for p in parts]))
            if parts[0].num_rows:
                self.store.apply(held, negate(parts[0]))
            if change.num_rows:
                emitted[name] = change
                self._last_flush[name] = now
        return emitted

    def flush(self, force: bool = True, before_commit: Callable[[dict[str, pa.Table]], None] | None = None
              ) -> dict[str, pa.Table]:
        """Emit the view changes held back by ``flush_interval`` (all of them, or with ``force=False``
        only those due) to watches and ``before_commit``, without a step; returns them (named columns +
        ``_weight``).  A caller with a flush interval calls this when its input is idle."""
        with self._lock:
            self._check_open()
            if self.flush_interval is None:
                return {}
            previous = (set(self._held), dict(self._last_flush))

            def undo() -> None:
                self._held, self._last_flush = previous
            with self._transaction(undo=undo):
                outputs = self._hold({}, force)
                named = {n: self._named(n, t) for n, t in outputs.items()}
                if before_commit is not None and named:
                    before_commit(named)
            self._publish(outputs, self._step)
            return named

    def _publish(self, outputs: dict[str, pa.Table], step: int) -> None:
        for name, out in outputs.items():
                batch = None
                for w in list(self._watches.get(name, [])):
                    batch = batch or DeltaBatch(self._named(name, out), step)
                    w._push(batch)
                if name in self._vector_sinks:
                    self._vector_sinks.publish(name, self._named(name, out), step)

    # ------------------------------------------------------------------ vector sinks
    def attach_vector_sink(self, name: str, sink: Any) -> VectorSinkHandle:
        """Keep a vector store (``freshview.vector.PgVectorSink``, ``LanceDBSink``, …) equal to the view or
        source ``name``: filled now, then each committed step's change as upserts and deletes by key (a
        source's primary key; a view's result key: ``plan.shape``, a vector view's (query key, rank)).
        Returns the attachment's handle (``flow/vector_sinks.py``); not kept across restarts."""
        with self._lock:
            self._check_open()
            if name in self._views:
                columns = self._views[name].columns
                rk = result_key(self._views[name].plan)
                if rk.counted or not rk.key:
                    raise CatalogError(f"view {name!r} has no key to upsert by (its rows may repeat): a vector "
                                       "sink stores a source, a vector view, or a view keyed by GROUP BY/DISTINCT")
                key = tuple(columns[i][0] for i in rk.key)
            elif name in self._sources:
                schema = self._sources[name]
                if not schema.primary_key:
                    raise CatalogError(f"source {name!r} has no primary key to upsert by")
                columns, key = tuple((c.name, c.type) for c in schema.columns), schema.primary_key
            else:
                raise CatalogError(f"unknown view or source {name!r}")
            return self._vector_sinks.attach(name, sink, columns, key, self.snapshot(name))

    def detach_vector_sink(self, handle: VectorSinkHandle) -> None:
        """Stop keeping a vector store in sync (and close the sink)."""
        with self._lock:
            self._vector_sinks.detach(handle)

    def _source_named(self, name: str, table: pa.Table) -> pa.Table:
        schema = self._sources[name]
        return table.rename_columns(schema.names + [WEIGHT]).cast(schema.arrow(with_weight=True))

    # ------------------------------------------------------------------ state TTL
    def _tick_ttl(self) -> ttl.Tick | None:
        return ttl.Tick(self.state_ttl, self._clock()) if self.state_ttl is not None else None

    def _source_owner(self, name: str) -> ttl.TtlOwner:
        """A source's copy as one TTL owner, keyed as the copy is (primary key, or the whole row)."""
        owner = self._source_owners.get(name)
        if owner is None:
            state = _source_state(name)
            layout = self.store.layout(state)
            key = list(layout.key)
            owner = self._source_owners[name] = ttl.TtlOwner(
                ttl.TouchIndex(state, layout.key_schema),
                lambda store, keys: ttl.drop_keys(store, state, keys),
                lambda store: ttl.distinct_keys(store, [state], key))
        return owner

    def _ttl_owners(self) -> dict[str, ttl.TtlOwner]:
        owners = {_source_state(n): self._source_owner(n) for n in self._sources}
        for view in self._views.values():
            owners.update(view.runner.ttl_owners())
        return owners

    def _sync_ttl(self) -> None:
        """On opening with a TTL: start the bookkeeping, rebuild it if the TTL changed or steps ran
        without one (their touches went unrecorded), index state kept without a TTL (every key as touched
        now), and key view outputs a TTL replaces rows in.  Without a TTL nothing changes."""
        if self.state_ttl is None:
            return
        meta = ttl.read_meta(self.store)
        width = ttl.bucket_width(self.state_ttl)
        rebuild = meta is not None and (meta.get("width") != width or bool(meta.get("stale")))
        owners = self._ttl_owners()
        rekey = [v for v in self._views.values()
                 if self.store.layout(v.circuit.output_state) != self._output_layout(v)]
        if not (meta is None or rebuild or rekey or any(not o.index.indexed(self.store) for o in owners.values())):
            return
        tick = self._tick_ttl()
        assert tick is not None
        with self._transaction():
            if rebuild:
                ttl.drop_all(self.store)
            if meta is None or rebuild:
                ttl.start(self.store, width)
            for owner in owners.values():
                if not owner.index.indexed(self.store):
                    owner.seed(self.store, tick)
            for view in rekey:  # O(rows) once: a state directory written without a TTL
                rows = self.store.scan(view.circuit.output_state)
                self.store.drop_arrangement(view.circuit.output_state)
                self.store.ensure_arrangement(view.circuit.output_state, self._output_layout(view))
                if rows.num_rows:
                    self.store.load(view.circuit.output_state, rows)

    def _replace_recreated(self, view: _View, out: pa.Table | None) -> pa.Table | None:
        """``out`` plus the retraction of the rows the view holds for groups its top aggregate started
        again after evicting them (one lookup by GROUP BY key): the new row replaces the old one."""
        probe = view.runner.recreated()
        if probe is None:
            return out
        stale = self.store.lookup(view.circuit.output_state, probe)
        if not stale.num_rows:
            return out
        stale = negate(stale)
        if out is None or not out.num_rows:
            return stale
        return consolidate(pa.concat_tables([out, stale.select(out.column_names).cast(out.schema)]))

    def _apply_source(self, name: str, table: pa.Table, tick: ttl.Tick | None = None) -> int:
        """Apply a consolidated change to the source's copy, refusing deletes of absent rows and
        duplicate or NULL primary keys.

        One lookup of the rows the change touches (by primary key, or by the whole row for a source
        without one) gives their contents after the change; the checks run on that, then the change
        is applied as it is.  Under a state TTL (``tick``) a delete of an absent row is a delete of a
        row evicted before (a *late delete*; how many is returned): the copy drops it, but the views
        get the change whole, since their state may still hold the row (a join key or group kept alive
        by other rows) and each operator drops what it does not hold.  The change's keys are touched.
        """
        schema = self._sources[name]
        state = _source_state(name)
        keys = list(self.store.layout(state).key)
        if schema.primary_key:
            nulls = [k for k, c in zip(schema.primary_key, keys) if table.column(c).null_count]
            if nulls:
                raise DeltaError(f"source {name!r}: primary key column {nulls[0]!r} is NULL")
        _check_array_lengths(name, schema, table)
        current = self.store.lookup(state, table.select(keys))
        after = consolidate(pa.concat_tables([current.cast(table.schema), table]))
        negative = after.filter(pc.less(after.column(WEIGHT), 0))
        late = 0
        if negative.num_rows:
            if tick is None:
                raise DeltaError(f"source {name!r}: delete of a row that is not present: "
                                 f"{_row_text(negative, schema)}")
            table, late = ttl.clamp(table, current.cast(table.schema))
            after = after.filter(pc.greater(after.column(WEIGHT), 0))
        if schema.primary_key and _maybe_repeated_keys(after, keys):
            counts = after.group_by(keys).aggregate([(WEIGHT, "sum")])
            dup = counts.filter(pc.greater(counts.column(f"{WEIGHT}_sum"), 1))
            if dup.num_rows:
                key = ", ".join(f"{k}={dup.column(c)[0].as_py()!r}" for k, c in zip(schema.primary_key, keys))
                raise DeltaError(f"source {name!r}: duplicate primary key ({key}); "
                                 "an update is the old row at -1 and the new row at +1")
        if table.num_rows:
            self.store.apply(state, table)
            if tick is not None:
                self._source_owner(name).index.touch(self.store, tick, table.select(keys))
        return late

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
            out = repeat_by_weight(table).select([col_name(i) for i in range(len(columns))])
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

    def watch_output(self, name: str, timeout: float | None = None, *, format: str = "arrow",
                     decimal_handling: str = "precise", schemas: bool = True) -> Watch:
        """Subscribe to a view's changes from the next step on (see ``Watch``).

        ``format="arrow"``: one ``DeltaBatch`` per step in which the view changed.  ``format="debezium"``:
        one Debezium message (a dict: before, after, op, ts_ms, source) per changed result key
        (``formats.debezium.encode``; ``decimal_handling`` as Debezium's: precise | string | double), inside
        Kafka Connect's ``{"schema", "payload"}`` envelope unless ``schemas=False``.
        """
        with self._lock:
            self._view(name)  # an unknown view raises
            if format == "arrow":
                w = Watch(self, name, timeout)
            elif format == "debezium":
                w = DebeziumWatch(self, name, timeout, self.debezium_encoder(name, decimal_handling, schemas))
            else:
                raise FreshviewError(f"watch_output format must be 'arrow' or 'debezium', not {format!r}")
            self._watches.setdefault(name, []).append(w)
            return w

    def debezium_encoder(self, name: str, decimal_handling: str = "precise", schemas: bool = True) -> DebeziumEncoder:
        """An encoder of ``name``'s changes as Debezium messages from now on (``DebeziumEncoder``)."""
        with self._lock:
            view = self._view(name)
            if decimal_handling not in debezium.DECIMAL_HANDLING:
                raise FreshviewError(f"decimal_handling must be one of {', '.join(debezium.DECIMAL_HANDLING)}, "
                                     f"not {decimal_handling!r}")
            key = result_key(view.plan)
            counts = None
            if key.counted:  # multiplicities after each step: from the view's rows now, then kept up
                now = self.snapshot(name, weighted=True)
                rows = zip(*(now.column(i).to_pylist() for i in range(len(view.columns))))
                counts = {debezium.row_key(r): w for r, w in zip(rows, now.column(WEIGHT).to_pylist())}
            return DebeziumEncoder(name, view.columns, key.key, counts, decimal_handling, schemas)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, uri: str, *, storage_options: Mapping[str, Any] | None = None) -> "checkpoint.CheckpointInfo":
        """A delta checkpoint to ``uri``: only the state files the destination lacks, chained on its
        last checkpoint (the first one there is full).

        ``uri``: a local path, ``file://…``, ``s3://bucket/prefix`` or another URI pyarrow.fs (or, when
        installed, fsspec) opens.  For S3 the endpoint comes from ``AWS_ENDPOINT_URL_S3`` /
        ``AWS_ENDPOINT_URL`` or the URI's ``?endpoint_override=host:port&scheme=http``, credentials from
        the AWS environment (``AWS_ACCESS_KEY_ID`` ...); ``storage_options`` (e.g. ``{"endpoint_override":
        "http://127.0.0.1:9000", "access_key": ..., "secret_key": ...}``) overrides both
        (``flow/checkpoint.py``)."""
        return self._checkpoint(uri, full=False, storage_options=storage_options)

    def checkpoint_full(self, uri: str, *, storage_options: Mapping[str, Any] | None = None
                        ) -> "checkpoint.CheckpointInfo":
        """A full checkpoint to ``uri``: every state file (sources, operator state, views, catalog);
        ``uri`` and ``storage_options`` as for ``checkpoint``."""
        return self._checkpoint(uri, full=True, storage_options=storage_options)

    def _checkpoint(self, uri: str, full: bool, storage_options: Mapping[str, Any] | None
                    ) -> "checkpoint.CheckpointInfo":
        with self._lock:  # between ticks: never of a half step
            self._check_open()
            manifest, runs = self.store.export()
            return checkpoint.write(uri, self.state_dir, manifest, runs, self._step, full, storage_options)

    def restore(self, uri: str, *, storage_options: Mapping[str, Any] | None = None) -> "checkpoint.CheckpointInfo":
        """Replace this flow's state by the last checkpoint at ``uri`` (also on a fresh flow): sources,
        views, catalog, step, dedup seen sets, counters and connectors' positions (``get_meta``); the
        next tick resumes from its step.  Watches end.  On an error the flow keeps its state.  ``uri``
        and ``storage_options`` as for ``checkpoint``."""
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            number, doc = checkpoint.read_latest(uri, storage_options)
            staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=self.state_dir.parent))
            try:
                files, size = checkpoint.fetch(uri, doc, staging, storage_options)
                SpineStateStore(staging, cache_mb=self._cache_mb).close()  # readable before anything changes
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            self.store.close()
            for watches in self._watches.values():
                for w in watches:
                    w._close()
            self._watches.clear()
            shutil.rmtree(self.state_dir, ignore_errors=True)
            staging.rename(self.state_dir)
            self.store = SpineStateStore(self.state_dir, cache_mb=self._cache_mb)
            self._sources, self._views, self._step, self._dedup = {}, {}, 0, {}
            self._metrics = dict.fromkeys(_COUNTERS, 0)
            self._held, self._last_flush = set(), {}
            self._source_owners, self._ttl_marked = {}, False
            self._resume()
            self._held = {v for v in self._views if self.store.has_arrangement(f"view/{v}/pending")
                          and self.store.count(f"view/{v}/pending")}
            self._sync_ttl()
            self._vector_sinks.refill(lambda n: self.snapshot(n) if n in self._views or n in self._sources else None)
            return checkpoint.CheckpointInfo(uri, number, doc["kind"], self._step, size, files,
                                             time.perf_counter() - started)

    # ------------------------------------------------------------------ Debezium messages
    def tick_debezium(self, source: str | Mapping[str, Iterable[Any]], messages: Iterable[Any] | None = None, *,
                      before_commit: Callable[[dict[str, pa.Table]], None] | None = None) -> StepSummary:
        """Apply Debezium change messages as one atomic step (``formats.debezium``):
        ``tick_debezium("orders", messages)`` or ``tick_debezium({"orders": m1, "customers": m2})``.

        Messages are ``str``/``bytes`` JSON or dicts, with or without the ``{"schema", "payload"}``
        envelope.  Old rows of ``u``/``d`` come from the source's state by primary key; a message that
        does not fit (malformed, a type that does not fit a column, a ``u``/``d`` of a key that does not
        exist) raises ``MessageError`` with its source and offset and nothing is applied.  The last
        message's ``ts_ms`` and ``source`` block are kept with the step (``get_meta("debezium/<source>")``).
        ``before_commit`` as for ``tick``.
        """
        if isinstance(source, str):
            batches = {source: messages if messages is not None else ()}
        elif isinstance(source, Mapping) and messages is None:
            batches = dict(source)
        else:
            raise DeltaError("tick_debezium takes a source name and messages, or a mapping of source name to messages")
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            deltas: dict[str, pa.Table] = {}
            digests: dict[str, bytes] = {}
            lasts: dict[str, debezium.Change] = {}
            for name, batch in batches.items():
                schema = self.source_schema(name)
                changes = debezium.read(batch, schema, name)
                if name in self._dedup and changes:
                    # The messages' own digest: their delta comes from the source's state, so a re-delivered
                    # batch gives another delta (or, for a ``c`` of a key that now exists, an error).
                    digests[name] = dedup_module.changes_digest(changes, [c.type.arrow for c in schema.columns])
                if name in digests and self._seen(name, digests[name]):
                    delta = schema.arrow(with_weight=True).empty_table()
                else:
                    delta = debezium.to_delta(changes, schema,
                                              lambda rows, name=name: self._present_rows(name, rows), name,
                                              absent="raise" if self.state_ttl is None else "ignore")
                deltas[name] = self._source_delta(name, delta)
                if changes and (changes[-1].ts_ms is not None or changes[-1].source is not None):
                    lasts[name] = changes[-1]

            def remember(outputs: dict[str, pa.Table]) -> None:
                for name, last in lasts.items():
                    self.set_meta(f"debezium/{name}", {"ts_ms": last.ts_ms, "source": last.source})
                if before_commit is not None:
                    before_commit(outputs)
            return self._run_step(deltas, digests, remember, started)

    def _present_rows(self, source: str, rows: list[tuple] | None) -> list[tuple]:
        """The source's rows matching ``rows`` (by primary key, else whole rows), once per copy; all if None."""
        schema = self._sources[source]
        if rows is None:
            found = self.snapshot(source)
            return list(zip(*(found.column(i).to_pylist() for i in range(found.num_columns))))
        state = _source_state(source)
        key = list(self.store.layout(state).key)
        at = [schema.names.index(n) for n in (schema.primary_key or schema.names)]  # (the layout's key order)
        probe = pa.Table.from_arrays([pa.array([r[i] for r in rows], schema.columns[i].type.arrow) for i in at],
                                     names=key)
        found = self.store.lookup(state, probe)
        columns = [found.column(col_name(i)).to_pylist() for i in range(len(schema.columns))]
        weights = found.column(WEIGHT).to_pylist()
        return [tuple(col[r] for col in columns) for r, w in enumerate(weights) for _ in range(max(w, 0))]

    def explain(self, name: str) -> str:
        with self._lock:
            view = self._view(name)
            counts = {a: self.store.count(a) for a in self.store.list_arrangements(f"view/{name}/")}
            cols = ", ".join(f"{n} {t}" for n, t in view.columns)
            last = (f"last step: {view.last.executor} ({view.last.reason})" if view.last
                    else "last step: none yet (the first computation ran on Spark)")
            lines = [f"view {name} ({cols})", f"execution: {self.execution}; {last}"]
            if self.state_ttl is not None:
                owners = view.runner.ttl_owners()
                tracked = ", ".join(f"{op.rsplit('/', 1)[-1]} {o.index.tracked(self.store)} keys"
                                    for op, o in owners.items())
                lines.append(f"state ttl: {self.state_ttl:g} s; evicting: {tracked or 'nothing (no keyed state)'}")
            return "\n".join(lines + [
                f"cost model: {view.cost.describe()}",
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
            self._vector_sinks.close()
            self.store.close()
            if self._tmp is not None:
                self._tmp.cleanup()

    def __enter__(self) -> "IncrementalFlow":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_UNITS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1, "sec": 1, "second": 1, "seconds": 1,
          "min": 60, "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600, "day": 86400,
          "days": 86400}


def source_schema_of(schema: str | pa.Schema | TableSchema, primary_key: Sequence[str] | None) -> TableSchema:
    """A source's declared schema: a DDL column list, a pyarrow.Schema or a TableSchema, with ``primary_key``
    (a DDL's names fold to lower case) overriding any the schema carries."""
    pk = tuple(k.lower() if isinstance(schema, str) else k for k in (primary_key or ()))
    if isinstance(schema, TableSchema):
        return TableSchema(schema.columns, pk or schema.primary_key)
    if isinstance(schema, pa.Schema):
        return schema_from_arrow(schema, pk)
    if isinstance(schema, str):
        return schema_from_ddl(schema, pk)
    raise CatalogError(f"a source schema is a string, pyarrow.Schema or TableSchema, not {type(schema).__name__}")


def parse_interval(value: float | str | None) -> float | None:
    """Seconds of ``1.5``, ``"500 ms"``, ``"1 second"``, ``"2 hours"``, ``"1 day"``; None stays None."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([a-z]*)\s*", str(value).lower())
        if not match or match.group(2) not in _UNITS and match.group(2):
            raise FreshviewError(f"cannot read the interval {value!r}: write e.g. '500 ms', '1 second', "
                                 "'10 minutes', '1 hour', '1 day' or a number of seconds")
        seconds = float(match.group(1)) * _UNITS.get(match.group(2) or "s", 1)
    if seconds < 0:
        raise FreshviewError(f"an interval cannot be negative: {value!r}")
    return seconds


def flush_due(now: float, last: float | None, interval: float, force: bool) -> bool:
    """Whether a view's held-back change goes out now: forced, never emitted yet, or ``interval`` passed."""
    return force or last is None or now - last >= interval


def _maybe_repeated_keys(rows: pa.Table, keys: list[str]) -> bool:
    """Whether some key may have more than one live row: a weight above 1, or two rows whose key
    hashes are equal (then the caller counts exactly)."""
    if rows.num_rows == 0:
        return False
    weights = rows.column(WEIGHT).to_numpy()
    if (weights > 1).any():
        return True
    hashes = np.sort(hashing.hash_rows(rows.select(keys).columns))
    return bool((hashes[1:] == hashes[:-1]).any())


def _check_array_lengths(name: str, schema: TableSchema, table: pa.Table) -> None:
    """Refuse an inserted row whose fixed-size array (``FLOAT4[384]``) has another length, naming its key."""
    if not any(c.type.dim is not None for c in schema.columns):
        return
    rows = table.filter(pc.greater(table.column(WEIGHT), 0))
    bad = array_length_mismatch(rows, schema, [col_name(i) for i in range(len(schema.columns))])
    if bad is not None:
        at, column, length = bad
        row = rows.slice(at, 1).to_pylist()[0]
        key = ", ".join(f"{k}={row[col_name(schema.names.index(k))]!r}" for k in schema.primary_key) or f"row {at}"
        raise DeltaError(f"source {name!r}: {column} of ({key}) has {length} values, but the column is "
                         f"{schema.column(column).type.element}[{schema.column(column).type.dim}]")


def _source_state(name: str) -> str:
    return f"source/{name}"


# A dedup source's seen set: its digests (two words), looked up by digest; the same by sequence number,
# for dropping the oldest; and its SeenState (meta).  (Not "dedup/<name>/...": a name may hold '/'.)
SEEN_LAYOUT = Layout(pa.schema([("hi", pa.uint64()), ("lo", pa.uint64())]), ("hi", "lo"))
SEEN_ORDER_LAYOUT = Layout(pa.schema([("seq", pa.int64()), ("hi", pa.uint64()), ("lo", pa.uint64())]), ("seq",))


def _seen_state(name: str) -> str:
    return f"dedup-seen/{name}"


def _seen_order_state(name: str) -> str:
    return f"dedup-order/{name}"


def _seen_meta(name: str) -> str:
    return f"dedup/{name}"


def _dedup_text(capacity: int | None) -> str:
    return "dedup=False" if capacity is None else f"dedup=True, dedup_capacity={capacity}"


def _source_row_schema(schema: TableSchema) -> pa.Schema:
    return pa.schema([pa.field(col_name(i), c.type.arrow) for i, c in enumerate(schema.columns)])


def _row_schema(columns: pn.Columns) -> pa.Schema:
    return pa.schema([pa.field(col_name(i), t.arrow) for i, (_, t) in enumerate(columns)])


def _row_text(table: pa.Table, schema: TableSchema) -> str:
    row = table.slice(0, 1).to_pylist()[0]
    return "(" + ", ".join(f"{c.name}={row[col_name(i)]!r}" for i, c in enumerate(schema.columns)) + ")"


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise CatalogError(f"invalid {what} name {name!r}: use name or schema.name, "
                           "where a name is non-empty and has no '.'")


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
