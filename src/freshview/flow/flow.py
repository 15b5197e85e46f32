"""IncrementalFlow: the catalog of sources and SQL views, and the public face of the engine's step.

A flow owns one state directory.  Its catalog (sources, views, dedup capacities, step number) lives in
the same store as operator state, so a step commits catalog, state and outputs in one transaction, and
``IncrementalFlow(state_dir=...)`` on an existing directory resumes exactly where the last commit left
off.  The step itself is the engine's (``runtime.engine``: sources, views in dependency order, their
integrates, TTL, holds, the transaction); the flow compiles SQL into plans, keeps the catalog, and
adapts what arrives (``tick``'s deltas, Debezium messages: ``flow.debezium``; dedup: ``flow.dedup``,
``flow.seen_set``) and what leaves (watches: ``flow.watches``; vector sinks: ``flow.vector_sinks``;
checkpoints: ``flow.checkpoint``).  ``prepare`` is the two-phase step (``flow.step``); ``tick`` is
``prepare`` then ``commit``.

(Longer than 800 lines because it is the public API's one class, its methods thin wrappers over the
modules named above; ``pin_source``/``adopt_source``, ``pin_view`` (``register_view(reusing=)``) and
``adopt_view`` serve the service's populations, ``service.population``.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa

from freshview.algebra.batch import consolidate, to_arrow_delta, with_unit_weight
from freshview.circuit import arrangements
from freshview.errors import CatalogError, DeltaError, FreshviewError, StateError, StateTooNew
from freshview.flow import checkpoint, seen_set
from freshview.flow.catalog import (CATALOG_FORMAT, CATALOG_KEY, READS, ViewEntry, ViewKind, check_name, dedup_text,
                                    parse_interval, source_schema_of)
from freshview.flow import dedup as dedup_module
from freshview.flow.debezium import DebeziumBatch, DebeziumEncoder, DebeziumWatch
from freshview.flow.explain import explain_text
from freshview.flow.step import COUNTERS, Counters, FlowStep
from freshview.flow.vector_sinks import VectorSinkHandle, VectorSinks
from freshview.flow.watches import Watch, Watches
from freshview.formats import debezium
from freshview.plan import nodes as pn
from freshview.plan import statistics as plan_statistics
from freshview.plan import vector as vector_plan
from freshview.plan.shape import result_key
from freshview.runtime.cost import MODES
from freshview.runtime.engine import Engine, EngineView, StepSummary, ViewStep
from freshview.runtime.holds import flush_due
from freshview.runtime.operators.source import ChangeRefused, SourceChange, checks as source_checks
from freshview.runtime.reuse import PinnedCircuit, pin_circuit
from freshview.runtime.state.adopt import adopt_arrangements
from freshview.runtime.state.pin import Pinned, pin
from freshview.runtime.state.store import SpineStateStore
from freshview.schema import WEIGHT, TableSchema
from freshview.sql import build_plan
from freshview.sql.dialect import get_dialect

__all__ = ["DebeziumEncoder", "DebeziumWatch", "FlowStep", "IncrementalFlow", "SourceChange", "StepSummary",
           "ViewStep", "Watch", "flush_due", "parse_interval", "source_checks", "source_schema_of"]



class IncrementalFlow:
    """Incrementally maintained SQL views over changing sources.

    ``execution`` says where steps run: ``"auto"`` (default) picks, per step
    and per view, the in-process executor or Spark with a cost model fed by
    the step times it measures; ``"local"`` runs every step in-process;
    ``"spark"`` runs every step on Spark.  A view's first computation runs in-process
    (``first_computation="auto"``) unless ``execution="spark"``, a cluster/Spark Connect session is
    configured or its inputs exceed ``memory_budget_mb`` (default 1/8 of the memory): then on Spark
    (``spark``, or a local session); ``"local"``/``"spark"`` force one (``cost.choose_first``, ``explain``).

    ``state_ttl`` (seconds, or text such as ``"1 day"``; default None: exact
    results, state kept forever) evicts state keys untouched for longer:
    source rows by primary key, join keys, the groups of a view's top
    aggregate (``runtime.ttl``).  Eviction is silent (the view keeps its
    rows); a late change to an evicted key is treated as new (a late delete
    reaches the views, whose operators drop what they no longer hold), and a
    re-started group's row replaces the one from before its eviction.

    ``clock`` (default ``time.time``): returns Unix seconds or a ``datetime`` (naive: UTC), read once per
    step: ``now()`` of every time-based view in the step, and the TTL's clock (tests pass a fake one).

    >>> flow = IncrementalFlow()  # doctest: +SKIP
    >>> flow.register_source("t", "id INT, v INT", primary_key=["id"])  # doctest: +SKIP
    """

    _clock = staticmethod(time.time)  # the step's time (``clock``); the wall clock by default

    def __init__(self, spark: Any = None, state_dir: str | Path | None = None, *, cache_mb: int = 256,
                 execution: str = "auto", dialect: str = "postgres", default_schema: str = "public",
                 flush_interval: float | str | None = None, state_ttl: float | str | None = None,
                 first_computation: str = "auto", memory_budget_mb: float | None = None,
                 clock: Callable[[], Any] | None = None) -> None:
        if clock is not None:
            self._clock = clock
        if execution not in MODES:
            raise FreshviewError(f"execution must be one of {', '.join(MODES)}, not {execution!r}")
        self.default_schema = default_schema  # ``<default_schema>.x`` in view SQL is the relation ``x``
        try:
            self.dialect = get_dialect(dialect)  # how view SQL is read and computed (sql/dialect.py)
        except ValueError as err:
            raise FreshviewError(str(err)) from None
        self.flush_interval = parse_interval(flush_interval)
        self.state_ttl = parse_interval(state_ttl)
        if self.state_ttl == 0:
            raise FreshviewError("state_ttl must be longer than 0 (None keeps state forever)")
        self._tmp = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="freshview-")
            state_dir = self._tmp.name
        self.state_dir = Path(state_dir)
        self._cache_mb = cache_mb
        store = SpineStateStore(self.state_dir, cache_mb=cache_mb)
        try:
            self.engine = Engine(store, execution=execution, first_computation=first_computation,
                                 state_ttl=self.state_ttl, flush_interval=self.flush_interval,
                                 clock=lambda: self._clock(), spark=spark, memory_budget_mb=memory_budget_mb)
        except BaseException:
            store.close()
            raise
        self._lock = threading.RLock()
        self._entries: dict[str, ViewEntry] = {}  # view -> its catalog entry (definition, statistics planned with)
        self._compiling: dict[str, EngineView] = {}  # views being registered (visible to the next ones' SQL)
        self._dedup: dict[str, int] = {}  # source -> seen-set capacity, for sources registered with dedup=True
        self._counters = Counters()
        self._watches = Watches()
        self._vector_sinks = VectorSinks()  # attach_vector_sink
        self._closed = False
        try:
            self._open()
        except BaseException:
            store.close()
            raise

    # ------------------------------------------------------------------ the engine's settings
    @property
    def store(self) -> SpineStateStore:
        return self.engine.store

    @property
    def execution(self) -> str:
        return self.engine.execution

    @property
    def first_computation(self) -> str:
        return self.engine.first_computation

    @property
    def _spark(self) -> Any:
        return self.engine._spark

    @property
    def spark(self) -> Any:
        """The SparkSession of first computations and Spark steps (started on first use)."""
        return self.engine.spark

    def kernels(self, executor: str):
        """The kernels of ``executor``: "local", "spark", or "bulk" (first computations, on Spark)."""
        return self.engine.kernels(executor)

    # ------------------------------------------------------------------ catalog
    def _open(self) -> None:
        """Resume the catalog from the store, then the holds and the TTL bookkeeping."""
        data = self.store.get_meta(CATALOG_KEY)
        if data:
            if isinstance(data.get("format"), int) and data["format"] > CATALOG_FORMAT:
                raise StateTooNew(f"{self.state_dir} holds the catalog of a newer freshview (format {data['format']}; "
                                  f"this one reads {CATALOG_FORMAT}): run that version, or point --state-dir elsewhere")
            if data.get("format") not in READS:
                raise StateError(f"{self.state_dir} holds state of an unknown format")
            self.engine.step = data["step"]
            for name, schema in data["sources"].items():
                self.engine.open_source(name, TableSchema.from_json(schema))
            self._dedup = {name: int(capacity) for name, capacity in data.get("dedup", {}).items()}
            self._counters.load(self.store)
            for stored in data["views"]:  # (format 3's entries migrated: ``ViewEntry.from_json``)
                self.engine.open_view(self._compile(ViewEntry.from_json(stored)))
        if self.engine.holds is not None:
            self.engine.holds.load(self.store, self.engine.views)
        self.engine.sync_ttl()

    def _save_catalog(self) -> None:
        self.store.set_meta(CATALOG_KEY, {
            "format": CATALOG_FORMAT,
            "step": self.engine.step,
            "sources": {n: s.schema.to_json() for n, s in self.engine.sources.items()},
            "dedup": dict(self._dedup),
            "views": [self._entries[name].to_json() for name in self.engine.views],
        })

    @contextlib.contextmanager
    def _transaction(self, undo: Callable[[], Any] | None = None) -> Iterator[None]:
        """One atomic change of catalog and state; on any error, roll back and ``undo``."""
        with self.engine.transaction(undo):
            yield
            self._save_catalog()

    def relation_columns(self, name: str):
        """Catalog protocol for the SQL front end."""
        if name in self.engine.sources:
            return tuple((c.name, c.type) for c in self.engine.sources[name].schema.columns), False
        view = self.engine.views.get(name) or self._compiling.get(name)
        if view is not None:
            return view.columns, True
        return None

    @property
    def sources(self) -> list[str]:
        return list(self.engine.sources)

    @property
    def views(self) -> list[str]:
        return list(self.engine.views)

    @property
    def step(self) -> int:
        return self.engine.step

    def source_schema(self, name: str) -> TableSchema:
        if name not in self.engine.sources:
            raise CatalogError(f"unknown source {name!r}")
        return self.engine.sources[name].schema

    def view_columns(self, name: str) -> pn.Columns:
        return self._view(name).columns

    def view_plan(self, name: str) -> pn.Node:
        """The view's logical plan (after pushdown and pruning)."""
        return self._view(name).plan

    def readers(self, name: str) -> list[str]:
        """Views that read the source or view ``name`` directly, in registration order."""
        return self.engine.readers(name)

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
            check_name(name, "source")
            if not isinstance(dedup, bool):
                raise CatalogError(f"dedup must be True or False, not {dedup!r}")
            try:
                capacity = dedup_module.check_capacity(dedup_capacity) if dedup else None
            except ValueError as exc:
                raise CatalogError(str(exc)) from None
            parsed = source_schema_of(schema, primary_key)
            if name in self.engine.sources:
                if self.engine.sources[name].schema != parsed:
                    raise CatalogError(f"source {name!r} is already registered with a different schema")
                if self._dedup.get(name) != capacity:
                    raise CatalogError(f"source {name!r} is already registered with "
                                       f"{dedup_text(self._dedup.get(name))}, not {dedup_text(capacity)}")
                return  # resumed flow: same declaration
            if name in self.engine.views:
                raise CatalogError(f"{name!r} is already a view")

            def undo() -> None:
                self.engine.sources.pop(name, None)
                self._dedup.pop(name, None)
            with self._transaction(undo=undo):
                self.engine.add_source(name, parsed)
                if capacity is not None:
                    seen_set.ensure(self.store, name)
                    self._dedup[name] = capacity

    def load_source(self, name: str, chunks: Iterable[Any]) -> int:
        """A source's rows in bulk as one step (Arrow/pandas chunks of its columns, ``_weight`` default 1); the
        rows loaded.  Into an empty copy no view reads: sorted runs, spilled to files (``Engine.load_source``);
        a NULL or duplicate primary key (over all chunks), wrong array length or negative weight is refused
        (``DeltaError``) and nothing loaded.  Else (filled, read by a view, TTL, dedup): one ``tick`` a chunk."""
        with self._lock:
            self._check_open()
            schema = self.source_schema(name).arrow(with_weight=True)
            tables = (to_arrow_delta(with_unit_weight(chunk), schema) for chunk in chunks)
            if name in self._dedup or self.engine.bulk_refusal(name) is not None:
                loaded = 0
                for table in tables:
                    self.tick(name, table)
                    loaded += table.num_rows
                return loaded
            step = self.engine.step

            def undo() -> None:
                self.engine.step = step
                self._counters.load(self.store)
            with self._transaction(undo=undo):
                loaded = self.engine.load_source(name, tables)
                self._counters.add(self.store, rows_in_total=loaded)
            return loaded

    def adopt_source(self, name: str, pinned: Pinned) -> int:
        """Fill source ``name``'s empty copy with another flow's copy of the same table as pinned
        (``pin_source``; the same columns and key) in one step: its run files linked, no row copied
        (``Engine.adopt_source``); the rows stored.  How a population beside the service's stream takes
        a table the service follows already (``service.population``)."""
        with self._lock:
            self._check_open()
            self.source_schema(name)  # (an unknown source: its error)
            step = self.engine.step

            def undo() -> None:
                self.engine.step = step
            with self._transaction(undo=undo):
                return self.engine.adopt_source(name, pinned)

    def drop_source(self, name: str) -> None:
        """Forget a source and its state (refused while a view reads it)."""
        with self._lock:
            schema = self.source_schema(name)
            users = self.readers(name)
            if users:
                raise CatalogError(f"cannot drop source {name!r}: views {', '.join(users)} read it")
            capacity = self._dedup.get(name)

            def undo() -> None:
                self.engine.open_source(name, schema)
                if capacity is not None:
                    self._dedup[name] = capacity
            with self._transaction(undo=undo):
                self.engine.drop_source(name)
                seen_set.drop(self.store, name)
                self._dedup.pop(name, None)
            self._vector_sinks.detach_all(name)

    # ------------------------------------------------------------------ views
    def _compile(self, entry: ViewEntry) -> EngineView:
        """``entry.statistics``: the relations' sizes to plan with (a resumed view's, from the catalog, so it
        gets the plan its state was built for); None: the state's now, as the planner asks for them.  The
        entry, with the statistics used, goes to the catalog."""
        used = plan_statistics.Observed(self._relation_statistics) if entry.statistics is None else entry.statistics
        if entry.kind is ViewKind.VECTOR:
            assert entry.vector is not None
            schemas = {n: source.schema for n, source in self.engine.sources.items()}
            plan = vector_plan.build(entry.vector, schemas.get)
        else:
            assert entry.sql is not None
            plan = build_plan(entry.sql, self, self.dialect, statistics=used)
        self._entries[entry.name] = dataclasses.replace(entry, statistics=dict(used))
        return self.engine.compile(entry.name, plan)

    def _relation_statistics(self, name: str) -> plan_statistics.RelationStats | None:
        """A source's or view's rows in state (and a source's primary key), for the planner."""
        if name in self.engine.sources:
            source = self.engine.sources[name]
            keys = (source.schema.primary_key,) if source.schema.primary_key else ()
            return plan_statistics.RelationStats(self.store.count(source.arrangement), keys)
        view = self.engine.views.get(name)
        if view is not None and self.store.has_arrangement(view.output):  # (not while registered with it)
            return plan_statistics.RelationStats(self.store.count(view.output))
        return None

    def register_view(self, name: str, sql: str, *, reusing: PinnedCircuit | None = None) -> None:
        """Compile ``sql`` into an incremental circuit and compute its current result (on Spark).
        ``reusing``: another view's circuit over the same sources' contents, as pinned (``pin_view``;
        ``alter_view``'s population): the operators the two share start from its state
        (``runtime.reuse``), linked, instead of being computed again."""
        self._register([ViewEntry.of_sql(name, sql)], {name: reusing} if reusing is not None else None)

    def register_views(self, views: Sequence[tuple[str, str]]) -> None:
        """Register several views at once, in order (a later one may read an earlier one).

        All are compiled before any is computed (an error in any registers
        none), their first computations run in one transaction, and each
        source they read is read from state once for all of them.
        """
        self._register([ViewEntry.of_sql(name, sql) for name, sql in views])

    def _register(self, entries: Sequence[ViewEntry], reusing: Mapping[str, PinnedCircuit] | None = None) -> None:
        with self._lock:
            self._check_open()
            new: list[EngineView] = []
            try:
                for entry in entries:
                    name = entry.name
                    check_name(name, "view")
                    if name in self.engine.views:
                        if self._entries[name].same_definition(entry) and name not in self._compiling:
                            continue  # registered before, the same: nothing to do
                        raise CatalogError(f"view {name!r} already exists with a different definition; "
                                           "drop_view it first")
                    if name in self._compiling:
                        raise CatalogError(f"view {name!r} already exists with a different definition; "
                                           "drop_view it first")
                    if name in self.engine.sources:
                        raise CatalogError(f"{name!r} is already a source")
                    view = self._compiling[name] = self._compile(entry)  # visible to the next views' SQL
                    new.append(view)
            except BaseException:
                for view in new:
                    self._entries.pop(view.name, None)
                raise
            finally:
                self._compiling.clear()
            if not new:
                return
            contents: dict[str, pa.Table | None] = {}  # each input read once for all the new views

            def current(relation: str) -> pa.Table | None:
                if relation not in contents:
                    contents[relation] = self._current_contents(relation)
                return contents[relation]

            def undo() -> None:
                for view in new:
                    self.engine.views.pop(view.name, None)
                    self._entries.pop(view.name, None)
            with self._transaction(undo=undo):
                self.engine.add_views(new, current, reusing)

    def adopt_view(self, scratch: "IncrementalFlow", name: str, sources: Sequence[str] = ()) -> None:
        """Take view ``name`` as ``scratch`` (another flow over the same sources) computed it: its catalog
        entry (so the same plan), its state, and the new ``sources`` it reads (their copies too), in one
        transaction, its run files linked, no row copied (``runtime.state.adopt``).  Every other source it
        reads must be this flow's already, with the same columns.  How a population beside the service's
        stream joins it (``service.population``)."""
        with self._lock:
            self._check_open()
            if self.engine.holds is not None or self.state_ttl is not None:
                raise CatalogError("a view can be adopted only by a flow without flush_interval or state_ttl")
            if name in self.engine.views or name in self.engine.sources:
                raise CatalogError(f"{name!r} already exists")
            theirs = scratch._view(name)
            for source in theirs.circuit.sources:
                mine = self.engine.sources.get(source) if source not in sources else None
                if source not in sources and (mine is None or mine.schema != scratch.source_schema(source)):
                    raise CatalogError(f"view {name!r} reads {source!r}, which this flow does not hold as it was read")
            entry = scratch._entries[name]

            def undo() -> None:
                for source in sources:
                    self.engine.sources.pop(source, None)
                self.engine.views.pop(name, None)
                self._entries.pop(name, None)
            with self._transaction(undo=undo):
                for source in sources:
                    self.engine.add_source(source, scratch.source_schema(source))
                view = self._compile(entry)  # the statistics it was planned with: the same plan
                if view.plan != theirs.plan:
                    raise StateError(f"view {name!r} compiles to another plan here; it cannot be adopted")
                self.engine.open_view(view)
                names = [arrangements.source(s) for s in sources]
                adopt_arrangements(scratch.store, self.store,
                                   [*names, *scratch.store.list_arrangements(arrangements.view_prefix(name))])

    def _current_contents(self, relation: str) -> pa.Table | None:
        return self.engine.contents(relation)

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
        self._register([ViewEntry.of_vector(name, definition)])

    def drop_view(self, name: str) -> None:
        with self._lock:
            view = self._view(name)
            users = self.readers(name)
            if users:
                raise CatalogError(f"cannot drop view {name!r}: views {', '.join(users)} read it")
            entry = self._entries[name]
            views = dict(self.engine.views)

            def undo() -> None:
                self.engine.views.clear()
                self.engine.views.update(views)
                self._entries[name] = entry
            with self._transaction(undo=undo):
                self.engine.drop_view(view.name)
                del self._entries[name]
            self._watches.close(name)
            self._vector_sinks.detach_all(name)

    # ------------------------------------------------------------------ application metadata
    def get_meta(self, key: str, default: Any = None) -> Any:
        """A JSON value a connector keeps with the engine's state (e.g. its source position)."""
        with self._lock:
            return self.store.get_meta(f"app/{key}", default)

    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON value; inside a prepared step (``before_commit``) it commits with the step, else at once
        (a prepared step's own: ``FlowStep.set_meta``)."""
        with self._lock:
            if self.store.in_transaction:
                self.store.set_meta(f"app/{key}", value)
            else:
                with self._transaction():
                    self.store.set_meta(f"app/{key}", value)

    # ------------------------------------------------------------------ steps
    def prepare(self, source: str | Mapping[str, Any], delta: Any = None) -> FlowStep:
        """The two-phase step (``flow.step``): ``prepare("orders", delta)`` or ``prepare({"a": d1, "b": d2})``
        applies the step inside the state's transaction and returns it open: write ``outputs``, then
        ``commit()`` (or ``abort()``).  One prepared step at a time.  When a view's operator fails, the
        error's ``view`` attribute names the view (a source's change: ``source``).

        A delta is weighted rows (an Arrow table or pandas DataFrame with ``_weight``), or a
        ``SourceChange`` (``runtime/operators/source.py``): also keyed upserts and deletes whose old rows
        the engine looks up (once), truncates and checks.  A dedup source takes weighted rows only."""
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
            rows: dict[str, SourceChange] = {}
            digests: dict[str, bytes] = {}
            for name, data in changes.items():
                given = data if isinstance(data, SourceChange) else SourceChange(rows=data)
                if name in self._dedup and (given.keyed or given.truncate):
                    raise DeltaError(f"source {name!r} is registered with dedup=True: its changes are weighted "
                                     "rows (a batch is known by its rows)")
                table = None if given.rows is None else \
                    to_arrow_delta(given.rows, self.source_schema(name).arrow(with_weight=True))
                if table is not None and name in self._dedup:  # the digest is of the consolidated batch
                    table = consolidate(table)  # (else the source operator consolidates, hashing once)
                rows[name] = dataclasses.replace(given, rows=table)
                if name in self._dedup and table is not None and table.num_rows:  # (an empty batch: never skipped)
                    digests[name] = dedup_module.digest(table)
            return self._prepare(rows, digests, {}, started)

    def tick(self, source: str | Mapping[str, Any], delta: Any = None, *,
             before_commit: Callable[[dict[str, pa.Table]], None] | None = None) -> StepSummary:
        """Apply one atomic step: ``tick("orders", delta)`` or ``tick({"a": d1, "b": d2})`` — ``prepare``
        then ``commit``.

        ``before_commit(outputs)`` (a shorthand for ``prepare`` → write → ``commit``) runs between the two with
        each changed view's delta (named columns + ``_weight``); if it raises, the step is rolled back.
        """
        with self._lock:
            return self._commit(self.prepare(source, delta), before_commit)

    def advance(self, *, before_commit: Callable[[dict[str, pa.Table]], None] | None = None) -> StepSummary:
        """``tick({})``: a step of no source change; time-based views take in and drop the rows due."""
        return self.tick({}, before_commit=before_commit)

    def next_due(self) -> float | None:
        """When (Unix seconds) a time-based view next changes with no source change (``advance``), or None."""
        with self._lock:
            self._check_open()
            return self.engine.next_due()

    @staticmethod
    def _commit(step: FlowStep, before_commit: Callable[[dict[str, pa.Table]], None] | None) -> Any:
        with step:
            if before_commit is not None:
                before_commit(step.outputs)
            return step.commit()

    def _prepare(self, changes: dict[str, SourceChange], digests: dict[str, bytes], meta: dict[str, Any],
                 started: float) -> FlowStep:
        """The engine's step with the flow's own writes inside it: sources whose batch digest is in
        ``digests`` and seen before are skipped (the others' digests recorded), counters, ``meta``
        (app keys), the catalog (the new step number)."""
        decisions = {n: seen_set.decide(self.store, n, d, self._dedup[n]) for n, d in digests.items()}
        skipped = [n for n, d in decisions.items() if d.skip]
        for name in skipped:
            changes[name] = SourceChange()
        prepared = self.engine.prepare(changes)
        try:
            dropped = sum(seen_set.record(self.store, n, digests[n], d) for n, d in decisions.items())
            summary = prepared.summary
            assert summary is not None
            summary.deduplicated = skipped
            self._counters.add(self.store, rows_in_total=summary.rows_in, rows_out_total=summary.rows_out,
                               dedup_skipped_total=len(skipped), dedup_dropped_total=dropped)
            for key, value in meta.items():
                prepared.set_meta(f"app/{key}", value)
            self._save_catalog()
        except BaseException:
            prepared.abort()
            self._counters.load(self.store)
            raise
        return FlowStep(prepared, self._lock, self._watches, self._vector_sinks, self._counters, self.store, started)

    def metrics(self) -> dict[str, int]:
        """The flow's counters, kept with its state (they survive a restart and travel with checkpoints).

        ``steps_total`` (the step number), ``rows_in_total`` (consolidated source rows applied),
        ``rows_out_total`` (view change rows), ``dedup_skipped_total`` (batches skipped as already
        seen), ``dedup_dropped_total`` (digests dropped from a seen set for capacity),
        ``dedup_recorded_total`` (digests recorded), ``dedup_entries`` (digests held now, all sources).
        """
        with self._lock:
            self._check_open()
            states = [seen_set.state(self.store, n) for n in self._dedup]
            return {"steps_total": self.engine.step,
                    **{k: int(self._counters.values.get(k, 0)) for k in COUNTERS},
                    "dedup_recorded_total": sum(s.next for s in states),
                    "dedup_entries": sum(s.size for s in states)}

    def prepare_flush(self, force: bool = True) -> FlowStep:
        """The view changes held back by ``flush_interval`` (all, or with ``force=False`` only those due)
        as a prepared step of no source change (``outputs``; nothing without a flush interval)."""
        with self._lock:
            self._check_open()
            prepared = self.engine.prepare_flush(force)
            return FlowStep(prepared, self._lock, self._watches, self._vector_sinks, self._counters, self.store,
                            time.perf_counter())

    def flush(self, force: bool = True, before_commit: Callable[[dict[str, pa.Table]], None] | None = None
              ) -> dict[str, pa.Table]:
        """Emit the view changes held back by ``flush_interval`` (all of them, or with ``force=False``
        only those due) to watches and ``before_commit``, without a step; returns them (named columns +
        ``_weight``).  A caller with a flush interval calls this when its input is idle."""
        with self._lock:
            self._check_open()
            if self.flush_interval is None:
                return {}
            step = self.prepare_flush(force)
            with step:
                named = step.outputs
                if before_commit is not None and named:
                    before_commit(named)
                step.commit()
            return named

    # ------------------------------------------------------------------ Debezium messages
    def prepare_debezium(self, source: str | Mapping[str, Iterable[Any]],
                         messages: Iterable[Any] | None = None) -> FlowStep:
        """``tick_debezium``'s step, prepared (``prepare``)."""
        if isinstance(source, str):
            batches = {source: messages if messages is not None else ()}
        elif isinstance(source, Mapping) and messages is None:
            batches = dict(source)
        else:
            raise DeltaError("tick_debezium takes a source name and messages, or a mapping of source name to messages")
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            schemas = {name: self.source_schema(name) for name in batches}
            batch = DebeziumBatch.read(batches, schemas, self._dedup, self.store, lenient=self.state_ttl is not None)
            if batch.error is not None:  # refused whatever the rows are: unless an earlier message's check fails
                wanted = batch.checks_before_error()
                if wanted:
                    try:
                        self.engine.prepare(wanted).abort()
                    except ChangeRefused as exc:
                        raise batch.refusal(exc) from None
                raise batch.error
            try:
                return self._prepare(batch.changes, batch.digests, batch.meta, started)
            except ChangeRefused as exc:
                raise batch.refusal(exc) from None

    def tick_debezium(self, source: str | Mapping[str, Iterable[Any]], messages: Iterable[Any] | None = None, *,
                      before_commit: Callable[[dict[str, pa.Table]], None] | None = None) -> StepSummary:
        """Apply Debezium change messages as one atomic step (``formats.debezium``, ``flow.debezium``):
        ``tick_debezium("orders", messages)`` or ``tick_debezium({"orders": m1, "customers": m2})``.

        Messages are ``str``/``bytes`` JSON or dicts, with or without the ``{"schema", "payload"}``
        envelope.  Old rows of ``u``/``d`` come from the source's state by primary key (the engine's one
        lookup); a message that does not fit (malformed, a type that does not fit a column, a ``u``/``d``
        of a key that does not exist) raises ``MessageError`` with its source and offset and nothing is
        applied.  The last message's ``ts_ms`` and ``source`` block are kept with the step
        (``get_meta("debezium/<source>")``).  ``before_commit`` as for ``tick``.
        """
        with self._lock:
            return self._commit(self.prepare_debezium(source, messages), before_commit)

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

    # ------------------------------------------------------------------ vector sinks
    def attach_vector_sink(self, name: str, sink: Any) -> VectorSinkHandle:
        """Keep a vector store (``freshview.vector.PgVectorSink``, ``LanceDBSink``, …) equal to the view or
        source ``name``: filled now, then each committed step's change as upserts and deletes by key (a
        source's primary key; a view's result key: ``plan.shape``, a vector view's (query key, rank)).
        Returns the attachment's handle (``flow/vector_sinks.py``); not kept across restarts."""
        with self._lock:
            self._check_open()
            if name in self.engine.views:
                view = self.engine.views[name]
                rk = result_key(view.plan)
                if rk.counted or not rk.key:
                    raise CatalogError(f"view {name!r} has no key to upsert by (its rows may repeat): a vector "
                                       "sink stores a source, a vector view, or a view keyed by GROUP BY/DISTINCT")
                columns, key = view.columns, tuple(view.columns[i][0] for i in rk.key)
            elif name in self.engine.sources:
                schema = self.engine.sources[name].schema
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

    # ------------------------------------------------------------------ reading
    def snapshot(self, name: str, weighted: bool = False) -> pa.Table:
        """Current rows of a view (or source); a row present n times appears n times.

        ``weighted=True`` returns each distinct row once with its multiplicity
        in ``_weight`` instead (a delta that builds the view from nothing).
        """
        with self._lock:
            return self.engine.rows(name, weighted)

    def pin_source(self, name: str) -> Pinned:
        """A source's copy as committed now, readable from another thread while steps go on (``runtime.state.pin``)."""
        with self._lock:
            self._check_open()
            self.source_schema(name)  # (an unknown source: its error)
            return pin(self.store, arrangements.source(name))

    def pin_view(self, name: str) -> PinnedCircuit:
        """A view's operators with their state as committed now (``runtime.reuse``), readable from another
        thread while steps go on: what ``register_view(reusing=)`` in another flow starts from."""
        with self._lock:
            self._check_open()
            return pin_circuit(self._view(name).circuit, self.store)

    def source_rows(self, name: str, keys: pa.Table) -> pa.Table:
        """Current rows of a keyed source whose primary key is in ``keys`` (index lookups).

        For a caller that needs old rows' values itself (the service: PostgreSQL's unchanged TOAST
        values); a change given by key (``SourceChange(upserts=..., deletes=...)``) has its old rows
        looked up by the engine, once, inside its step.
        """
        with self._lock:
            self.source_schema(name)
            return self.engine.lookup(name, keys)

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
                return self._watches.add(Watch(self._watches, name, timeout))
            if format == "debezium":
                encoder = self.debezium_encoder(name, decimal_handling, schemas)
                return self._watches.add(DebeziumWatch(self._watches, name, timeout, encoder))
            raise FreshviewError(f"watch_output format must be 'arrow' or 'debezium', not {format!r}")

    def explain(self, name: str) -> str:
        with self._lock:
            view = self._view(name)
            counts = {a: self.store.count(a) for a in self.store.list_arrangements(arrangements.view_prefix(name))}
            tracked = self.engine.tracked(name) if self.state_ttl is not None else None
            return explain_text(name, view, self.execution, counts, self.state_ttl, tracked)

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
            self.engine._check_idle()
            manifest, runs = self.store.export()
            return checkpoint.write(uri, self.state_dir, manifest, runs, self.engine.step, full, storage_options)

    def restore(self, uri: str, *, storage_options: Mapping[str, Any] | None = None) -> "checkpoint.CheckpointInfo":
        """Replace this flow's state by the last checkpoint at ``uri`` (also on a fresh flow): sources,
        views, catalog, step, dedup seen sets, counters and connectors' positions (``get_meta``); the
        next tick resumes from its step.  Watches end.  On an error the flow keeps its state.  ``uri``
        and ``storage_options`` as for ``checkpoint``."""
        with self._lock:
            self._check_open()
            self.engine._check_idle()
            started = time.perf_counter()
            number, doc = checkpoint.read_latest(uri, storage_options)
            staging, files, size = checkpoint.stage(  # fetched and readable before anything changes
                uri, doc, self.state_dir.parent, lambda d: SpineStateStore(d, cache_mb=self._cache_mb).close(),
                storage_options)
            self.store.close()
            self._watches.close()
            shutil.rmtree(self.state_dir, ignore_errors=True)
            staging.rename(self.state_dir)
            self.engine.reset(SpineStateStore(self.state_dir, cache_mb=self._cache_mb))
            self._entries, self._dedup, self._counters = {}, {}, Counters()
            self._open()
            self._vector_sinks.refill(lambda n: self.snapshot(n) if n in self.engine.views or n in self.engine.sources
                                      else None)
            return checkpoint.CheckpointInfo(uri, number, doc["kind"], self.engine.step, size, files,
                                             time.perf_counter() - started)

    # ------------------------------------------------------------------ life
    def _view(self, name: str) -> EngineView:
        if name not in self.engine.views:
            raise CatalogError(f"unknown view {name!r}")
        return self.engine.views[name]

    def _check_open(self) -> None:
        if self._closed:
            raise FreshviewError("this IncrementalFlow is closed")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._watches.close()
            self._vector_sinks.close()
            self.store.close()  # (rolls back a step prepared and never committed)
            if self._tmp is not None:
                self._tmp.cleanup()

    def __enter__(self) -> "IncrementalFlow":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

