"""The engine: one step of every source and view, as a two-phase step over one state-store transaction.

    prepared = engine.prepare({"orders": SourceChange(rows=delta)})  # everything inside the transaction
    write(prepared.outputs)                                          # result tables, sinks, an outbox ...
    prepared.commit()                                                # or prepared.abort(): exactly as before

``prepare`` opens the store's transaction and, inside it:

1. evicts, under a state TTL, the keys untouched for longer (``runtime.ttl``: a change to such a key
   then meets no state: a new key);
2. applies each source's change to its copy (``operators.source``: weighted rows, keyed upserts and
   deletes whose old rows it looks up once, truncates; checked; the change the views get);
3. steps each view, in dependency order (a view reads sources and views registered before it), that
   reads a changed source or view, or has rows of a temporal filter due (``operators.temporal``): its circuit on the kernels the cost model picks
   (``runtime.cost``), then, under a TTL, the retraction of its rows for groups evicted and started
   again (one lookup by GROUP BY key), then its integrate (``view/<name>/out``);
4. holds back, with a flush interval, the views' changes until they are due (``runtime.holds``).

It returns a ``PreparedStep``: ``outputs`` (per view, its consolidated change in the view's own column
names + ``_weight``; columns are renamed here and only here), ``summary``, and the transaction still
open: ``set_meta`` writes with the step, ``commit`` makes it durable, ``abort`` rolls every write back
and the engine's in-memory state with it (step number, holds, TTL marks).  One prepared step at a
time: anything else on the engine waits for ``commit`` or ``abort`` (``StateError``).  A failure inside
``prepare`` (a refused change, an operator error such as division by zero: its ``view`` or ``source``
attribute names where) rolls back before it raises.  A process that dies between ``prepare`` and
``commit`` left nothing in the store: reopened, it holds the last committed step.

The step's time (``now()`` of time-based views, and the TTL's clock) is read from ``clock`` once per step,
so every view of a step sees the same instant; it never goes back (a clock set back is held at the last
step's time, kept in the state's meta ``engine/now`` while a view is time-based: across a restart too).
``next_due`` is the earliest time a temporal filter has rows due at: a step then, even with no source
change (``prepare({})``), releases them.

Inside the engine a relation's columns are ``c0 .. cn`` (``runtime.relation``); the edges rename:
``Source.to_engine`` on the way in, ``EngineView.named`` on the way out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import datetime as dt
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa

from freshview.algebra.batch import consolidate, negate, repeat_by_weight
from freshview.circuit import Circuit, arrangements, incrementalize
from freshview.errors import CatalogError, FreshviewError, StateError
from freshview.plan import nodes as pn
from freshview.plan import vector as vector_plan
from freshview.runtime import chunks, reuse, ttl
from freshview.runtime.cost import FIRST_MODES, MODES, Choice, CostModel, choose, choose_first
from freshview.runtime.executor import CircuitRunner
from freshview.runtime.holds import Holds
from freshview.runtime.kernels import Kernels
from freshview.runtime.kernels.arrow import ArrowKernels
from freshview.runtime.operators import source_load
from freshview.runtime.operators.source import Source, SourceChange
from freshview.runtime.relation import col_name
from freshview.runtime.state.layout import Layout
from freshview.runtime.reuse import PinnedCircuit
from freshview.runtime.state.pin import Pinned
from freshview.runtime.state.store import SpineStateStore
from freshview.schema import WEIGHT, TableSchema

log = logging.getLogger("freshview.engine")

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore

__all__ = ["Engine", "EngineView", "PreparedStep", "StepSummary", "ViewStep"]

NOW_META = "engine/now"  # the latest step time (µs) of a state holding time-based views
FIRST_CHUNK_BYTES = 1 << 30  # an in-process first computation over more input than this takes it in chunks
FIRST_CHUNK_ROWS = 1_000_000  # ... of this many stored rows


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
    """What one step did: rows in (consolidated), rows out (all views), time, per-view detail."""

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
class EngineView:
    """A view as the engine runs it: its plan, circuit, runner and cost model."""

    name: str
    plan: pn.Node
    circuit: Circuit
    runner: CircuitRunner
    cost: CostModel = field(default_factory=CostModel)
    last: Choice | None = None
    first: Choice | None = None  # where its first computation ran, and why (None: resumed)

    @property
    def columns(self) -> pn.Columns:
        return self.plan.columns

    @property
    def output(self) -> arrangements.Arrangement:
        return self.circuit.output_state

    @property
    def row_schema(self) -> pa.Schema:
        """Its rows in the engine's columns (no ``_weight``)."""
        return pa.schema([pa.field(col_name(i), t.arrow) for i, (_, t) in enumerate(self.columns)])

    def named(self, table: pa.Table) -> pa.Table:
        """Its rows or change (``c<i>`` + ``_weight``) in the view's own column names: the engine's edge."""
        return table.rename_columns([n for n, _ in self.columns] + [WEIGHT])


