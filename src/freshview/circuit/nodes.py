"""Circuit operators: a plan node, its incremental kind, and the state it owns.

Kinds follow DBSP (plus ``temporal``: a filter on the step's time, ``runtime.operators.temporal``): ``linear`` operators (Scan, Filter, Project, UnionAll, Negate, Reweight)
satisfy Δ(f(R)) = f(ΔR) and keep nothing; ``bilinear`` Join keeps both
inputs integrated (indexed by key); ``aggregate`` keeps per-group
accumulators (and an ordered multiset per MIN/MAX); Distinct is an aggregate
over all columns.  Every view ends in an ``integrate`` of its output, which
is what ``snapshot`` reads and what views over this view start from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from freshview.circuit import arrangements as names
from freshview.circuit.arrangements import Arrangement
from freshview.errors import FreshviewError
from freshview.plan import nodes as pn
from freshview.plan.explain import describe
from freshview.plan.expr import ColumnRef
from freshview.plan.temporal import TemporalFilter
from freshview.plan.vector import VectorSearch


@dataclass(frozen=True)
class JoinState:
    """A join's state: each side's rows indexed by its join key."""

    left: Arrangement
    right: Arrangement

    @property
    def names(self) -> tuple[str, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class AggState:
    """An aggregate's state: per-group accumulators, one ordered multiset per MIN/MAX (in order), and
    one multiset of (group, value) per DISTINCT aggregate and string_agg (in order)."""

    acc: Arrangement
    extremes: tuple[Arrangement, ...] = ()
    values: tuple[Arrangement, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.acc,) + self.extremes + self.values


@dataclass(frozen=True)
class RecomputeState:
    """A TopK's or Window's state: its input, keyed by partition; for TopK also its current result."""

    input: Arrangement
    top: Arrangement | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.input,) + ((self.top,) if self.top else ())


@dataclass(frozen=True)
class RecursiveState:
    """A recursion's state: its inputs integrated (the anchor, then each external), and its last output."""

    inputs: tuple[Arrangement, ...]
    output: Arrangement

    @property
    def names(self) -> tuple[str, ...]:
        return self.inputs + (self.output,)


@dataclass(frozen=True)
class VectorState:
    """A vector view's state: its current top-k per query (its own), and the copies of its two sources
    that the flow keeps (``source/<name>``; read, never written)."""

    top: Arrangement
    docs: Arrangement
    queries: Arrangement | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.top,)


@dataclass(frozen=True)
class TemporalState:
    """A temporal filter's state: its rows keyed by their next bound (``pending``) and the multiset of
    those due times, ordered (``dues``: the earliest is the operator's next due time)."""

    pending: Arrangement
    dues: Arrangement

    @property
    def names(self) -> tuple[str, ...]:
        return (self.pending, self.dues)


source_state = names.source  # where the engine keeps a source's rows (keyed by its primary key)


StateSpec = JoinState | AggState | RecomputeState | RecursiveState | VectorState | TemporalState | None


@dataclass
class Operator:
    id: str
    node: pn.Node
    kind: str  # linear | join | aggregate | recompute | recursive | vector | temporal
    state: StateSpec = None
    inputs: list["Operator"] = field(default_factory=list)

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.state.names if self.state is not None else ()


@dataclass
class Circuit:
    view: str
    root: Operator
    output_state: Arrangement
    sources: set[str]

    def operators(self):
        stack = [self.root]
        while stack:
            op = stack.pop()
            yield op
            stack.extend(reversed(op.inputs))


def distinct_as_aggregate(node: pn.Distinct) -> pn.Aggregate:
    group = tuple(ColumnRef(t, i, n) for i, (n, t) in enumerate(node.input.columns))
    return pn.Aggregate(node.input, group, (), tuple(n for n, _ in node.input.columns))


_state = names.operator_state


