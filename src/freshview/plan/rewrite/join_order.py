"""Join order: a tree of inner joins rebuilt in the order its join graph and the sizes in state say.

    σ_{a.k = c.k ∧ b.k = c.v}((a × b) × c)   →   π_{a, b, c}((a ⋈_{k = k} c) ⋈_{v = k} b)

The builder joins FROM items in FROM order, so two neighbours with no
condition between them are a cross product, kept whole in the join's state
(``FROM a, b, c WHERE a.k = c.k AND b.k = c.v``: |a|·|b| rows).  This rule
takes each maximal tree of inner joins (``Join``, the ``Filter``s over them
and projections that only pick columns) apart into its *relations* (every
other node: a scan, an aggregate, an outer/semi/anti-join, which are
barriers: reordered inside, never across) and its *conjuncts* (join keys
and filter conditions over the relations' columns), and joins the relations
again:

* the **join graph**: an equality between an expression of one relation and
  one of another is an edge; relations connected by edges are joined only
  along edges (never a cross product inside a connected part); the
  connected parts of a graph with several are joined last, by cross
  products, the smallest first;
* the **cost** of an order is what an incremental step pays for it.  A join
  of the relation sets S1 and S2 keeps both inputs integrated (its state:
  |S1| + |S2| rows), and a changed row of any relation r under it reaches
  its output as |S1 ∪ S2| / |r| rows on average (the delta's path); an
  order costs the sum over its joins of

      |S1| + |S2| + |S1 ∪ S2| · Σ_{r ∈ S1 ∪ S2} 1 / |r|

  with sizes estimated by ``plan.statistics`` from the rows of each
  relation in state (``statistics``, a relation's row count and its unique
  column sets: joining on a primary key does not grow the rows, and a
  column equal to a one-column key has at most that key's rows of values);
* the **search**: dynamic programming over the connected subsets (the
  csg-cmp pairs of Moerkotte and Neumann's DPccp, bushy trees: a bushy
  tree may keep less state than any left-deep one) for parts of up to
  ``DP_RELATIONS`` relations and ``DP_PAIRS`` pairs, else a greedy join of
  the cheapest connected pair (GOO), so 17 tables plan in milliseconds;
* the plan: each conjunct is placed once, on the lowest join that has all
  its relations (an equality across that join's sides is a key, anything
  else a filter over it), a conjunct on one relation filters it, and a
  projection puts the columns back in their original order.

An order that already joins along edges and costs no more than the best is
kept as it is.  Inner joins commute and associate on Z-sets, and a key
compares as the equality it came from (a NULL matches nothing), so the rows
are the same in any order.  The rule runs after the first ``pushdown`` (the
equalities are keys by then, the one-relation conjuncts on their relations)
and before ``prune``.  An inner join that ``pushdown`` makes of an outer
join after lowering is not reordered.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, ColumnRef, Expr, columns_used, conjoin, conjuncts, remap_columns
from freshview.plan.rewrite.pushdown import split_equality
from freshview.plan.statistics import Estimate, Statistics, estimate, selectivity
from freshview.schema import SqlType

BOOL = SqlType("bool")
DP_RELATIONS = 12  # dynamic programming up to this many relations in a connected part ...
DP_PAIRS = 20_000  # ... and this many csg-cmp pairs (a dense graph of 12 has ~265k): else greedy

Tree = int | tuple["Tree", "Tree"]  # a relation's index, or a join of two trees (left, right)


def join_order(plan: pn.Node, statistics: Statistics | None = None) -> pn.Node:
    """``plan`` with each tree of inner joins joined in the cheapest order without avoidable cross products."""
    return _Rewrite({} if statistics is None else statistics).rewrite(plan)


# ---------------------------------------------------------------------- collecting a join tree
def _in_tree(node: pn.Node) -> bool:
    """Whether ``node`` belongs to a tree of inner joins: a Join, or a Filter or a column-picking
    projection over one."""
    if isinstance(node, pn.Join):
        return True
    if isinstance(node, pn.Filter) or _picks(node):
        return _in_tree(node.inputs()[0])
    return False


def _picks(node: pn.Node) -> bool:
    return isinstance(node, pn.Project) and all(isinstance(e, ColumnRef) for e in node.exprs)


@dataclass
class JoinGraph:
    """A tree of inner joins taken apart: its relations, conjuncts over the *wide row* (every relation's
    columns in relation order), where its output columns are in the wide row, and its original shape."""

    relations: list[pn.Node] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    conjuncts: list[Expr] = field(default_factory=list)
    output: list[int] = field(default_factory=list)
    tree: Tree = 0

    @staticmethod
    def of(node: pn.Node) -> "JoinGraph":
        graph = JoinGraph()
        graph.output, graph.tree = graph._add(node)
        return graph

    def _add(self, node: pn.Node) -> tuple[list[int], Tree]:
        """Adds ``node``; returns its columns' places in the wide row and its shape."""
        if isinstance(node, pn.Join):
            lcols, ltree = self._add(node.left)
            rcols, rtree = self._add(node.right)
            for lk, rk in zip(node.left_keys, node.right_keys):
                self.conjuncts.append(Call(BOOL, "=", (_wide(lk, lcols), _wide(rk, rcols))))
            return lcols + rcols, (ltree, rtree)
        if isinstance(node, pn.Filter) and _in_tree(node.input):
            cols, tree = self._add(node.input)
            self.conjuncts += [_wide(c, cols) for c in conjuncts(node.predicate)]
            return cols, tree
        if _picks(node) and _in_tree(node.inputs()[0]):
            cols, tree = self._add(node.inputs()[0])
            return [cols[e.index] for e in node.exprs], tree  # type: ignore[attr-defined]
        start = self.offsets[-1] + len(self.relations[-1].columns) if self.relations else 0
        self.relations.append(node)
        self.offsets.append(start)
        return list(range(start, start + len(node.columns))), len(self.relations) - 1

    def owner(self) -> list[int]:
        """The relation of each wide column."""
        return [i for i, r in enumerate(self.relations) for _ in r.columns]


