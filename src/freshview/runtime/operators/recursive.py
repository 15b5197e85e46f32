"""WITH RECURSIVE: the fixpoint of a linear recursive term, recomputed from integrated inputs.

PostgreSQL evaluates ``anchor UNION [ALL] step`` iteratively: the working
table starts as the anchor's rows (UNION: without duplicates); each iteration
evaluates the recursive term over the working table only, and its rows
(UNION: those not produced before) are added to the result and become the
next working table, until the working table is empty.  Because the term is
linear in the recursive reference (the builder refuses a second reference,
and aggregates, DISTINCT or set operations between it and the output), this
is semi-naive evaluation: each iteration reads only the last one's rows.

Delta rule (recompute and diff): with I the operator's inputs (anchor and
the parts of the recursive term that do not depend on the recursion), kept
integrated in state, and out the last output, also in state,

    I' = I + ΔI,    Δout = fix(I') − out,    out' = fix(I')

where ``fix`` is the iteration above, run in-process over Arrow (whatever the
step's executor: the kernels only hand the inputs' changes in and the output
change out).  A step that changes no input costs nothing; a step that does
costs the whole fixpoint over the integrated inputs (reading them and the
previous output from state), not the size of the change: keep recursive
views over modest inputs.

Termination: at most ``MAX_ITERATIONS`` iterations and ``MAX_ROWS`` result
rows; beyond either the step fails with an ``ExecutionError`` naming the view
(a UNION ALL recursion over a cycle never ends; PostgreSQL would run forever).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import consolidate
from freshview.circuit.nodes import RecursiveState
from freshview.errors import ExecutionError
from freshview.plan import nodes as pn
from freshview.runtime.kernels import Kernels, Rel
from freshview.runtime.kernels.arrow import ArrowKernels
from freshview.runtime.operators.join import keyed
from freshview.runtime.relation import arrow_schema
from freshview.runtime.state.layout import Layout
from freshview.schema import WEIGHT

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore

MAX_ITERATIONS = 1000
MAX_ROWS = 5_000_000


class Recursion:
    """One ``Recursive`` node's operator: integrate the inputs, recompute the fixpoint, emit the difference."""

    def __init__(self, node: pn.Recursive, state: RecursiveState, view: str) -> None:
        self.node = node
        self.state = state
        self.view = view
        self.local = ArrowKernels()
        self.schemas = [arrow_schema(n.columns) for n in node.inputs()]
        self.out_schema = arrow_schema(node.columns)

    def ensure_state(self, store: StateStore) -> None:
        for name, schema in zip(self.state.names, self.schemas + [self.out_schema]):
            store.ensure_arrangement(name, Layout(pa.schema([f for f in schema if f.name != WEIGHT])))

    def step(self, k: Kernels, store: StateStore, deltas: list[Rel | None], force: bool) -> Rel | None:
        self.ensure_state(store)
        changed = False
        for name, d in zip(self.state.inputs, deltas):
            if d is None:
                continue
            table = k.arrow(d)
            if table.num_rows:
                store.apply(name, table)
                changed = True
        if not changed and not force:
            return None
        anchor, *externals = [store.scan(name) for name in self.state.inputs]
        new = self.fixpoint(anchor, externals)
        old = store.scan(self.state.output)
        negated = old.set_column(old.schema.get_field_index(WEIGHT), WEIGHT, pc.negate(old.column(WEIGHT)))
        diff = consolidate(pa.concat_tables([new.cast(self.out_schema), negated.cast(self.out_schema)]))
        if diff.num_rows == 0:
            return None
        store.apply(self.state.output, diff)
        return k.of_arrow(diff)

    # ------------------------------------------------------------------ the fixpoint
    def fixpoint(self, anchor: pa.Table, externals: list[pa.Table]) -> pa.Table:
        """PostgreSQL's iteration over integrated inputs (every weight positive): the result, consolidated."""
        anchor = anchor.cast(self.out_schema)
        if self.node.distinct:
            anchor = _as_set(anchor)
        results = [anchor]
        seen = anchor  # UNION: every row produced so far, once
        working = anchor
        total = anchor.num_rows
        for _ in range(MAX_ITERATIONS):
            if working.num_rows == 0:
                return consolidate(pa.concat_tables(results)) if len(results) > 1 else results[0]
            produced = consolidate(self._eval(self.node.step, working, externals).cast(self.out_schema))
            if self.node.distinct:
                produced = _minus(_as_set(produced), seen)
                seen = pa.concat_tables([seen, produced])
            results.append(produced)
            working = produced
            total += produced.num_rows
            if total > MAX_ROWS:
                raise ExecutionError(
                    f"view {self.view!r}: WITH RECURSIVE {self.node.name!r} produced more than {MAX_ROWS} rows "
                    f"(does it terminate?)")
        hint = "; a UNION ALL recursion over a cycle never ends: UNION stops at rows seen before" \
            if not self.node.distinct else ""
        raise ExecutionError(f"view {self.view!r}: WITH RECURSIVE {self.node.name!r} did not reach a fixpoint "
                             f"within {MAX_ITERATIONS} iterations{hint}")

    def _eval(self, node: pn.Node, working: pa.Table, externals: list[pa.Table]) -> pa.Table:
        """The recursive term over the working table, non-incrementally, by the local kernels."""
        k = self.local
        if isinstance(node, pn.RecursiveRef):
            return working
        if isinstance(node, pn.ExternalRef):
            return externals[node.index]
        if isinstance(node, pn.Filter):
            return k.filter(self._eval(node.input, working, externals), node.predicate, {})
        if isinstance(node, pn.Project):
            return k.project(self._eval(node.input, working, externals), node.exprs, arrow_schema(node.columns), {})
        if isinstance(node, pn.UnionAll):
            return k.union([self._eval(p, working, externals) for p in node.parts], arrow_schema(node.columns))
        if isinstance(node, pn.Join):
            left = keyed(k, self._eval(node.left, working, externals), node.left.columns, node.left_keys, {}, "l")
            right = keyed(k, self._eval(node.right, working, externals), node.right.columns, node.right_keys, {}, "r")
            return k.join(left, right, len(node.left_keys), arrow_schema(node.columns), {})
        raise ExecutionError(f"internal: {type(node).__name__} in a recursive term")  # refused by the builder


def _as_set(table: pa.Table) -> pa.Table:
    """Each row of positive weight once."""
    table = consolidate(table)
    table = table.filter(pc.greater(table.column(WEIGHT), 0))
    return table.set_column(table.schema.get_field_index(WEIGHT), WEIGHT, pa.array([1] * table.num_rows, pa.int64()))


def _minus(rows: pa.Table, seen: pa.Table) -> pa.Table:
    """The rows of the set ``rows`` not in the set ``seen`` (rows compared NULL-equal, as UNION does)."""
    if rows.num_rows == 0 or seen.num_rows == 0:
        return rows
    negated = seen.set_column(seen.schema.get_field_index(WEIGHT), WEIGHT,
                              pa.array([-1] * seen.num_rows, pa.int64()))
    out = consolidate(pa.concat_tables([rows, negated]))
    return out.filter(pc.greater(out.column(WEIGHT), 0))
