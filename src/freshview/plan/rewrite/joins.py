"""Lowering outer, semi- and anti-joins (and NOT IN) into the core plan nodes.

Every join kind SQL needs is built here from the nodes that already have an
incremental operator (Join, Distinct, Filter, Project, UnionAll) and the
linear ``Negate``, so each executor runs them without a new stateful operator
and each inherits the delta rules of its parts:

* semijoin  L ⋉_k R  = π_L(L ⋈_k Distinct(π_k R))          (keys only)
* semijoin  L ⋉_{k,θ} R = π_L(L ⋈_{L, null-safe} M),  M = Distinct(π_L σ_θ(L ⋈_k R))
* antijoin  L ▷ R   = L + Negate(L ⋉ R)                     Δ(L ▷ R) = ΔL − Δ(L ⋉ R)
* left join L ⟕ R   = σ_θ(L ⋈_k R) ∪ pad(L ▷_{k,θ} R)         pad: the right columns NULL
* right join        = the left join of the swapped inputs, columns put back in order
* full join         = σ_θ(L ⋈_k R) ∪ pad(L ▷ R) ∪ pad(R ▷ L)
* NOT IN (3-valued) = [σ_{x not null} L ▷_{c, x=y} R ▷_c σ_{y null} R] ∪ [σ_{x null} L ▷_c R]
  (c: the correlation keys and residual θ, e.g. ``x NOT IN (SELECT y FROM R WHERE R.d < L.d)``)

Join keys compare as SQL ``=`` (a NULL key matches nothing), so the rules
above are exactly PostgreSQL's.  The null-safe join that takes M back to L
joins on (COALESCE(x, zero of its type), x IS NULL) per column, so a NULL
matches a NULL there.  Each output is a Z-set with non-negative weights:
``L ⋉ R`` is contained in L, so L − (L ⋉ R) never goes negative.

``residual`` expressions refer to the left columns, then the right ones.
Conjuncts of a residual on the left side alone filter L before the
semi-join (what fails them has no match), so they cost no join back.
"""

from __future__ import annotations

import datetime as dt
import decimal

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, ColumnRef, Expr, Literal, columns_used, conjoin, conjuncts, remap_columns
from freshview.plan.rewrite.bottom_up import BottomUp
from freshview.schema import SqlType

BOOL = SqlType("bool")


def refs(columns: pn.Columns, offset: int = 0) -> tuple[ColumnRef, ...]:
    return tuple(ColumnRef(t, offset + i, n) for i, (n, t) in enumerate(columns))


def _names(columns: pn.Columns) -> tuple[str, ...]:
    return tuple(n for n, _ in columns)


def _keep_left(node: pn.Node, left: pn.Node) -> pn.Node:
    return pn.Project(node, refs(left.columns), _names(left.columns))


def _split(residual: Expr | None, nl: int) -> tuple[list[Expr], list[Expr]]:
    """Residual conjuncts on the left side alone, and the others."""
    if residual is None:
        return [], []
    parts = conjuncts(residual)
    left_only = [c for c in parts if columns_used(c) and max(columns_used(c)) < nl]
    return left_only, [c for c in parts if c not in left_only]


def semijoin(left: pn.Node, right: pn.Node, lkeys: tuple[Expr, ...], rkeys: tuple[Expr, ...],
             residual: Expr | None = None) -> pn.Node:
    """The rows of ``left`` (each as often as in ``left``) with at least one match in ``right``."""
    nl = len(left.columns)
    left_only, mixed = _split(residual, nl)
    if left_only:
        left = pn.Filter(left, conjoin(left_only))  # type: ignore[arg-type]
    if not mixed:
        if rkeys:
            keys = pn.Project(right, tuple(rkeys), tuple(f"k{i}" for i in range(len(rkeys))))
            if not _unique_on(right, rkeys):
                keys = pn.Distinct(keys)
        else:  # "is right non-empty": one row iff right has any
            keys = pn.Distinct(pn.Project(right, (Literal(SqlType("int4"), 1),), ("nonempty",)))
        return _keep_left(pn.Join(left, keys, tuple(lkeys), refs(keys.columns)[:len(rkeys)]), left)
    matched = pn.Filter(pn.Join(left, right, tuple(lkeys), tuple(rkeys)), conjoin(mixed))  # type: ignore[arg-type]
    m = pn.Distinct(_keep_left(matched, left))
    return _keep_left(pn.Join(left, m, null_safe_keys(left.columns), null_safe_keys(m.columns)), left)


