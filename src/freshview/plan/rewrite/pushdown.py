"""Push filter conjuncts down to the inputs that have their columns; equalities across a join become keys.

    σ_{l.a = r.b ∧ l.x > 1 ∧ r.y < 2}(L × R)   →   σ_{x > 1}(L) ⋈_{a = b} σ_{y < 2}(R)

Each conjunct moves through the nodes it commutes with, on Z-sets (rows
with integer weights), and stops above the first node it does not:

* Filter: its own conjuncts join those coming from above (its own first);
* Project: the conjunct is rewritten over the projection's input
  (σ_p(π_e R) = π_e(σ_{p∘e} R); expressions are deterministic: the binder
  refuses now(), random() ...);
* Join (inner): a conjunct on one side's columns moves into that side; an
  equality between an expression of the left side and one of the right side
  (same type) becomes a key pair; the rest filter the join's output.  A
  conjunct calling a function defined only where it is read
  (``plan.functions``' ``where_read``: a scalar subquery's ``single_row``,
  whose error is due only where an outer row reads a key of several rows)
  stays above the join: as a key or in one side it would be computed for
  rows of that side that no row of the other joins;
* UnionAll, Negate, Distinct, Reweight: into every input
  (σ(A ∪ B) = σA ∪ σB, σ(−A) = −σA, σ(δA) = δ(σA), and a reweight is row-wise);
* FlatMap (set-returning functions, ``plan.flatmap``): a conjunct on the
  input's columns only moves below it (each input row's rows share them);
* Aggregate: a conjunct on group columns only, rewritten over the group
  expressions, moves below it (it keeps or drops whole groups);
* Scan, TopK, Window, Recursive and the recursion's leaves stop it.

A part of a UnionAll left with a constant false or NULL conjunct has no
rows and is dropped: a WHERE conjunct that no NULL-padded row passes
(``r.x = 1``) turns a lowered LEFT JOIN back into its inner join, and the
anti-join that produced the padded rows (with its state) disappears.

* LogicalJoin (outer, semi, anti): into the preserved side only (the left
  of a semi-, anti-, NOT IN or LEFT join, the right of a RIGHT join);
  conjuncts on the side an outer join pads with NULLs stay above it.

The rule runs again after ``joins`` has lowered the outer joins into inner
joins, unions and ``Negate``; there every move above is an equality of
relational algebra: a WHERE conjunct over the side a LEFT JOIN pads with
NULLs reaches that side's rows only in the matched branch, and over the
padded branch it becomes the conjunct evaluated with NULLs for that side's
columns (``r.x IS NULL`` is true there, ``r.x = 1`` is not).  No predicate
is pushed into the NULL-padded side's input where it could drop rows the
outer join must keep.
"""

from __future__ import annotations

from freshview.plan import nodes as pn
from freshview.plan.flatmap import FlatMap
from freshview.plan.rewrite.fold_constants import fold
from freshview.plan.expr import Call, Expr, Literal, columns_used, conjoin, conjuncts, remap_columns, substitute
from freshview.plan.functions import where_read


def pushdown(plan: pn.Node) -> pn.Node:
    """``plan`` with every Filter's conjuncts moved as far down as they commute."""
    return _Pushdown().push(plan, [])


def split_equality(c: Expr, n_left: int) -> tuple[Expr, Expr] | None:
    """``c`` as (left expression, right expression over the right's own columns) if it is an equality
    between an expression of the first ``n_left`` columns and one of the rest; else None."""
    if not (isinstance(c, Call) and c.op == "=" and len(c.args) == 2) or read_here(c):
        return None
    a, b = c.args
    if a.type != b.type:
        return None
    ca, cb = columns_used(a), columns_used(b)
    if not ca or not cb:
        return None
    if max(ca) < n_left <= min(cb):
        return a, _shift(b, n_left, cb)
    if max(cb) < n_left <= min(ca):
        return b, _shift(a, n_left, ca)
    return None


def read_here(e: Expr) -> bool:
    """Whether ``e`` calls a function defined only on the rows that read it (``where_read``)."""
    return (isinstance(e, Call) and where_read(e)) or any(read_here(c) for c in e.children())


def _shift(e: Expr, by: int, cols: set[int]) -> Expr:
    return remap_columns(e, {i: i - by for i in cols})


def _filter(node: pn.Node, preds: list[Expr]) -> pn.Node:
    return pn.Filter(node, conjoin(preds)) if preds else node  # type: ignore[arg-type]


def _unique(preds: list[Expr]) -> list[Expr]:
    """Each conjunct once; constant-true ones dropped."""
    out: list[Expr] = []
    for p in preds:
        if p not in out and not (isinstance(p, Literal) and p.value is True):
            out.append(p)
    return out


def _empty(node: pn.Node) -> bool:
    """Whether ``node`` has no rows whatever its inputs: a filter by a constant that is not true below
    nothing but projections, negations, unions and joins (a WHERE conjunct false on an outer join's
    padded rows)."""
    return getattr(_Empty, f"visit_{type(node).__name__}", _Empty.other)(node)