class PreparedStep:
    """A step applied inside the open transaction, awaiting ``commit`` or ``abort`` (module docstring).

    As a context manager, leaving the block without ``commit`` aborts it.
    """

    def __init__(self, engine: "Engine", step: int | None, outputs: dict[str, pa.Table],
                 sources: dict[str, pa.Table], summary: StepSummary | None, saved: tuple) -> None:
        self._engine = engine
        self.step = step if step is not None else engine.step  # None: a flush (no step of its own)
        self.summary = summary
        self._outputs = outputs  # engine columns
        self._sources = sources
        self._saved = saved
        self._named: dict[str, pa.Table] | None = None
        self.state = "open"

    @property
    def outputs(self) -> dict[str, pa.Table]:
        """Per view that changed (and is due, under a flush interval): its consolidated change, named."""
        if self._named is None:
            views = self._engine.views
            self._named = {n: views[n].named(t) for n, t in self._outputs.items()}
        return self._named

    @property
    def source_changes(self) -> dict[str, pa.Table]:
        """Per source given to ``prepare``: the change its views got (the source's columns + ``_weight``;
        empty if none)."""
        sources = self._engine.sources
        return {n: sources[n].named(t) for n, t in self._sources.items()}

    def set_meta(self, key: str, value: Any) -> None:
        """Write a meta value (the store's key) that commits with this step."""
        self._check_open()
        self._engine.store.set_meta(key, value)

    def commit(self) -> StepSummary | None:
        """Make the step durable (one write-ahead log record) and close it; returns its summary."""
        self._check_open()
        self._engine.store.commit()
        self.state = "committed"
        self._engine._prepared = None
        return self.summary

    def abort(self) -> None:
        """Roll the step back: the store and the engine are as before ``prepare`` (idempotent once closed)."""
        if self.state != "open":
            return
        self.state = "aborted"
        try:
            self._engine.store.rollback()
        finally:
            self._engine._restore(self._saved)
            self._engine._prepared = None

    def _check_open(self) -> None:
        if self.state != "open":
            raise StateError(f"this step was {self.state} already")

    def __enter__(self) -> "PreparedStep":
        return self

    def __exit__(self, *exc) -> None:
        self.abort()