def _wide(e: Expr, cols: list[int]) -> Expr:
    return remap_columns(e, dict(enumerate(cols)))


# ---------------------------------------------------------------------- sizes and costs
class Sizes:
    """Estimated rows of every set of relations (a bit mask), and the cost of joining two sets.

    |S| = Π_{r ∈ S} |r| · Π_{conjuncts within S} selectivity; the equalities between two relations
    keep 1 / max(distinct values on either side) of the pairs (a unique side: its rows)."""

    def __init__(self, estimates: list[Estimate], factors: list[tuple[int, float]]) -> None:
        self.rows = [e.rows for e in estimates]
        self.factors = factors  # (relations mask, selectivity)
        self._card: dict[int, float] = {}

    def card(self, mask: int) -> float:
        if mask not in self._card:
            rows = 1.0
            for i in _bits(mask):
                rows *= self.rows[i]
            for m, sel in self.factors:
                if m & mask == m:
                    rows *= sel
            self._card[mask] = max(rows, 1.0)
        return self._card[mask]

    def join(self, s1: int, s2: int) -> float:
        """State kept by the join of ``s1`` and ``s2`` and the rows a changed row of each relation under it
        produces there (module docstring)."""
        s = s1 | s2
        return self.card(s1) + self.card(s2) + self.card(s) * sum(1 / self.rows[i] for i in _bits(s))

    def cost(self, tree: Tree) -> float:
        if isinstance(tree, int):
            return 0.0
        return self.cost(tree[0]) + self.cost(tree[1]) + self.join(_mask(tree[0]), _mask(tree[1]))


def _bits(mask: int) -> Iterator[int]:
    i = 0
    while mask:
        if mask & 1:
            yield i
        mask >>= 1
        i += 1


def _mask(tree: Tree) -> int:
    return 1 << tree if isinstance(tree, int) else _mask(tree[0]) | _mask(tree[1])


# ---------------------------------------------------------------------- the search
def _neighbours(mask: int, adjacent: list[int]) -> int:
    out = 0
    for i in _bits(mask):
        out |= adjacent[i]
    return out & ~mask


def _subsets(mask: int) -> Iterator[int]:
    """Every non-empty subset of ``mask``."""
    s = mask
    while s:
        yield s
        s = (s - 1) & mask


def _grow(s: int, excluded: int, adjacent: list[int]) -> Iterator[int]:
    """Every connected superset of ``s`` (itself excluded) grown through neighbours not in ``excluded``
    (DPccp's EnumerateCsgRec)."""
    near = _neighbours(s, adjacent) & ~excluded
    if not near:
        return
    subsets = list(_subsets(near))
    for sub in subsets:
        yield s | sub
    for sub in subsets:
        yield from _grow(s | sub, excluded | near, adjacent)