def _unique_on(node: pn.Node, keys: tuple[Expr, ...]) -> bool:
    """Whether ``node``'s rows are distinct on ``keys``: an aggregate's output grouped by exactly those
    columns (a grouped correlated subquery), so the semi-join needs no Distinct of its own."""
    if not (isinstance(node, pn.Project) and isinstance(node.input, pn.Aggregate)):
        return False
    groups = len(node.input.group)
    picked = set()
    for k in keys:
        if not isinstance(k, ColumnRef):
            return False
        e = node.exprs[k.index]
        if not isinstance(e, ColumnRef) or e.index >= groups:
            return False
        picked.add(e.index)
    return groups > 0 and picked == set(range(groups))


def antijoin(left: pn.Node, right: pn.Node, lkeys: tuple[Expr, ...], rkeys: tuple[Expr, ...],
             residual: Expr | None = None) -> pn.Node:
    """The rows of ``left`` with no match in ``right``: L − (L ⋉ R)."""
    return pn.UnionAll((left, pn.Negate(semijoin(left, right, lkeys, rkeys, residual))))


def outer_join(kind: str, left: pn.Node, right: pn.Node, lkeys: tuple[Expr, ...], rkeys: tuple[Expr, ...],
               residual: Expr | None = None, right_pad: tuple[Expr, ...] | None = None) -> pn.Node:
    """``left`` LEFT/RIGHT/FULL JOIN ``right``; columns: left's then right's.

    ``right_pad`` gives the values of the right columns on a left row without
    a match (default: NULLs); a correlated scalar subquery pads with the
    value its expression has over no rows (COUNT gives 0)."""
    inner: pn.Node = pn.Join(left, right, tuple(lkeys), tuple(rkeys))
    if residual is not None:
        inner = pn.Filter(inner, residual)
    if kind == "left":
        return pn.UnionAll((inner, _pad_right(antijoin(left, right, lkeys, rkeys, residual), right, right_pad)))
    swapped = _swap(residual, len(left.columns), len(right.columns))
    only_right = antijoin(right, left, rkeys, lkeys, swapped)
    padded_right = pn.Project(
        only_right,
        tuple(Literal(t, None) for _, t in left.columns) + refs(right.columns),
        _names(left.columns) + _names(right.columns))
    if kind == "right":
        return pn.UnionAll((inner, padded_right))
    if kind == "full":
        only_left = _pad_right(antijoin(left, right, lkeys, rkeys, residual), right, None)
        return pn.UnionAll((inner, only_left, padded_right))
    raise ValueError(f"internal: join kind {kind!r}")


def _pad_right(rows: pn.Node, right: pn.Node, pad: tuple[Expr, ...] | None) -> pn.Node:
    values = pad if pad is not None else tuple(Literal(t, None) for _, t in right.columns)
    return pn.Project(rows, refs(rows.columns) + tuple(values), _names(rows.columns) + _names(right.columns))


def _swap(residual: Expr | None, nl: int, nr: int) -> Expr | None:
    if residual is None:
        return None
    mapping = {i: (i + nr if i < nl else i - nl) for i in range(nl + nr)}
    return remap_columns(residual, mapping)


def not_in(left: pn.Node, right: pn.Node, lkeys: tuple[Expr, ...], rkeys: tuple[Expr, ...],
           x: Expr, y: Expr, residual: Expr | None = None) -> pn.Node:
    """Rows of ``left`` where ``x NOT IN (y of the right rows matching on the keys and the residual)`` is true.

    For a non-NULL x: no y equals x and no y is NULL; for a NULL x: no right row at all."""
    x_null = Call(BOOL, "is_null", (x,))
    y_null = Call(BOOL, "is_null", (y,))
    some_x = antijoin(pn.Filter(left, Call(BOOL, "not", (x_null,))), right, lkeys + (x,), rkeys + (y,), residual)
    no_null_y = antijoin(some_x, pn.Filter(right, y_null), lkeys, rkeys, residual)
    null_x = antijoin(pn.Filter(left, x_null), right, lkeys, rkeys, residual)
    return pn.UnionAll((no_null_y, null_x))