class Engine:
    """Sources, views and their state in one store; steps them (module docstring).

    ``execution``: "auto" (per step and view, the cost model's pick), "local" or "spark".
    ``first_computation``: "spark", or "local" for in-process first computations (a shard on an
    executor).  ``state_ttl`` (seconds) evicts keys untouched for longer; ``flush_interval`` (seconds)
    holds views' changes back.  ``clock``: the step's time (Unix seconds or a ``datetime``, naive: UTC), the
    TTL's clock too.  ``spark``: a session, or None
    to start one when first needed.
    """

    def __init__(self, store: StateStore, *, execution: str = "auto", first_computation: str = "auto",
                 state_ttl: float | None = None, flush_interval: float | None = None,
                 clock: Callable[[], Any] = time.time, spark: Any = None,
                 memory_budget_mb: float | None = None) -> None:
        if execution not in MODES:
            raise FreshviewError(f"execution must be one of {', '.join(MODES)}, not {execution!r}")
        if first_computation not in FIRST_MODES:
            raise FreshviewError(f"first_computation must be one of {', '.join(FIRST_MODES)}, "
                                 f"not {first_computation!r}")
        if memory_budget_mb is not None and not memory_budget_mb >= 0:
            raise FreshviewError(f"memory_budget_mb must be a number of MiB, 0 or more, not {memory_budget_mb!r}")
        self.store = store
        self.execution = execution
        self.first_computation = first_computation
        self.memory_budget = int(memory_budget_mb * 2**20) if memory_budget_mb is not None else _default_budget()
        # an in-process first computation over more input bytes than this takes it in chunks (``_in_chunks``)
        self.first_chunk_bytes = FIRST_CHUNK_BYTES
        self.state_ttl = state_ttl
        self.holds = Holds(flush_interval) if flush_interval is not None else None
        self._clock = clock
        self._spark = spark
        self._kernels: dict[str, Kernels] = {"local": ArrowKernels()}
        self.sources: dict[str, Source] = {}
        self.views: dict[str, EngineView] = {}  # in dependency order: a view reads only earlier ones
        self.step = 0
        self._ttl_owners: dict[str, ttl.TtlOwner] = {}  # source -> its copy as a TTL owner
        self._ttl_marked = False  # a step without a TTL marked existing bookkeeping stale
        self._prepared: PreparedStep | None = None
        self._last_now: int | None = None  # µs: the latest step time (steps never go back; kept in NOW_META)

    # ------------------------------------------------------------------ executors
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

    # ------------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def transaction(self, undo: Callable[[], Any] | None = None) -> Iterator[None]:
        """One atomic change of the catalog's state (a source or view added or dropped): on any error
        the store rolls back and ``undo`` runs."""
        self._check_idle()
        self.store.begin()
        try:
            yield
            self.store.commit()
        except BaseException:
            self.store.rollback()
            if undo is not None:
                undo()
            raise

    def _check_idle(self) -> None:
        if self._prepared is not None:
            raise StateError("a prepared step is open: commit or abort it first")

    def reset(self, store: StateStore) -> None:
        """Start over on another store (a restored checkpoint): no sources, views or step until opened."""
        self._check_idle()
        self.store = store
        self.sources, self.views, self.step = {}, {}, 0
        self._ttl_owners, self._ttl_marked, self._last_now = {}, False, None
        if self.holds is not None:
            self.holds = Holds(self.holds.interval)

    # ------------------------------------------------------------------ sources
    def open_source(self, name: str, schema: TableSchema) -> None:
        """A source whose copy the store holds already (a resumed catalog)."""
        self.sources[name] = Source(name, schema)

    def add_source(self, name: str, schema: TableSchema) -> None:
        """Keep a source's copy (inside ``transaction``)."""
        source = Source(name, schema)
        self.store.ensure_arrangement(source.arrangement, source.layout)
        self.sources[name] = source
        if self.state_ttl is not None:
            self._source_owner(name).index.ensure(self.store)

    def bulk_refusal(self, name: str) -> str | None:
        """Why ``name``'s copy cannot be loaded in bulk (``load_source``), or None: it must be empty, read
        by no view (they would need the rows as a step's change) and kept without a state TTL (whose
        bookkeeping a step writes)."""
        if name not in self.sources:
            raise CatalogError(f"unknown source {name!r}")
        if self.state_ttl is not None:
            return "the flow has a state TTL"
        if self.readers(name):
            return f"views read it ({', '.join(self.readers(name))})"
        if self.store.count(self.sources[name].arrangement):
            return "its copy is not empty"
        return None

    def load_source(self, name: str, batches: Iterable[pa.Table]) -> int:
        """Fill ``name``'s empty copy from ``batches`` (its own columns + ``_weight``) as sorted runs,
        checked once (``operators.source_load``), as one step (inside ``transaction``; ``bulk_refusal``
        must be None).  Returns the rows loaded."""
        self._check_idle()
        why = self.bulk_refusal(name)
        if why is not None:
            raise StateError(f"source {name!r} cannot be loaded in bulk: {why}")
        try:
            loaded = source_load.load(self.store, self.sources[name], batches)
        except FreshviewError as exc:
            exc.source = name
            raise
        self.step += 1
        return loaded

    def adopt_source(self, name: str, pinned: Pinned) -> int:
        """Fill ``name``'s empty copy with another store's copy of the same table, as pinned (the same
        layout: the same columns and key), as one step (inside ``transaction``; ``bulk_refusal`` must be
        None): its run files linked, no row copied or checked again (``SpineStateStore.adopt_runs``).  How
        a population beside the stream takes a table the service follows already.  Returns the rows
        stored (before weights are added up)."""
        self._check_idle()
        why = self.bulk_refusal(name)
        if why is not None:
            raise StateError(f"source {name!r} cannot take another copy: {why}")
        source, store = self.sources[name], self.store
        if pinned.directory is None or pinned.layout != source.layout or not isinstance(store, SpineStateStore):
            raise StateError(f"source {name!r} cannot take another copy: it is kept otherwise here")
        store.ensure_arrangement(source.arrangement, source.layout)
        store.adopt_runs(source.arrangement, pinned.runs, pinned.directory)
        self.step += 1
        return pinned.rows

    def drop_source(self, name: str) -> None:
        """Forget a source's copy and its TTL bookkeeping (inside ``transaction``)."""
        index = self._source_owner(name).index  # (reads the copy's layout: before it goes)
        self.store.drop_arrangement(self.sources[name].arrangement)
        for arr in (index.last, index.bucket):
            if self.store.has_arrangement(arr):
                self.store.drop_arrangement(arr)
        ttl.forget(self.store, [index.owner])
        del self.sources[name]
        self._ttl_owners.pop(name, None)

    # ------------------------------------------------------------------ views
    def compile(self, name: str, plan: pn.Node) -> EngineView:
        """A view's circuit and runner (no state touched)."""
        circuit = incrementalize(name, plan)
        return EngineView(name, plan, circuit, CircuitRunner(circuit, self.store))

    def open_view(self, view: EngineView) -> None:
        """A view whose state the store holds already (a resumed catalog), after the views it reads."""
        self.views[view.name] = view

    def add_views(self, views: Sequence[EngineView], current: Callable[[str], pa.Table | None],
                  reusing: Mapping[str, PinnedCircuit] | None = None) -> None:
        """Register ``views`` (in order; a later one may read an earlier one) and compute their first
        results (inside ``transaction``).  ``current(relation)``: a relation's rows now, in the engine's
        columns (the caller shares one read of each input among the views); a new view's result is
        handed to the views after it as it is, not read back.  ``reusing``: per view, another circuit
        over the same sources as pinned (``runtime.reuse``), whose operators equal to the view's give
        their state instead of being computed again."""
        computed: dict[str, pa.Table | None] = {}
        streamed: set[str] = set()  # views whose result went to state in batches: read back when needed

        def inputs(relation: str) -> pa.Table | None:
            if relation in streamed:
                streamed.discard(relation)
                computed[relation] = self.store.scan(self.views[relation].output)
            return computed[relation] if relation in computed else current(relation)
        choice = self.first_choice(views)
        now = self._now()
        tick = self._tick(now)
        chunked = self._in_chunks(views, choice, tick is not None or bool(reusing))
        log.info("first computation of %s: %s (%s)%s", ", ".join(v.name for v in views), choice.executor,
                 choice.reason, f"; its inputs in chunks of {FIRST_CHUNK_ROWS} rows" if chunked else "")
        bulk = self.kernels("local" if choice.executor == "local" else "bulk")
        try:
            for view in views:
                view.first = choice
                self.views[view.name] = view
                self.store.ensure_arrangement(view.output, self._output_layout(view))
                if tick is not None:
                    for owner in view.runner.ttl_owners().values():
                        owner.index.ensure(self.store)
                elif reusing and view.name in reusing:
                    self._seed(view, reusing[view.name])
                try:
                    if chunked:
                        self._first_in_chunks(view, bulk, now)
                        out = None
                    elif bulk.streams:  # on Spark: the result into state batch by batch, never collected whole
                        output = view.output
                        if view.runner.first(inputs, bulk, lambda batches: self.store.load_runs(output, batches),
                                             tick=tick, now=now):
                            streamed.add(view.name)
                        out = None
                    else:
                        out = view.runner.step(inputs, bulk, force=True, tick=tick, now=now)
                finally:
                    view.runner.seeded, view.runner.silent = set(), set()
                self._keep_now(now)
                if out is not None and out.num_rows:
                    self.store.load(view.output, out)
                    computed[view.name] = out
        finally:
            bulk.finish()

    def _in_chunks(self, views: Sequence[EngineView], choice: Choice, bound: bool) -> bool:
        """Whether a first computation takes its inputs in chunks (``_first_in_chunks``): one view, computed
        in-process, its inputs over ``first_chunk_bytes``, with no state TTL or reused state (``bound``)."""
        if len(views) != 1 or choice.executor != "local" or bound or not isinstance(self.store, SpineStateStore) \
                or isinstance(views[0].plan, vector_plan.VectorSearch):
            return False
        return self._input_size(views)[1] > self.first_chunk_bytes

    def _first_in_chunks(self, view: EngineView, kernels: Kernels, now: int) -> None:
        """``view``'s first result from its inputs taken in chunks (``runtime.chunks``)."""
        assert isinstance(self.store, SpineStateStore)
        chunks.first_result(view.runner, self.store, view.output, {r: self._arrangement(r) for r in
                                                                   view.circuit.sources}, kernels, now,
                            FIRST_CHUNK_ROWS)

    def _seed(self, view: EngineView, pinned: PinnedCircuit) -> None:
        """Link the state ``view`` shares with ``pinned``'s operators into its own and have its first computation
        start from it (``reuse.link``; ``CircuitRunner.seeded``, ``silent``)."""
        if isinstance(self.store, SpineStateStore):
            found = reuse.link(self.store, view.circuit, pinned)
            view.runner.seeded, view.runner.silent = found.seeded, found.silent

    def first_choice(self, views: Sequence[EngineView]) -> Choice:
        """Where the first computation of ``views`` runs (``cost.choose_first``): their inputs' rows and
        estimated bytes against the memory budget; a vector view's is numpy, in-process."""
        if all(isinstance(v.plan, vector_plan.VectorSearch) for v in views):
            return Choice("local", "a vector view's first computation is in-process")
        rows, nbytes = self._input_size(views)
        return choose_first(self.first_computation, self.execution, rows, nbytes, self.memory_budget,
                            _spark_cluster(self._spark))

    def _input_size(self, views: Sequence[EngineView]) -> tuple[int, int]:
        """The rows of ``views``' inputs (the views among them aside) and about the bytes they take."""
        new = {v.name for v in views}
        inputs = {r for v in views for r in v.circuit.sources if r not in new}
        rows = nbytes = 0
        for relation in sorted(inputs):
            arrangement = self._arrangement(relation)
            n = self._stored_rows(arrangement)
            rows += n
            nbytes += n * _row_bytes(self.store.layout(arrangement).schema)
        return rows, nbytes

    def _stored_rows(self, arrangement: str) -> int:
        """An arrangement's rows as its runs hold them (no row read, as a count over several runs would)."""
        store = self.store
        return store.stored_rows(arrangement) if isinstance(store, SpineStateStore) else store.count(arrangement)

    def drop_view(self, name: str) -> None:
        """Forget a view and its state (inside ``transaction``)."""
        view = self.views[name]
        for arr in self.store.list_arrangements(arrangements.view_prefix(name)):
            self.store.drop_arrangement(arr)
        ttl.forget(self.store, view.runner.ttl_owners())
        del self.views[name]

    def readers(self, name: str) -> list[str]:
        """Views that read the source or view ``name`` directly, in dependency order."""
        return [v.name for v in self.views.values() if name in v.circuit.sources and v.name != name]

    def _output_layout(self, view: EngineView) -> Layout:
        """The layout of a view's rows: keyed by its GROUP BY columns when its top aggregate evicts under
        a TTL (a re-started group's row is found by key and replaced), else by nothing."""
        key = view.runner.output_key if self.state_ttl is not None else None
        return Layout(view.row_schema, tuple(col_name(i) for i in key or ()))

    # ------------------------------------------------------------------ the step
    def prepare(self, changes: Mapping[str, SourceChange]) -> PreparedStep:
        """Apply ``changes`` (per source; the sources' own column names) and step every view that reads
        them, inside the store's transaction, left open (module docstring)."""
        self._check_idle()
        started = time.perf_counter()
        for name in changes:
            if name not in self.sources:
                raise CatalogError(f"unknown source {name!r}")
        engine_changes = {n: self.sources[n].to_engine(c) for n, c in changes.items()}
        saved = self._saved()
        step = self.step + 1
        now = self._now()
        tick = self._tick(now)
        self.store.begin()
        try:
            summary = StepSummary(step, 0, 0, 0.0)
            if tick is not None:  # first: a change to a key past the TTL meets no state (a new key)
                summary.evicted = sum(o.expire(self.store, tick) for o in self._all_ttl_owners().values())
            elif not self._ttl_marked:
                ttl.mark_stale(self.store)
                self._ttl_marked = True
            changed: dict[str, pa.Table] = {}
            sources: dict[str, pa.Table] = {}  # every source given, with the change its views get
            for name, change in engine_changes.items():
                if change.empty:
                    sources[name] = self.sources[name].row_schema.empty_table()
                    continue
                try:
                    delta, late = self.sources[name].apply(self.store, change, tick, self._touch_index(name, tick))
                except FreshviewError as exc:
                    exc.source = name
                    raise
                summary.late_deletes += late
                sources[name] = delta
                if delta.num_rows:
                    changed[name] = delta
            summary.rows_in = sum(t.num_rows for t in changed.values())
            outputs = self._step_views(changed, summary, tick, now)
            self._keep_now(now)
            self.step = step
            if self.holds is not None:
                outputs = self.holds.hold(self.store, outputs, self._view_schemas(), time.monotonic(), force=False)
            summary.duration_ms = (time.perf_counter() - started) * 1000
        except BaseException:
            self.store.rollback()
            self._restore(saved)
            raise
        self._prepared = PreparedStep(self, step, outputs, sources, summary, saved)
        return self._prepared

    def _step_views(self, changed: dict[str, pa.Table], summary: StepSummary,
                    tick: ttl.Tick | None, now: int) -> dict[str, pa.Table]:
        """Each view reading a changed relation or with rows due at ``now``, in order: its change,
        integrated; the changes by view."""
        outputs: dict[str, pa.Table] = {}
        for view in self.views.values():
            vt = time.perf_counter()
            reads = view.circuit.sources & changed.keys()
            due = view.runner.next_due()
            if not reads and (due is None or due > now):
                summary.views[view.name] = ViewStep(skipped=True)
                continue
            rows_in = sum(changed[r].num_rows for r in reads)
            choice = view.last = choose(self.execution, rows_in, view.cost)
            try:
                out = view.runner.step(changed.get, self.kernels(choice.executor), tick=tick, now=now)
            except FreshviewError as exc:
                exc.view = view.name
                raise
            if tick is not None:
                out = self._replace_recreated(view, out)
            rows = 0
            if out is not None and out.num_rows:
                self.store.apply(view.output, out)
                changed[view.name] = outputs[view.name] = out
                rows = out.num_rows
            ms = (time.perf_counter() - vt) * 1000
            view.cost.observe(choice.executor, rows_in, ms)
            summary.views[view.name] = ViewStep(rows, ms, False, choice.executor, choice.reason, rows_in)
            summary.rows_out += rows
        return outputs

    def prepare_flush(self, force: bool = True) -> PreparedStep:
        """The views' held-back changes that are due (all with ``force``) as a prepared step of no
        source change (no step number of its own); nothing held without a flush interval."""
        self._check_idle()
        saved = self._saved()
        self.store.begin()
        try:
            outputs = {} if self.holds is None else \
                self.holds.hold(self.store, {}, self._view_schemas(), time.monotonic(), force)
        except BaseException:
            self.store.rollback()
            self._restore(saved)
            raise
        self._prepared = PreparedStep(self, None, outputs, {}, None, saved)
        return self._prepared

    def _view_schemas(self) -> dict[str, pa.Schema]:
        return {name: view.row_schema for name, view in self.views.items()}

    def _saved(self) -> tuple:
        return self.step, self._ttl_marked, self.holds.saved() if self.holds is not None else None

    def _restore(self, saved: tuple) -> None:
        self.step, self._ttl_marked, holds = saved
        if self.holds is not None:
            self.holds.restore(holds)

    # ------------------------------------------------------------------ reading
    def rows(self, name: str, weighted: bool = False) -> pa.Table:
        """A view's or source's rows in its own column names and types (each row once with ``_weight``
        if ``weighted``, else repeated by its multiplicity)."""
        if name in self.views:
            table, columns = self.store.scan(self.views[name].output), self.views[name].columns
        elif name in self.sources:
            table = self.store.scan(self.sources[name].arrangement)
            columns = tuple((c.name, c.type) for c in self.sources[name].schema.columns)
        else:
            raise CatalogError(f"unknown view {name!r}")
        positions = [col_name(i) for i in range(len(columns))]
        fields = [pa.field(n, t.arrow) for n, t in columns]
        if weighted:
            out = table.select(positions + [WEIGHT]).rename_columns([n for n, _ in columns] + [WEIGHT])
            return out.cast(pa.schema(fields + [pa.field(WEIGHT, pa.int64())]))
        out = repeat_by_weight(table).select(positions)
        return out.rename_columns([n for n, _ in columns]).cast(pa.schema(fields))

    def contents(self, relation: str) -> pa.Table | None:
        """A source's or view's rows in the engine's columns (a first computation's input)."""
        return self.store.scan(self._arrangement(relation))

    def _arrangement(self, relation: str) -> arrangements.Arrangement:
        """Where a source's or view's rows are kept (a first computation's input)."""
        return self.sources[relation].arrangement if relation in self.sources else self.views[relation].output

    def lookup(self, name: str, keys: pa.Table) -> pa.Table:
        """The rows of a keyed source whose primary key is in ``keys`` (its key columns by name)."""
        schema = self.sources[name].schema
        if not schema.primary_key:
            raise CatalogError(f"source {name!r} has no primary key to look rows up by")
        renamed = keys.select(list(schema.primary_key)).rename_columns(
            [col_name(schema.names.index(k)) for k in schema.primary_key])
        found = self.store.lookup(self.sources[name].arrangement, renamed)
        out = found.select([col_name(i) for i in range(len(schema.columns))])
        return out.rename_columns(schema.names).cast(schema.arrow())

    # ------------------------------------------------------------------ time
    def _now(self) -> int:
        """The step's time from the clock (µs since the epoch), never before the last step's (that of a
        time-based view is kept in the state: a clock set back across a restart is held too)."""
        if self._last_now is None:
            self._last_now = int(self.store.get_meta(NOW_META, 0))
        self._last_now = max(self._last_now, int(round(self._read_clock() * 1_000_000)))
        return self._last_now

    def _keep_now(self, now: int) -> None:
        """Inside the step's transaction: its time, when a view's rows are scheduled on it."""
        if any(v.runner.scheduled for v in self.views.values()):
            self.store.set_meta(NOW_META, now)

    def _read_clock(self) -> float:
        """The clock's reading as Unix seconds: a number, or a ``datetime`` (naive: UTC)."""
        value = self._clock()
        if isinstance(value, dt.datetime):
            return (value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)).timestamp()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise FreshviewError(f"the clock returned {value!r}: Unix seconds or a datetime expected")

    def next_due(self) -> float | None:
        """The earliest time (Unix seconds) a view's temporal filter has rows due at, or None: a step at or
        after it releases them."""
        dues = [d for d in (v.runner.next_due() for v in self.views.values()) if d is not None]
        return min(dues) / 1_000_000 if dues else None

    # ------------------------------------------------------------------ state TTL
    def _tick(self, now: int | None = None) -> ttl.Tick | None:
        if self.state_ttl is None:
            return None
        return ttl.Tick(self.state_ttl, now / 1_000_000 if now is not None else self._read_clock())

    def _touch_index(self, name: str, tick: ttl.Tick | None) -> ttl.TouchIndex | None:
        return self._source_owner(name).index if tick is not None else None

    def _source_owner(self, name: str) -> ttl.TtlOwner:
        """A source's copy as one TTL owner, keyed as the copy is (primary key, or the whole row)."""
        owner = self._ttl_owners.get(name)
        if owner is None:
            state = self.sources[name].arrangement
            layout = self.store.layout(state)
            key = list(layout.key)
            owner = self._ttl_owners[name] = ttl.TtlOwner(
                ttl.TouchIndex(state, layout.key_schema),
                lambda store, keys: ttl.drop_keys(store, state, keys),
                lambda store: ttl.distinct_keys(store, [state], key))
        return owner

    def _all_ttl_owners(self) -> dict[str, ttl.TtlOwner]:
        owners = {self.sources[n].arrangement: self._source_owner(n) for n in self.sources}
        for view in self.views.values():
            owners.update(view.runner.ttl_owners())
        return owners

    def sync_ttl(self) -> None:
        """On opening with a TTL: start the bookkeeping, rebuild it if the TTL changed or steps ran
        without one (their touches went unrecorded), index state kept without a TTL (every key as touched
        now), and key view outputs a TTL replaces rows in.  Without a TTL nothing changes."""
        if self.state_ttl is None:
            return
        meta = ttl.read_meta(self.store)
        width = ttl.bucket_width(self.state_ttl)
        rebuild = meta is not None and (meta.get("width") != width or bool(meta.get("stale")))
        owners = self._all_ttl_owners()
        rekey = [v for v in self.views.values() if self.store.layout(v.output) != self._output_layout(v)]
        if not (meta is None or rebuild or rekey or any(not o.index.indexed(self.store) for o in owners.values())):
            return
        tick = self._tick()
        assert tick is not None
        with self.transaction():
            if rebuild:
                ttl.drop_all(self.store)
            if meta is None or rebuild:
                ttl.start(self.store, width)
            for owner in owners.values():
                if not owner.index.indexed(self.store):
                    owner.seed(self.store, tick)
            for view in rekey:  # O(rows) once: a state directory written without a TTL
                rows = self.store.scan(view.output)
                self.store.drop_arrangement(view.output)
                self.store.ensure_arrangement(view.output, self._output_layout(view))
                if rows.num_rows:
                    self.store.load(view.output, rows)

    def tracked(self, view: str) -> dict[str, int]:
        """Under a TTL: per evicting operator of ``view`` (``op3``), how many keys its index holds."""
        return {arrangements.operator_part(op): o.index.tracked(self.store)
                for op, o in self.views[view].runner.ttl_owners().items()}

    def _replace_recreated(self, view: EngineView, out: pa.Table | None) -> pa.Table | None:
        """``out`` plus the retraction of the rows the view holds for groups its top aggregate started
        again after evicting them (one lookup by GROUP BY key): the new row replaces the old one."""
        probe = view.runner.recreated()
        if probe is None:
            return out
        stale = self.store.lookup(view.output, probe)
        if not stale.num_rows:
            return out
        stale = negate(stale)
        if out is None or not out.num_rows:
            return stale
        return consolidate(pa.concat_tables([out, stale.select(out.column_names).cast(out.schema)]))


def _default_budget() -> int:
    """An eighth of the machine's memory (2 GiB when it cannot be read): the input bytes a first
    computation takes in-process (its joins' intermediate results are a few times its inputs)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 8
    except (ValueError, OSError, AttributeError):
        return 2 * 2**30


def _row_bytes(schema: pa.Schema) -> int:
    """A row's bytes in Arrow, estimated: fixed widths as they are, 32 for variable-width values, plus the
    weight and the run's two hashes."""
    width = 24
    for f in schema:
        try:
            width += max(f.type.bit_width // 8, 1)
        except ValueError:
            width += 32
    return width


def _spark_cluster(session: Any) -> bool:
    """Whether the Spark of first computations is a cluster or Spark Connect (not a local session); without
    a session yet, what ``FRESHVIEW_SPARK_MASTER`` would start (no session is started to find out)."""
    if session is None:
        return not os.environ.get("FRESHVIEW_SPARK_MASTER", "local").startswith("local")
    if "connect" in type(session).__module__:
        return True
    try:
        return not str(session.sparkContext.master).startswith("local")
    except Exception:  # noqa: BLE001 -- a session without a context (Connect) is remote
        return True