def csg_cmp_pairs(nodes: int, adjacent: list[int]) -> Iterator[tuple[int, int]]:
    """Every unordered pair (S1, S2) of disjoint connected sets of the graph on ``nodes`` nodes
    (``adjacent[i]``: the mask of i's neighbours) with an edge between them, once (DPccp's
    EnumerateCsg and EnumerateCmp)."""
    for i in reversed(range(nodes)):
        start = 1 << i
        for s1 in (start, *_grow(start, (1 << (i + 1)) - 1, adjacent)):
            low = (s1 & -s1).bit_length() - 1
            excluded = s1 | ((1 << (low + 1)) - 1)
            near = _neighbours(s1, adjacent) & ~excluded
            for j in reversed(list(_bits(near))):
                s2 = 1 << j
                yield s1, s2
                for grown in _grow(s2, excluded | (near & ((1 << (j + 1)) - 1)), adjacent):
                    yield s1, grown


class _TooMany(Exception):
    pass


def _oriented(a: int, ta: Tree, b: int, tb: Tree) -> Tree:
    """The join of two trees, the one holding the first relation (in FROM order) on the left."""
    return (ta, tb) if (a & -a) < (b & -b) else (tb, ta)


def best_tree(part: list[int], adjacent: list[int], sizes: Sizes, dp_relations: int = DP_RELATIONS) -> Tree:
    """The cheapest tree joining the connected relations ``part`` along edges: dynamic programming
    within ``dp_relations`` and ``DP_PAIRS``, else greedy."""
    if len(part) == 1:
        return part[0]
    if len(part) <= dp_relations:
        try:
            return _dynamic(part, adjacent, sizes)
        except _TooMany:
            pass
    return _greedy(part, adjacent, sizes)


def _dynamic(part: list[int], adjacent: list[int], sizes: Sizes) -> Tree:
    """DPccp over the part's relations renumbered 0..k-1; pairs are taken by the size of their union so
    both halves' best trees are known."""
    local_adj = [sum(1 << part.index(j) for j in _bits(adjacent[i]) if j in part) for i in part]
    pairs = []
    for pair in csg_cmp_pairs(len(part), local_adj):
        pairs.append(pair)
        if len(pairs) > DP_PAIRS:
            raise _TooMany

    def glob(mask: int) -> int:
        return sum(1 << part[i] for i in _bits(mask))
    best: dict[int, tuple[float, Tree]] = {1 << i: (0.0, part[i]) for i in range(len(part))}
    for s1, s2 in sorted(pairs, key=lambda p: (p[0] | p[1]).bit_count()):
        g1, g2 = glob(s1), glob(s2)
        cost = best[s1][0] + best[s2][0] + sizes.join(g1, g2)
        s = s1 | s2
        if s not in best or cost < best[s][0]:
            best[s] = (cost, _oriented(g1, best[s1][1], g2, best[s2][1]))
    return best[(1 << len(part)) - 1][1]


def _greedy(part: list[int], adjacent: list[int], sizes: Sizes) -> Tree:
    """Join the connected pair of trees whose join costs least, until one tree is left (GOO)."""
    trees: dict[int, Tree] = {1 << i: i for i in part}
    while len(trees) > 1:
        masks = sorted(trees, key=lambda m: m & -m)
        _, a, b = min((sizes.join(a, b), a, b) for x, a in enumerate(masks) for b in masks[x + 1:]
                         if _neighbours(a, adjacent) & b)
        trees[a | b] = _oriented(a, trees.pop(a), b, trees.pop(b))
    return next(iter(trees.values()))


# ---------------------------------------------------------------------- the rule
@dataclass(frozen=True)
class _Conjunct:
    expr: Expr  # over the wide row
    mask: int  # the relations it uses