# ---------------------------------------------------------------------- null-safe keys
_ZERO = {
    "int2": 0, "int4": 0, "int8": 0, "float4": 0.0, "float8": 0.0, "numeric": decimal.Decimal(0),
    "text": "", "bool": False, "date": dt.date(1970, 1, 1), "timestamp": dt.datetime(1970, 1, 1),
    "timestamptz": dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc), "interval": (0, 0, 0),
}


def null_safe_keys(columns: pn.Columns) -> tuple[Expr, ...]:
    """Join keys under which NULL matches NULL: per column (COALESCE(x, zero), x IS NULL)."""
    return null_safe(refs(columns))


def has_null_safe_key(t: SqlType) -> bool:
    """Whether ``null_safe`` keys of a value of type ``t`` match exactly the equal values and NULL with NULL."""
    return t.kind in _ZERO or t.kind == "null"


def null_safe(exprs: tuple[Expr, ...]) -> tuple[Expr, ...]:
    """``null_safe_keys`` of expressions: per expression (COALESCE(e, zero), e IS NULL) (a type without a
    zero, an array, only the latter: callers keep such columns out)."""
    out: list[Expr] = []
    for e in exprs:
        t = e.type
        if t.kind in _ZERO:
            out.append(Call(t, "coalesce", (e, Literal(t, _ZERO[t.kind]))))
        out.append(Call(BOOL, "is_null", (e,)))
    return tuple(out)


def empty_value(e: Expr, aggs, offset: int) -> Expr:
    """``e`` over an Aggregate's output (aggregate j at column offset + j) as it is over no rows:
    COUNT is 0, every other aggregate NULL."""
    mapping: dict[int, Expr] = {}
    for j, a in enumerate(aggs):
        mapping[offset + j] = Literal(a.type, 0 if a.definition.empty == "zero" else None)
    return _substitute(e, mapping)


def empty_row(plan: pn.Node, n_keys: int) -> tuple[Expr, ...] | None:
    """The row of a grouped subquery ``plan`` (its first ``n_keys`` columns its group keys, then values over
    an Aggregate) for a key with no rows: NULL keys, each value over no rows; None when ``plan`` is not that
    shape or a value reads a column outside an aggregate."""
    if isinstance(plan, pn.Aggregate):
        agg, exprs = plan, refs(plan.columns)
    elif isinstance(plan, pn.Project) and isinstance(plan.input, pn.Aggregate):
        agg, exprs = plan.input, plan.exprs
    else:
        return None
    row: list[Expr] = [Literal(t, None) for _, t in plan.columns[:n_keys]]
    for e in exprs[n_keys:]:
        value = empty_value(e, agg.aggs, len(agg.group))
        if columns_used(value):
            return None
        row.append(value)
    return tuple(row)


def _substitute(e: Expr, mapping: dict[int, Expr]) -> Expr:
    if isinstance(e, ColumnRef):
        return mapping.get(e.index, e)
    return e.map_children(lambda c: _substitute(c, mapping))


# ---------------------------------------------------------------------- the rule
def lower_joins(plan: pn.Node) -> pn.Node:
    """Every ``LogicalJoin`` in ``plan`` lowered by the rules above (its inputs first)."""
    return _Lower()(plan)


class _Lower(BottomUp):
    def visit_LogicalJoin(self, node: pn.LogicalJoin) -> pn.Node:
        args = (node.left, node.right, node.left_keys, node.right_keys)
        if node.kind == "semi":
            return semijoin(*args, node.residual)
        if node.kind == "anti":
            return antijoin(*args, node.residual)
        if node.kind == "not_in":
            assert node.not_in is not None
            return not_in(*args, *node.not_in, node.residual)
        return outer_join(node.kind, *args, node.residual, node.pad)


__all__ = ["semijoin", "antijoin", "outer_join", "not_in", "null_safe_keys", "null_safe", "has_null_safe_key", "empty_value", "empty_row", "lower_joins"]
