"""Circuit operators: a plan node, its incremental kind, and the state it owns.

Kinds follow DBSP: ``linear`` operators (Scan, Filter, Project, UnionAll)
satisfy Δ(f(R)) = f(ΔR) and keep nothing; ``bilinear`` Join keeps both
inputs integrated (indexed by key); ``aggregate`` keeps per-group
accumulators (and an ordered multiset per MIN/MAX); Distinct is an aggregate
over all columns.  Every view ends in an ``integrate`` of its output, which
is what ``snapshot`` reads and what views over this view start from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from freshview.plan import nodes as pn
from freshview.plan.explain import describe
from freshview.plan.expr import ColumnRef


@dataclass
class Operator:
    id: str
    node: pn.Node
    kind: str  # linear | join | aggregate
    state: tuple[str, ...] = ()
    inputs: list["Operator"] = field(default_factory=list)


@dataclass
class Circuit:
    view: str
    root: Operator
    output_state: str
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


def incrementalize(view: str, plan: pn.Node) -> Circuit:
    counter = [0]

    def lift(node: pn.Node) -> Operator:
        counter[0] += 1
        op_id = f"view/{view}/op{counter[0]}"
        if isinstance(node, pn.Distinct):
            node = distinct_as_aggregate(node)
        if isinstance(node, pn.Join):
            op = Operator(op_id, node, "join", (f"{op_id}/left", f"{op_id}/right"))
        elif isinstance(node, pn.Aggregate):
            extremes = tuple(f"{op_id}/ext{j}" for j, a in enumerate(node.aggs) if a.func in ("min", "max"))
            op = Operator(op_id, node, "aggregate", (f"{op_id}/acc",) + extremes)
        else:
            op = Operator(op_id, node, "linear")
        op.inputs = [lift(child) for child in node.inputs()]
        return op

    root = lift(plan)
    return Circuit(view, root, f"view/{view}/out", pn.relations(plan))


def render(circuit: Circuit, counts: dict[str, int] | None = None) -> str:
    lines = [f"Integrate → view {circuit.view}  [state {circuit.output_state}"
             + (f": {counts[circuit.output_state]} rows]" if counts and circuit.output_state in counts else "]")]

    def visit(op: Operator, depth: int) -> None:
        pad = "  " * depth
        label = {"linear": "", "join": "⋈ ", "aggregate": "Σ "}[op.kind]
        text = f"{pad}{label}{describe(op.node)}"
        if op.kind == "join" and not op.node.left_keys:  # type: ignore[attr-defined]
            text += "   (no equi-key: each change reads the other side whole)"
        lines.append(text)
        for s in op.state:
            n = f": {counts[s]} rows" if counts and s in counts else ""
            lines.append(f"{pad}    state {s}{n}")
        for child in op.inputs:
            visit(child, depth + 1)

    visit(circuit.root, 1)
    return "\n".join(lines)
