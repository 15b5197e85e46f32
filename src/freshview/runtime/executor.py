"""One step of one view's circuit: input deltas in, the view's delta out, on the kernels given.

The caller owns the transaction: everything an operator writes to the state
store in a step commits or rolls back together.  The caller also picks the
kernels (``runtime.kernels``): the delta rules here are the same for every
executor.  Spark failures (division by zero, overflow, bad casts under ANSI
mode) become ``ExecutionError`` with Spark's own one-line message, never a
JVM stack trace.

State TTL (``runtime.ttl``): with a ``Tick`` a step records the keys its
stateful operators touch; ``expire`` evicts, per owner (each equi-join, and
the view's top aggregate when its GROUP BY columns are output columns), the
keys past the TTL; ``recreated`` names the output rows the caller must
replace because their group was evicted and started again.
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator, TypeVar

import pyarrow as pa

from freshview.circuit import Circuit, Operator
from freshview.circuit.nodes import AggState, JoinState, RecomputeState, StateSpec, TemporalState, VectorState
from freshview.errors import ExecutionError
from freshview.plan import nodes as pn
from freshview.plan.flatmap import FlatMap
from freshview.plan.shape import result_key
from freshview.runtime import ttl
from freshview.runtime.kernels import Kernels, Rel
from freshview.runtime.operators import join as join_op
from freshview.runtime.operators.aggregate import Aggregation
from freshview.runtime.operators.flatmap import flatmap_delta
from freshview.runtime.operators.join import join_delta
from freshview.runtime.operators.linear import filter_delta, negate_delta, project_delta, union_delta
from freshview.runtime.operators.window import PartitionRecompute
from freshview.runtime.operators.recursive import Recursion
from freshview.runtime.operators.reweight import reweight_delta
from freshview.plan.temporal import TemporalFilter
from freshview.plan.vector import VectorSearch
from freshview.runtime.operators.temporal import TemporalSchedule
from freshview.runtime.operators.vector import VectorTopK
from freshview.runtime.relation import arrow_schema, col_name

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore

InputFn = Callable[[str], pa.Table | None]


class CircuitRunner:
    def __init__(self, circuit: Circuit, store: StateStore) -> None:
        self.circuit = circuit
        self.store = store
        self._aggs: dict[str, Aggregation] = {}
        self._recompute: dict[str, PartitionRecompute] = {}
        self._recursions: dict[str, Recursion] = {}
        self._vectors: dict[str, VectorTopK] = {}
        self._temporal = [TemporalSchedule(op.node, _state(op, TemporalState))  # type: ignore[arg-type]
                          for op in circuit.operators() if op.kind == "temporal"]
        self._now = 0  # the step's time (µs since the epoch, UTC), for temporal filters
        self._memo: dict[tuple[str, str], dict] = {}  # per (executor, operator): what its kernels built once
        self._tick: ttl.Tick | None = None
        self._owners: dict[str, ttl.TtlOwner] | None = None
        self._top = _top_aggregate(circuit)
        # operators whose state was taken from another circuit's (``runtime.reuse``): a first computation
        # emits their whole output from it instead of evaluating their inputs
        self.seeded: set[str] = set()
        self.silent: set[str] = set()  # ... and those whose output their consumer's taken state holds already

    def step(self, inputs: InputFn, kernels: Kernels, force: bool = False,
             tick: ttl.Tick | None = None, now: int = 0) -> pa.Table | None:
        """Evaluate the circuit; ``inputs(relation)`` gives that relation's change (or None); with a
        ``tick`` (a state TTL) the keys the step touches are recorded; ``now``: the step's time (µs since
        the epoch, UTC), which temporal filters release their due rows at."""
        with self._stepping(tick, now):
            delta = self._eval(self.circuit.root, inputs, kernels, force)
            if delta is None:
                return None
            return kernels.arrow(delta)

    def first(self, inputs: InputFn, kernels: Kernels, load: Callable[[Iterator[pa.Table]], int],
              tick: ttl.Tick | None = None, now: int = 0) -> int:
        """A first computation (``step`` with ``force``) whose output is handed to ``load`` in the
        kernels' bounded batches (``Kernels.batches``: on Spark, never collected whole); the rows
        loaded."""
        with self._stepping(tick, now):
            delta = self._eval(self.circuit.root, inputs, kernels, True)
            if delta is None:
                return 0
            return load(kernels.batches(delta))

    @contextmanager
    def _stepping(self, tick: ttl.Tick | None, now: int) -> Iterator[None]:
        for agg in self._aggs.values():
            agg.created = None
        self._tick = tick
        self._now = now
        try:
            yield
        except Exception as exc:
            if _is_spark_error(exc):  # pages of JVM frames otherwise
                raise ExecutionError(_spark_message(exc, self.circuit.view)) from None
            raise
        finally:
            self._tick = None

    # ------------------------------------------------------------------ time
    @property
    def scheduled(self) -> bool:
        """Whether the view has temporal filters (rows scheduled on the step's time)."""
        return bool(self._temporal)

    def next_due(self) -> int | None:
        """The earliest time (µs) one of the view's temporal filters has rows due at, or None."""
        dues = [d for d in (t.next_due(self.store) for t in self._temporal) if d is not None]
        return min(dues) if dues else None

    # ------------------------------------------------------------------ state TTL
    def ttl_owners(self) -> dict[str, ttl.TtlOwner]:
        """Per operator id, the state that evicts under a TTL (one ``ttl_<Node>`` per node kind)."""
        if self._owners is None:
            self._owners = {}
            for op in self.circuit.operators():
                make = getattr(self, f"ttl_{type(op.node).__name__}", None)
                owner = make(op) if make is not None else None
                if owner is not None:
                    self._owners[op.id] = owner
        return self._owners

    @property
    def output_key(self) -> tuple[int, ...] | None:
        """The output positions of the top aggregate's GROUP BY columns when it evicts under a TTL (the
        view's rows are then keyed by them, see ``recreated``), else None."""
        return self._top[1] if self._top is not None else None

    def ttl_Join(self, op: Operator) -> ttl.TtlOwner | None:
        return join_op.ttl_owner(_state(op, JoinState), op.node, op.id)  # type: ignore[arg-type]

    def ttl_Aggregate(self, op: Operator) -> ttl.TtlOwner | None:
        if self._top is None or self._top[0] is not op:
            return None  # its rows feed operators that could not replace them (operators.aggregate)
        return self._aggregation(op).ttl_owner(op.id)

    def expire(self, tick: ttl.Tick) -> int:
        """Evict every owner's keys past the TTL (inside the caller's transaction); how many."""
        return sum(owner.expire(self.store, tick) for owner in self.ttl_owners().values())

    def recreated(self) -> pa.Table | None:
        """After a step: the output key values (columns ``c<position>``) of the top aggregate's groups the
        step started anew; the caller retracts the output rows it holds for them (rows from before an
        eviction).  None when there are none."""
        if self._top is None:
            return None
        op, positions = self._top
        agg = self._aggs.get(op.id)
        if agg is None or agg.created is None or not agg.created.num_rows:
            return None
        return pa.Table.from_arrays(agg.group_values(agg.created), names=[col_name(p) for p in positions])

    def _touch(self, op: Operator):
        if self._tick is None:
            return None
        owner = self.ttl_owners().get(op.id)
        if owner is None:
            return None
        tick, store = self._tick, self.store
        return lambda keys, distinct=False: owner.index.touch(store, tick, keys, distinct)

    def _aggregation(self, op: Operator) -> Aggregation:
        agg = self._aggs.get(op.id)
        if agg is None:
            agg = self._aggs[op.id] = Aggregation(op.node, _state(op, AggState))  # type: ignore[arg-type]
        return agg

    def _memo_of(self, k: Kernels, op: Operator) -> dict:
        return self._memo.setdefault((k.name, op.id), {})

    def _eval(self, op: Operator, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        node = op.node
        if force and op.id in self.seeded:
            return self._seeded_output(op, k)
        if force and op.id in self.silent:
            return None
        visit = getattr(self, f"visit_{type(node).__name__}", None)
        if visit is None:
            raise ExecutionError(f"internal: no incremental operator for {type(node).__name__}")
        return visit(op, node, inputs, k, force)

    def _seeded_output(self, op: Operator, k: Kernels) -> Rel | None:
        """The whole output of an operator whose state holds its inputs' integral already (``seeded``)."""
        if op.kind == "join":
            return join_op.contents(k, op.node, _state(op, JoinState), self.store,  # type: ignore[arg-type]
                                    self._memo_of(k, op))
        return self._aggregation(op).contents(k, self.store)

    def visit_Scan(self, op: Operator, node: pn.Scan, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        table = inputs(node.relation)
        if table is None or table.num_rows == 0:
            return None
        return k.of_arrow(table)

    def visit_Constant(self, op: Operator, node: pn.Constant, inputs: InputFn, k: Kernels, force: bool
                       ) -> Rel | None:
        """Δ = the rows at the first computation (``force``), nothing after: the integral is the constant."""
        if not force or not node.rows:
            return None
        arrays = [pa.array([r[i] for r in node.rows], t.arrow) for i, (_, t) in enumerate(node.columns)]
        arrays.append(pa.array([1] * len(node.rows), pa.int64()))
        return k.of_arrow(pa.Table.from_arrays(arrays, schema=arrow_schema(node.columns)))

    def visit_Filter(self, op: Operator, node: pn.Filter, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        d = self._eval(op.inputs[0], inputs, k, force)
        return filter_delta(k, node, d, self._memo_of(k, op)) if d is not None else None

    def visit_Project(self, op: Operator, node: pn.Project, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        d = self._eval(op.inputs[0], inputs, k, force)
        return project_delta(k, node, d, self._memo_of(k, op)) if d is not None else None

    def visit_FlatMap(self, op: Operator, node: FlatMap, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        d = self._eval(op.inputs[0], inputs, k, force)
        return flatmap_delta(k, node, d, self._memo_of(k, op)) if d is not None else None

    def visit_UnionAll(self, op: Operator, node: pn.UnionAll, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        live = [p for p in (self._eval(i, inputs, k, force) for i in op.inputs) if p is not None]
        return union_delta(k, node, live) if live else None

    def visit_TemporalFilter(self, op: Operator, node: TemporalFilter, inputs: InputFn, k: Kernels, force: bool
                             ) -> Rel | None:
        """Runs whether or not its input changed: rows fall due as time passes (``operators.temporal``)."""
        d = self._eval(op.inputs[0], inputs, k, force)
        schedule = next(t for t in self._temporal if t.state == op.state)
        out = schedule.step(self.store, k.arrow(d) if d is not None else None, self._now)
        return k.of_arrow(out) if out is not None else None

    def visit_Negate(self, op: Operator, node: pn.Negate, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        d = self._eval(op.inputs[0], inputs, k, force)
        return negate_delta(k, node, d, self._memo_of(k, op)) if d is not None else None
    def visit_Reweight(self, op: Operator, node: pn.Reweight, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        d = self._eval(op.inputs[0], inputs, k, force)
        return reweight_delta(k, node, d, self._memo_of(k, op)) if d is not None else None

    def visit_Join(self, op: Operator, node: pn.Join, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        left = self._eval(op.inputs[0], inputs, k, force)
        right = self._eval(op.inputs[1], inputs, k, force)
        if left is None and right is None:
            return None
        return join_delta(k, node, op.state, self.store, left, right, self._memo_of(k, op), self._touch(op))

    def visit_Aggregate(self, op: Operator, node: pn.Aggregate, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        d = self._eval(op.inputs[0], inputs, k, force)
        return self._aggregation(op).step(k, self.store, d, force, self._touch(op))

    def visit_TopK(self, op: Operator, node: pn.TopK, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        return self._recompute_step(op, node, inputs, k, force)

    def visit_Window(self, op: Operator, node: pn.Window, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        return self._recompute_step(op, node, inputs, k, force)

    def _recompute_step(self, op: Operator, node, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        d = self._eval(op.inputs[0], inputs, k, force)
        rec = self._recompute.get(op.id)
        if rec is None:
            state = _state(op, RecomputeState)
            rec = self._recompute[op.id] = PartitionRecompute(node, state.input, state.top)
        return rec.step(k, self.store, d)
    def visit_Recursive(self, op: Operator, node: pn.Recursive, inputs: InputFn, k: Kernels, force: bool) -> Rel | None:
        deltas = [self._eval(i, inputs, k, force) for i in op.inputs]
        rec = self._recursions.get(op.id)
        if rec is None:
            rec = self._recursions[op.id] = Recursion(node, op.state, self.circuit.view)
        return rec.step(k, self.store, deltas, force)

    def visit_VectorSearch(self, op: Operator, node: VectorSearch, inputs: InputFn, k: Kernels, force: bool
                           ) -> Rel | None:
        op_ = self._vectors.get(op.id)
        if op_ is None:
            op_ = self._vectors[op.id] = VectorTopK(node, _state(op, VectorState), self.circuit.view)
        queries = inputs(node.queries.relation) if node.queries is not None else None
        out = op_.step(self.store, inputs(node.docs.relation), queries, force)
        return k.of_arrow(out) if out is not None else None

    def output_schema(self) -> pa.Schema:
        return arrow_schema(self.circuit.root.node.columns)


def _top_aggregate(circuit: Circuit) -> tuple[Operator, tuple[int, ...]] | None:
    """The aggregate a view's rows are keyed by (under filters and projections only, every GROUP BY
    column an output column; or a DISTINCT) and the output positions of its group columns, else None."""
    key = result_key(circuit.root.node)
    if key.counted or not key.key:
        return None
    op = circuit.root
    while isinstance(op.node, (pn.Filter, pn.Project)):
        op = op.inputs[0]
    return (op, key.key) if op.kind == "aggregate" else None


def _is_spark_error(exc: Exception) -> bool:
    """Spark's and py4j's exceptions; a process that never loaded them (local steps only) has none."""
    if "py4j.protocol" not in sys.modules or "pyspark.errors" not in sys.modules:
        return False
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return isinstance(exc, (PySparkException, Py4JJavaError))


_JAVA_EXCEPTION = re.compile(r"^:?\s*((?:[\w$]+\.)*[\w$]*(?:Exception|Error)): (.*)$", re.M)


def _spark_message(exc: Exception, view: str) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    from py4j.protocol import Py4JJavaError

    if isinstance(exc, Py4JJavaError) and not first.startswith("["):
        # "An error occurred while calling o12.method." then ": java.lang.OutOfMemoryError: ...": say the latter.
        found = _JAVA_EXCEPTION.search(text)
        if found:
            name = found.group(1).rsplit(".", 1)[-1]
            return f"view {view!r}: step failed: {name}: {found.group(2)[:500]}" + (
                " (raise FRESHVIEW_DRIVER_MEMORY)" if name == "OutOfMemoryError" else "")
    for marker in ("org.apache.spark.SparkArithmeticException: ", "SparkArithmeticException: ",
                   "org.apache.spark.", "java.lang."):
        if marker in text and not first.startswith("["):
            first = text.split(marker, 1)[1].splitlines()[0]
            break
    return f"view {view!r}: step failed: {first[:500]}"


_S = TypeVar("_S", JoinState, AggState, RecomputeState, VectorState, TemporalState)


def _state(op: Operator, kind: type[_S]) -> _S:
    """The operator's state spec, of the kind its node has (``circuit.nodes``)."""
    state: StateSpec = op.state
    assert isinstance(state, kind), (op.id, type(state).__name__)
    return state
