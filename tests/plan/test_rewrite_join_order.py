"""plan.rewrite.join_order: fixtures (input plan -> expected plan), the search against brute force, and the
same rows on random tables."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from freshview.plan import nodes as pn
from freshview.plan.explain import render
from freshview.plan.expr import ColumnRef, conjuncts
from freshview.plan.rewrite import RULES, optimize
from freshview.plan.rewrite.join_order import (
    JoinGraph, Sizes, along_edges, best_tree, csg_cmp_pairs, join_order, weigh,
)
from freshview.plan.statistics import Estimate, Observed, RelationStats, estimate, from_json, to_json
from tests.plan.fixtures import INT, QUERIES, before, check_same_result, raw

# Queries whose FROM order puts neighbours with no condition between them next to each other.
REORDERED = [
    "SELECT a.x, b.z FROM a, b, c WHERE a.x = c.z AND b.x = c.w",
    "SELECT a.s, b.t, c.w FROM a, b, c WHERE a.x = c.z AND b.x = c.w AND a.y < b.z",
    "SELECT a1.s, a2.y FROM a a1, c, a a2, b WHERE a1.x = b.x AND b.z = c.z AND c.w = a2.y AND a2.s <> 'q'",
    "SELECT a.x, c.w FROM a, b, c WHERE a.x = c.z",  # b has no condition: a cross product the query has
    "SELECT a.x, b.t FROM a CROSS JOIN b JOIN c ON c.z = a.y AND c.w = b.z WHERE a.x + b.x = c.w",
    "SELECT a.x FROM a, b, c WHERE a.x = c.z AND b.x = c.w AND NOT EXISTS (SELECT 1 FROM b b2 WHERE b2.z = a.y)",
    "SELECT count(*), sum(c.w) FROM a, b, c WHERE a.x = c.z AND b.x = c.w AND (a.y IS NULL OR b.z = 1)",
    "SELECT t.x, c.w FROM (SELECT a.x, b.z FROM a, b WHERE a.y = b.z) t, c, b b2 WHERE t.x = c.z AND b2.z = c.w",
]


def _joins(plan: pn.Node) -> list[pn.Join]:
    return [n for n in pn.walk(plan) if isinstance(n, pn.Join)]


def _conditions(plan: pn.Node) -> int:
    """Conjuncts in filters plus key pairs in joins: each condition of the query counted once."""
    return sum(len(conjuncts(n.predicate)) if isinstance(n, pn.Filter) else
               len(n.left_keys) if isinstance(n, pn.Join) else 0 for n in pn.walk(plan))


def _prepared(sql: str) -> pn.Node:
    return before(join_order, raw(sql))


# ---------------------------------------------------------------------- fixtures
def test_neighbours_without_a_condition_are_joined_along_the_graph_instead():
    plan = _prepared(REORDERED[0])
    assert render(plan).splitlines()[2] == "    Join on cross product"  # a × b, then c on both keys
    assert render(join_order(plan)) == "\n".join([
        "Project x=$0(x), z=$4(z)",
        "  Join on $0(x) = $3(z)",
        "    Scan source a [x, y, s]",
        "    Join on $0(x) = $1(w)",
        "      Scan source b [x, z, t]",
        "      Scan source c [z, w]",
    ])


def test_relations_in_a_new_order_get_their_columns_put_back():
    """With a and c small and b large, (a ⋈ c) ⋈ b: a projection restores the order a, b, c."""
    stats = {"a": RelationStats(10), "b": RelationStats(10_000), "c": RelationStats(10)}
    assert render(join_order(_prepared(REORDERED[0]), statistics=stats)) == "\n".join([
        "Project x=$0(x), z=$4(z)",
        "  Project x=$0(x), y=$1(y), s=$2(s), x=$5(x), z=$6(z), t=$7(t), z=$3(z), w=$4(w)",
        "    Join on $4(w) = $0(x)",
        "      Join on $0(x) = $0(z)",
        "        Scan source a [x, y, s]",
        "        Scan source c [z, w]",
        "      Scan source b [x, z, t]",
    ])


def test_a_join_order_that_follows_the_graph_and_costs_no_more_is_kept():
    plan = _prepared("SELECT a.s FROM a JOIN b ON a.x = b.x JOIN c ON b.z = c.z")
    assert join_order(plan) is plan


def test_the_sizes_in_state_choose_among_connected_orders():
    """a – b – c: with a large and c small, b ⋈ c first (a's rows meet the small join once); the other
    way round with c large."""
    sql = "SELECT a.s FROM a JOIN b ON a.x = b.x JOIN c ON b.z = c.z"
    big_a = {"a": RelationStats(100_000), "b": RelationStats(1000), "c": RelationStats(10)}
    big_c = {"a": RelationStats(10), "b": RelationStats(1000), "c": RelationStats(100_000)}
    first = {}
    for name, stats in (("big_a", big_a), ("big_c", big_c)):
        inner = _joins(join_order(_prepared(sql), statistics=stats))[1]
        first[name] = sorted(n.relation for n in pn.walk(inner) if isinstance(n, pn.Scan))
    assert first == {"big_a": ["b", "c"], "big_c": ["a", "b"]}


def test_a_primary_key_join_does_not_grow_the_rows():
    """Joining b to a on a's primary key keeps b's rows; on a column that is not a key the estimate is
    PostgreSQL's default (200 distinct values)."""
    (join,) = _joins(optimize(raw("SELECT a.y FROM a, b WHERE a.x = b.x"), RULES[:3]))
    keyed = {"a": RelationStats(5000, (("x",),)), "b": RelationStats(800)}
    assert estimate(join.left, keyed).distinct([ColumnRef(INT, 0)]) == 5000
    assert estimate(join.right, keyed).distinct([ColumnRef(INT, 0)]) == 200
    assert estimate(join, keyed).rows == 800
    assert estimate(join, {"a": RelationStats(5000), "b": RelationStats(800)}).rows == 5000 * 800 / 200


def test_a_filter_on_the_key_side_keeps_the_join_in_proportion():
    """25 of a's 5,000 keys pass its filter: b's 800 rows keep 800 · 25 / 5,000 of their matches."""
    (join,) = _joins(optimize(raw("SELECT a.y FROM a, b WHERE a.x = b.x AND a.y = 1"), RULES[:3]))
    assert estimate(join, {"a": RelationStats(5000, (("x",),)), "b": RelationStats(800)}).rows == 4


def test_columns_equal_to_a_small_key_have_at_most_its_rows_of_values():
    """a.y = b.z = c.z with c's key z of 25 rows: a.y and b.z have 25 values, so a ⋈ b keeps
    15,000 · 1,000 / 25 rows (PostgreSQL's default 200 values alone: / 200)."""
    graph = JoinGraph.of(_prepared("SELECT a.s FROM a, b, c WHERE a.y = b.z AND b.z = c.z"))
    keyed = {"a": RelationStats(15_000), "b": RelationStats(1000), "c": RelationStats(25, (("z",),))}
    assert weigh(graph, keyed)[1].card(0b011) == 15_000 * 1000 / 25
    assert weigh(graph, {**keyed, "c": RelationStats(25)})[1].card(0b011) == 15_000 * 1000 / 200


def test_parts_without_a_condition_between_them_are_joined_last_the_smallest_first():
    plan = join_order(_prepared(REORDERED[3]), statistics={n: RelationStats(r) for n, r in
                                                            (("a", 500), ("b", 20), ("c", 400))})
    top = _joins(plan)[0]
    assert not top.left_keys and top.left == pn.Scan("b", raw("SELECT * FROM b").columns)
    assert [bool(j.left_keys) for j in _joins(plan)] == [False, True]  # one cross product: the query's


def test_an_outer_or_anti_join_is_a_barrier_reordered_inside_not_across():
    plan = _prepared(REORDERED[5])
    anti = next(n for n in pn.walk(plan) if isinstance(n, pn.LogicalJoin))
    out = join_order(plan)
    (new_anti,) = [n for n in pn.walk(out) if isinstance(n, pn.LogicalJoin)]
    assert new_anti.right == anti.right and new_anti.kind == "anti"
    assert all(j.left_keys for j in _joins(new_anti.left))  # the inner joins under it: no cross product
    assert not all(j.left_keys for j in _joins(anti.left))


def test_a_relation_under_a_column_picking_projection_joins_the_tree():
    """The derived table's join (a, b) and the outer one (t, c, b2) are one tree of inner joins."""
    out = join_order(_prepared(REORDERED[7]))
    assert len(_joins(out)) == 3 and all(j.left_keys for j in _joins(out))


# ---------------------------------------------------------------------- every FROM order
CHAIN = ["a a1", "b", "c", "a a2"]  # a1.x = b.x, b.z = c.z, c.w = a2.y: a chain a1 – b – c – a2


@pytest.mark.parametrize("order", list(itertools.permutations(CHAIN)))
def test_every_from_order_of_a_chain_joins_along_it(order):
    sql = f"SELECT a1.s, a2.x, b.t FROM {', '.join(order)} WHERE a1.x = b.x AND b.z = c.z AND c.w = a2.y"
    out = join_order(_prepared(sql))
    assert len(_joins(out)) == 3 and all(j.left_keys for j in _joins(out)), render(out)
    assert out.columns == raw(sql).columns


@pytest.mark.parametrize("sql", REORDERED + QUERIES)
def test_each_condition_is_placed_once_and_the_columns_stay(sql):
    plan = _prepared(sql)
    out = join_order(plan, statistics={"a": RelationStats(50), "b": RelationStats(7), "c": RelationStats(300)})
    assert _conditions(out) == _conditions(plan)
    assert out.columns == plan.columns


@pytest.mark.parametrize("sql", REORDERED + QUERIES)
def test_same_rows_on_random_tables(sql):
    check_same_result(join_order, _prepared(sql))


def test_the_check_catches_a_dropped_condition():
    plan = _prepared(REORDERED[0])

    def lose_one(p):
        out = join_order(p)
        j = _joins(out)[0]
        return pn.Project(pn.Join(j.left, j.right, j.left_keys[:0], j.right_keys[:0]), out.exprs, out.names)
    with pytest.raises(AssertionError):
        check_same_result(lose_one, plan)


# ---------------------------------------------------------------------- the search
def _random_graph(rng: random.Random, n: int) -> list[int]:
    """A connected random graph: a random spanning tree plus a few more edges."""
    adjacent = [0] * n
    for i in range(1, n):
        j = rng.randrange(i)
        adjacent[i] |= 1 << j
        adjacent[j] |= 1 << i
    for _ in range(rng.randrange(n)):
        i, j = rng.sample(range(n), 2)
        adjacent[i] |= 1 << j
        adjacent[j] |= 1 << i
    return adjacent


def _connected(mask: int, adjacent: list[int]) -> bool:
    start = mask & -mask
    seen = start
    while True:
        more = seen
        for i in range(len(adjacent)):
            if seen >> i & 1:
                more |= adjacent[i] & mask
        if more == seen:
            return seen == mask
        seen = more


def _brute_pairs(n: int, adjacent: list[int]) -> set[frozenset[int]]:
    out = set()
    for s1 in range(1, 1 << n):
        for s2 in range(1, 1 << n):
            if s1 & s2 or not (_connected(s1, adjacent) and _connected(s2, adjacent)):
                continue
            if any(adjacent[i] & s2 for i in range(n) if s1 >> i & 1):
                out.add(frozenset((s1, s2)))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_pairs_are_every_connected_pair_once(seed):
    rng = random.Random(seed)
    n = rng.randrange(2, 7)
    adjacent = _random_graph(rng, n)
    pairs = list(csg_cmp_pairs(n, adjacent))
    assert len(pairs) == len({frozenset(p) for p in pairs})
    assert {frozenset(p) for p in pairs} == _brute_pairs(n, adjacent)


def _trees(leaves: frozenset[int], adjacent: list[int]):
    """Every join tree over ``leaves`` whose joins have an edge between their sides."""
    if len(leaves) == 1:
        yield next(iter(leaves))
        return
    items = sorted(leaves)
    for r in range(1, len(items)):
        for left in itertools.combinations(items, r):
            if items[0] not in left:
                continue
            lset, rset = frozenset(left), leaves - frozenset(left)
            if not any(adjacent[i] & sum(1 << j for j in rset) for i in lset):
                continue
            for lt in _trees(lset, adjacent):
                for rt in _trees(rset, adjacent):
                    yield (lt, rt)


@pytest.mark.parametrize("seed", range(10))
def test_dynamic_programming_finds_the_cheapest_tree(seed):
    rng = random.Random(100 + seed)
    n = rng.randrange(3, 7)
    adjacent = _random_graph(rng, n)
    factors = [((1 << i) | (1 << j), 1 / rng.choice([1, 10, 100, 1000]))
               for i in range(n) for j in range(i + 1, n) if adjacent[i] >> j & 1]
    sizes = Sizes([Estimate(float(rng.choice([1, 10, 100, 10_000]))) for _ in range(n)], factors)
    chosen = best_tree(list(range(n)), adjacent, sizes)
    cheapest = min(sizes.cost(t) for t in _trees(frozenset(range(n)), adjacent))
    assert sizes.cost(chosen) == pytest.approx(cheapest)
    assert sorted(_leaves(chosen)) == list(range(n))


def _leaves(tree) -> list[int]:
    return [tree] if isinstance(tree, int) else _leaves(tree[0]) + _leaves(tree[1])


def test_beyond_the_dynamic_programmings_reach_a_greedy_search_joins_along_edges():
    rng = random.Random(7)
    n = 9
    adjacent = _random_graph(rng, n)
    factors = [((1 << i) | (1 << j), 0.01) for i in range(n) for j in range(i + 1, n) if adjacent[i] >> j & 1]
    sizes = Sizes([Estimate(float(rng.choice([10, 1000]))) for _ in range(n)], factors)
    greedy = best_tree(list(range(n)), adjacent, sizes, dp_relations=4)
    assert sorted(_leaves(greedy)) == list(range(n)) and along_edges(greedy, adjacent)
    assert greedy != best_tree(list(range(n)), adjacent, sizes)  # (the dynamic programming's is cheaper)


def test_seventeen_tables_in_the_worst_from_order_plan_without_a_cross_product():
    """The chain t1 – t2 – … – t17 written odd tables first: no two FROM neighbours share a condition."""
    names = [f"c{i}" for i in range(17)]
    order = names[0::2] + names[1::2]
    where = " AND ".join(f"{names[i]}.w = {names[i + 1]}.z" for i in range(16))
    plan = _prepared(f"SELECT c0.z, c16.w FROM {', '.join(f'c {n}' for n in order)} WHERE {where}")
    assert sum(not j.left_keys for j in _joins(plan)) > 0
    out = join_order(plan)
    assert len(_joins(out)) == 16 and all(j.left_keys for j in _joins(out))
    assert _conditions(out) == _conditions(plan) == 16


def test_statistics_read_on_demand_are_recorded():
    """``Observed`` (empty until asked, so falsy) is asked for the relations the plan reads, once each."""
    asked = []

    def read(name):
        asked.append(name)
        return RelationStats(10) if name != "c" else None
    observed = Observed(read)
    join_order(_prepared(REORDERED[0]), statistics=observed)
    assert sorted(asked) == ["a", "b", "c"] and dict(observed) == {"a": RelationStats(10), "b": RelationStats(10)}
    assert from_json(json.loads(json.dumps(to_json(observed)))) == dict(observed)


def test_optimize_passes_a_rule_only_the_keywords_it_declares():
    seen = []

    def plain(plan):
        seen.append("plain")
        return plan

    def sized(plan, statistics=None):
        seen.append(statistics)
        return plan
    plan = raw("SELECT x FROM a")
    assert optimize(plan, (plain, sized), statistics={"a": RelationStats(3)}) is plan
    assert seen == ["plain", {"a": RelationStats(3)}]