class _Empty:
    @staticmethod
    def other(node: pn.Node) -> bool:
        return False

    @staticmethod
    def visit_Filter(node: pn.Filter) -> bool:
        return any(isinstance(c, Literal) and c.value is not True for c in conjuncts(node.predicate)) \
            or _empty(node.input)

    @staticmethod
    def _input(node: pn.Node) -> bool:
        return _empty(node.inputs()[0])

    visit_Project = visit_Negate = visit_Distinct = visit_Reweight = _input

    @staticmethod
    def visit_UnionAll(node: pn.UnionAll) -> bool:
        return all(map(_empty, node.parts))

    @staticmethod
    def visit_Join(node: pn.Join) -> bool:
        return _empty(node.left) or _empty(node.right)


class _Pushdown:
    def push(self, node: pn.Node, preds: list[Expr]) -> pn.Node:
        visit = getattr(self, f"visit_{type(node).__name__}", self.stop)
        return visit(node, _unique(preds))

    def stop(self, node: pn.Node, preds: list[Expr]) -> pn.Node:
        """The conjuncts stay above ``node``; its inputs are rewritten on their own."""
        return _filter(pn.with_inputs(node, [self.push(c, []) for c in node.inputs()]), preds)

    def visit_Recursive(self, node: pn.Recursive, preds: list[Expr]) -> pn.Node:
        node = pn.Recursive(node.name, self.push(node.anchor, []), tuple(self.push(e, []) for e in node.externals),
                            self.push(node.step, []), node.distinct)
        return _filter(node, preds)

    def visit_Filter(self, node: pn.Filter, preds: list[Expr]) -> pn.Node:
        return self.push(node.input, conjuncts(node.predicate) + preds)

    def visit_Project(self, node: pn.Project, preds: list[Expr]) -> pn.Node:
        over_input = [fold(substitute(p, dict(enumerate(node.exprs)))) for p in preds]
        return pn.Project(self.push(node.input, over_input), node.exprs, node.names)

    def visit_Join(self, node: pn.Join, preds: list[Expr]) -> pn.Node:
        nl = len(node.left.columns)
        left: list[Expr] = []
        right: list[Expr] = []
        lkeys, rkeys = list(node.left_keys), list(node.right_keys)
        above: list[Expr] = []
        for p in preds:
            cols = columns_used(p)
            if read_here(p):
                above.append(p)
            elif cols and max(cols) < nl:
                left.append(p)
            elif cols and min(cols) >= nl:
                right.append(_shift(p, nl, cols))
            elif (pair := split_equality(p, nl)) is not None:
                lkeys.append(pair[0])
                rkeys.append(pair[1])
            else:
                above.append(p)
        join = pn.Join(self.push(node.left, left), self.push(node.right, right), tuple(lkeys), tuple(rkeys))
        return _filter(join, above)

    def visit_LogicalJoin(self, node: pn.LogicalJoin, preds: list[Expr]) -> pn.Node:
        """Into the preserved side only: a semi-, anti- or NOT IN join keeps or drops each left row
        whole, a LEFT JOIN pads rows of its left side, a RIGHT JOIN of its right side."""
        nl = len(node.left.columns)
        left: list[Expr] = []
        right: list[Expr] = []
        above: list[Expr] = []
        for p in preds:
            cols = columns_used(p)
            if node.kind in ("semi", "anti", "not_in") or (node.kind == "left" and cols and max(cols) < nl):
                left.append(p)
            elif node.kind == "right" and cols and min(cols) >= nl:
                right.append(_shift(p, nl, cols))
            else:
                above.append(p)
        return _filter(pn.with_inputs(node, [self.push(node.left, left), self.push(node.right, right)]), above)

    def visit_UnionAll(self, node: pn.UnionAll, preds: list[Expr]) -> pn.Node:
        parts = [self.push(p, preds) for p in node.parts]
        live = [p for p in parts if not _empty(p)] or parts[:1]
        return live[0] if len(live) == 1 else pn.UnionAll(tuple(live))

    def _through(self, node: pn.Node, preds: list[Expr]) -> pn.Node:
        return pn.with_inputs(node, [self.push(node.inputs()[0], preds)])

    visit_Negate = visit_Distinct = visit_Reweight = _through

    def visit_FlatMap(self, node: FlatMap, preds: list[Expr]) -> pn.Node:
        width = len(node.input.columns)
        below = [p for p in preds if columns_used(p) and max(columns_used(p)) < width]
        above = [p for p in preds if p not in below]
        return _filter(pn.with_inputs(node, [self.push(node.input, below)]), above)

    def visit_Aggregate(self, node: pn.Aggregate, preds: list[Expr]) -> pn.Node:
        groups = len(node.group)
        below = [p for p in preds if columns_used(p) and max(columns_used(p)) < groups]
        above = [p for p in preds if p not in below]
        over_input = [substitute(p, dict(enumerate(node.group))) for p in below]
        return _filter(pn.with_inputs(node, [self.push(node.input, over_input)]), above)


__all__ = ["pushdown", "split_equality", "read_here"]