class _Lift:
    """Plan node -> operator, one ``visit_<Node>`` per node kind; state names are ``view/<v>/op<n>/...``
    (``circuit.arrangements``)."""

    def __init__(self, view: str) -> None:
        self.view = view
        self.counter = 0

    def __call__(self, node: pn.Node) -> Operator:
        self.counter += 1
        op_id = names.operator(self.view, self.counter)
        visit = getattr(self, f"visit_{type(node).__name__}", self.visit_linear)
        op = visit(op_id, node)
        op.inputs = [self(child) for child in op.node.inputs()]
        return op

    def visit_linear(self, op_id: str, node: pn.Node) -> Operator:
        return Operator(op_id, node, "linear")

    def visit_Negate(self, op_id: str, node: pn.Negate) -> Operator:
        return self.visit_linear(op_id, node)
    def visit_Reweight(self, op_id: str, node: pn.Reweight) -> Operator:
        return Operator(op_id, node, "linear")

    def visit_Recursive(self, op_id: str, node: pn.Recursive) -> Operator:
        inputs = (_state(op_id, "anchor"),) + tuple(_state(op_id, f"ext{i}") for i in range(len(node.externals)))
        return Operator(op_id, node, "recursive", RecursiveState(inputs, _state(op_id, "out")))

    def visit_Distinct(self, op_id: str, node: pn.Distinct) -> Operator:
        return self.visit_Aggregate(op_id, distinct_as_aggregate(node))

    def visit_Join(self, op_id: str, node: pn.Join) -> Operator:
        return Operator(op_id, node, "join", JoinState(_state(op_id, "left"), _state(op_id, "right")))

    def visit_LogicalJoin(self, op_id: str, node: pn.LogicalJoin) -> Operator:
        raise FreshviewError(f"internal: a {node.kind} join reached the circuit unlowered "
                             "(plan.rewrite.joins.lower_joins runs in optimize)")

    def visit_Aggregate(self, op_id: str, node: pn.Aggregate) -> Operator:
        # MIN, MAX and a collation group's spelling keep a (group, value) multiset
        extremes = tuple(_state(op_id, f"ext{j}") for j, a in enumerate(node.aggs)
                         if a.definition.state == "extreme")
        values = tuple(_state(op_id, f"val{j}") for j, a in enumerate(node.aggs) if a.distinct or a.recomputed)
        return Operator(op_id, node, "aggregate", AggState(_state(op_id, "acc"), extremes, values))

    def visit_TopK(self, op_id: str, node: pn.TopK) -> Operator:
        return Operator(op_id, node, "recompute", RecomputeState(_state(op_id, "input"), _state(op_id, "top")))

    def visit_Window(self, op_id: str, node: pn.Window) -> Operator:
        return Operator(op_id, node, "recompute", RecomputeState(_state(op_id, "input")))

    def visit_TemporalFilter(self, op_id: str, node: TemporalFilter) -> Operator:
        return Operator(op_id, node, "temporal", TemporalState(_state(op_id, "pending"), _state(op_id, "dues")))

    def visit_VectorSearch(self, op_id: str, node: VectorSearch) -> Operator:
        queries = source_state(node.queries.relation) if node.queries is not None else None
        docs = source_state(node.docs.relation)
        return Operator(op_id, node, "vector", VectorState(_state(op_id, "top"), docs, queries))


def incrementalize(view: str, plan: pn.Node) -> Circuit:
    root = _Lift(view)(plan)
    return Circuit(view, root, names.view_output(view), pn.relations(plan))


def render(circuit: Circuit, counts: dict[str, int] | None = None) -> str:
    lines = [f"Integrate → view {circuit.view}  [state {circuit.output_state}"
             + (f": {counts[circuit.output_state]} rows]" if counts and circuit.output_state in counts else "]")]

    def visit(op: Operator, depth: int) -> None:
        pad = "  " * depth
        label = {"linear": "", "join": "⋈ ", "aggregate": "Σ ", "recompute": "↻ ", "recursive": "⟲ ",
                 "vector": "⊙ ", "temporal": "⏱ "}[op.kind]
        text = f"{pad}{label}{describe(op.node)}"
        if op.kind == "join" and not op.node.left_keys:  # type: ignore[attr-defined]
            text += "   (no equi-key: each change reads the other side whole)"
        if op.kind == "recompute":
            text += "   (each change recomputes the partitions it touches)"
        if op.kind == "temporal":
            text += "   (rows wait under their next time bound; a step releases those due)"
        if op.kind == "recursive":
            text += "   (a step that changes an input recomputes the whole fixpoint)"
        if op.kind == "vector":
            text += ("   (vectors in memory; a touched document is compared with every query, a query that "
                     "lost one of its k nearest recomputes)")
        lines.append(text)
        for s in op.state_names:
            n = f": {counts[s]} rows" if counts and s in counts else ""
            lines.append(f"{pad}    state {s}{n}")
        for child in op.inputs:
            visit(child, depth + 1)

    visit(circuit.root, 1)
    return "\n".join(lines)