class _Rewrite:
    def __init__(self, statistics: Statistics) -> None:
        self.statistics = statistics

    def rewrite(self, node: pn.Node) -> pn.Node:
        if _in_tree(node) and not _picks(node):
            node = self._relations_rewritten(node)
            graph = JoinGraph.of(node)
            if len(graph.relations) >= 3:
                return self.reorder(node, graph)
            return node
        if isinstance(node, pn.Recursive):
            node = replace(node, step=self.rewrite(node.step))
        return pn.with_inputs(node, [self.rewrite(c) for c in node.inputs()])

    def _relations_rewritten(self, node: pn.Node) -> pn.Node:
        """``node``'s join tree as it is, each relation rewritten on its own."""
        if isinstance(node, pn.Join) or ((isinstance(node, pn.Filter) or _picks(node)) and _in_tree(node)):
            return pn.with_inputs(node, [self._relations_rewritten(c) for c in node.inputs()])
        return self.rewrite(node)

    def reorder(self, node: pn.Node, graph: JoinGraph) -> pn.Node:
        parts = _parts(graph)
        adjacent, sizes = weigh(graph, self.statistics)
        components = _components(len(graph.relations), adjacent)
        if len(components) == 1 and along_edges(graph.tree, adjacent):
            chosen = best_tree(components[0], adjacent, sizes)
            if sizes.cost(graph.tree) <= sizes.cost(chosen):
                return node
        else:
            trees = [best_tree(part, adjacent, sizes) for part in components]
            trees.sort(key=lambda t: (sizes.card(_mask(t)), _mask(t) & -_mask(t)))
            chosen = trees[0]
            for t in trees[1:]:
                chosen = (chosen, t)
        return _Builder(graph, parts).build(chosen, [n for n, _ in node.columns])


def _parts(graph: JoinGraph) -> list[_Conjunct]:
    owner = graph.owner()
    return [_Conjunct(c, sum({1 << owner[i] for i in columns_used(c)})) for c in graph.conjuncts]


def weigh(graph: JoinGraph, statistics: Statistics) -> tuple[list[int], Sizes]:
    """The join graph's edges (each relation's neighbours as a mask) and the sizes of its relation sets:
    each conjunct on one relation or several that is no edge keeps ``selectivity`` of the rows, the
    edges between two relations together 1 / the distinct values of their columns on the larger side."""
    owner = graph.owner()
    parts = _parts(graph)
    estimates = [estimate(r, statistics) for r in graph.relations]
    adjacent = [0] * len(graph.relations)
    factors: list[tuple[int, float]] = []
    pairs: dict[tuple[int, int], list[tuple[Expr, Expr]]] = {}
    for c in parts:
        edge = _edge(c, graph, owner)
        if edge is not None:
            (i, ei), (j, ej) = edge
            adjacent[i] |= 1 << j
            adjacent[j] |= 1 << i
            pairs.setdefault((i, j), []).append((ei, ej))
        elif c.mask.bit_count() == 1:
            i = owner[min(columns_used(c.expr))]
            factors.append((c.mask, selectivity(_shift(c.expr, -graph.offsets[i]), estimates[i])))
        elif c.mask:
            factors.append((c.mask, selectivity(c.expr, Estimate(float("inf")))))
    caps = _key_domains(graph, pairs, estimates)
    for (i, j), sides in pairs.items():
        left = [a for a, _ in sides]
        right = [b for _, b in sides]
        distinct = max(estimates[i].distinct(left, [caps(i, e) for e in left]),
                       estimates[j].distinct(right, [caps(j, e) for e in right]))
        factors.append(((1 << i) | (1 << j), 1 / max(distinct, 1.0)))
    return adjacent, Sizes(estimates, factors)


def _key_domains(graph: JoinGraph, pairs: dict[tuple[int, int], list[tuple[Expr, Expr]]],
                 estimates: list[Estimate]):
    """``caps(i, e)``: at most how many distinct values relation i's join expression ``e`` has: the rows of
    a one-column key that the equalities make it equal to (``c.nation = s.nation = n.key``: n's rows),
    else no bound."""
    parent: dict[int, int] = {}

    def find(w: int) -> int:
        while parent.get(w, w) != w:
            w = parent[w]
        return w
    for (i, j), sides in pairs.items():
        for a, b in sides:
            if isinstance(a, ColumnRef) and isinstance(b, ColumnRef):
                parent[find(graph.offsets[i] + a.index)] = find(graph.offsets[j] + b.index)
    domain: dict[int, float] = {}
    for i, est in enumerate(estimates):
        for key in est.unique:
            if len(key) == 1:
                root = find(graph.offsets[i] + next(iter(key)))
                domain[root] = min(domain.get(root, float("inf")), est.before_filters)

    def caps(i: int, e: Expr) -> float:
        return domain.get(find(graph.offsets[i] + e.index), float("inf")) if isinstance(e, ColumnRef) \
            else float("inf")
    return caps


def _edge(c: _Conjunct, graph: JoinGraph, owner: list[int]) -> tuple[tuple[int, Expr], tuple[int, Expr]] | None:
    """An equality between an expression of one relation and one of another: ((i, over i), (j, over j)), i < j."""
    e = c.expr
    if c.mask.bit_count() != 2 or not (isinstance(e, Call) and e.op == "=" and len(e.args) == 2):
        return None
    a, b = e.args
    if a.type != b.type:
        return None
    ra, rb = {owner[i] for i in columns_used(a)}, {owner[i] for i in columns_used(b)}
    if len(ra) != 1 or len(rb) != 1 or ra == rb:
        return None
    (i,), (j,) = ra, rb
    sides = sorted([(i, _shift(a, -graph.offsets[i])), (j, _shift(b, -graph.offsets[j]))], key=lambda s: s[0])
    return sides[0], sides[1]


def _shift(e: Expr, by: int) -> Expr:
    return remap_columns(e, {i: i + by for i in columns_used(e)})


def _components(n: int, adjacent: list[int]) -> list[list[int]]:
    """The connected parts of the graph, each in FROM order, in order of their first relation."""
    seen = 0
    out = []
    for i in range(n):
        if seen >> i & 1:
            continue
        part, frontier = 1 << i, 1 << i
        while frontier:
            frontier = _neighbours(part, adjacent) & ~part
            part |= frontier
        seen |= part
        out.append(list(_bits(part)))
    return out


def along_edges(tree: Tree, adjacent: list[int]) -> bool:
    """Whether every join of ``tree`` has an edge between its sides (no cross product)."""
    if isinstance(tree, int):
        return True
    left = _mask(tree[0])
    return bool(_neighbours(left, adjacent) & _mask(tree[1])) and along_edges(tree[0], adjacent) \
        and along_edges(tree[1], adjacent)


class _Builder:
    """A tree of relations back into plan nodes, each conjunct on the lowest join that has its relations."""

    def __init__(self, graph: JoinGraph, parts: list[_Conjunct]) -> None:
        self.graph = graph
        self.parts = parts

    def build(self, tree: Tree, names: list[str]) -> pn.Node:
        node, cols = self._node(tree)
        constant = [c.expr for c in self.parts if not c.mask]
        if constant:
            node = pn.Filter(node, conjoin(constant))  # type: ignore[arg-type]
        where = {w: p for p, w in enumerate(cols)}
        exprs = tuple(ColumnRef(node.columns[where[w]][1], where[w], name)
                      for w, name in zip(self.graph.output, names))
        if [e.index for e in exprs] == list(range(len(node.columns))) and \
                tuple(names) == tuple(n for n, _ in node.columns):
            return node
        return pn.Project(node, exprs, tuple(names))

    def _node(self, tree: Tree) -> tuple[pn.Node, list[int]]:
        """The plan of ``tree`` and where its columns are in the wide row."""
        mask = _mask(tree)
        if isinstance(tree, int):
            start = self.graph.offsets[tree]
            relation = self.graph.relations[tree]
            cols = list(range(start, start + len(relation.columns)))
            here = [_over(c.expr, cols) for c in self.parts if c.mask == mask]
            return (pn.Filter(relation, conjoin(here)) if here else relation), cols  # type: ignore[arg-type]
        (left, lcols), (right, rcols) = self._node(tree[0]), self._node(tree[1])
        lmask, rmask = _mask(tree[0]), _mask(tree[1])
        cols = lcols + rcols
        lkeys: list[Expr] = []
        rkeys: list[Expr] = []
        above: list[Expr] = []
        for c in self.parts:
            if c.mask and c.mask & mask == c.mask and c.mask & lmask != c.mask and c.mask & rmask != c.mask:
                e = _over(c.expr, cols)
                pair = split_equality(e, len(lcols))
                if pair is not None:
                    lkeys.append(pair[0])
                    rkeys.append(pair[1])
                else:
                    above.append(e)
        node: pn.Node = pn.Join(left, right, tuple(lkeys), tuple(rkeys))
        if above:
            node = pn.Filter(node, conjoin(above))  # type: ignore[arg-type]
        return node, cols


def _over(e: Expr, cols: list[int]) -> Expr:
    """``e`` (over the wide row) over a node whose columns are the wide columns ``cols``."""
    return remap_columns(e, {w: p for p, w in enumerate(cols)})


__all__ = ["join_order", "JoinGraph", "Sizes", "weigh", "best_tree", "along_edges", "csg_cmp_pairs", "DP_RELATIONS",
           "DP_PAIRS"]
