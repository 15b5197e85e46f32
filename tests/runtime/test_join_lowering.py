"""Negate and the lowered join kinds (``plan.rewrite.joins``) against their non-incremental selves.

Each plan runs step by step over random weighted changes (deletions included,
NULL keys, duplicates); after every step the integral of its output must equal
a plain Python evaluation of the same operator over the integrated inputs.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, ColumnRef, Literal
from freshview.plan.rewrite import joins
from freshview.schema import SqlType
from tests.runtime.test_operators import EXECUTORS, LEFT, NUM, RIGHT, SEEDS, TEXT, run

INT, BOOL = SqlType("int4"), SqlType("bool")
LK, RK = (ColumnRef(INT, 0),), (ColumnRef(INT, 0),)
# Residual over left ++ right (k, v, k, s): v > 0 AND (s <> 'a' OR v > 5): a left-only and a mixed conjunct.
RESIDUAL = Call(BOOL, "and", (
    Call(BOOL, ">", (ColumnRef(NUM, 1), Literal(NUM, Decimal("0")))),
    Call(BOOL, "or", (Call(BOOL, "<>", (ColumnRef(TEXT, 3), Literal(TEXT, "a"))),
                      Call(BOOL, ">", (ColumnRef(NUM, 1), Literal(NUM, Decimal("5")))))),
))


def _matches(lr, rr, residual: bool) -> bool:
    if lr[0] is None or lr[0] != rr[0]:
        return False
    if not residual:
        return True
    v, s = lr[1], rr[1]
    if v is None or not v > 0:
        return False
    return (s is not None and s != "a") or v > 5


# Every stream starts with a first computation on Spark: few streams, each of 8 steps.
EXAMPLES = {"local": 3, "spark": 1}


def examples(executor: str):
    return settings(max_examples=EXAMPLES[executor], derandomize=True, deadline=None,
                    suppress_health_check=list(HealthCheck))


def _check(spark, tmp_path_factory, executor, plan, reference, name):
    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp(name), plan, reference, seed=seed, executor=executor)

    check()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_negate_is_a_difference(spark, tmp_path_factory, executor):
    positive = pn.Filter(LEFT, Call(BOOL, ">", (ColumnRef(NUM, 1), Literal(NUM, Decimal("0")))))
    plan = pn.UnionAll((LEFT, pn.Negate(positive)))  # rows with v <= 0 or NULL

    def reference(l, _r):
        return Counter({row: w for row, w in l.items() if row[1] is None or row[1] <= 0})

    _check(spark, tmp_path_factory, executor, plan, reference, "neg")


@pytest.mark.parametrize("executor, residual", [("local", False), ("local", True), ("spark", True)])
def test_semijoin_and_antijoin(spark, tmp_path_factory, executor, residual):
    res = RESIDUAL if residual else None
    semi = joins.semijoin(LEFT, RIGHT, LK, RK, res)
    anti = joins.antijoin(LEFT, RIGHT, LK, RK, res)
    # Both at once: semi rows tagged 1, anti rows tagged 0.
    tag = lambda node, t: pn.Project(node, (ColumnRef(INT, 0), ColumnRef(NUM, 1), Literal(INT, t)), ("k", "v", "t"))
    plan = pn.UnionAll((tag(semi, 1), tag(anti, 0)))

    def reference(l, r):
        out: Counter = Counter()
        for lr, w in l.items():
            hit = any(_matches(lr, rr, residual) for rr in r)
            out[lr + (1 if hit else 0,)] += w
        return out

    _check(spark, tmp_path_factory, executor, plan, reference, "semi")


@pytest.mark.parametrize("executor, kind", [("local", "left"), ("local", "right"), ("local", "full"),
                                            ("spark", "full")])
def test_outer_joins(spark, tmp_path_factory, executor, kind):
    plan = joins.outer_join(kind, LEFT, RIGHT, LK, RK, RESIDUAL)

    def reference(l, r):
        out: Counter = Counter()
        for lr, lw in l.items():
            for rr, rw in r.items():
                if _matches(lr, rr, True):
                    out[lr + rr] += lw * rw
        if kind in ("left", "full"):
            for lr, lw in l.items():
                if not any(_matches(lr, rr, True) for rr in r):
                    out[lr + (None, None)] += lw
        if kind in ("right", "full"):
            for rr, rw in r.items():
                if not any(_matches(lr, rr, True) for lr in l):
                    out[(None, None) + rr] += rw
        return out

    _check(spark, tmp_path_factory, executor, plan, reference, kind)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_not_in_is_three_valued(spark, tmp_path_factory, executor):
    plan = joins.not_in(LEFT, RIGHT, (), (), ColumnRef(INT, 0), ColumnRef(INT, 0))  # l.k NOT IN (SELECT r.k)

    def reference(l, r):
        ys = [rr[0] for rr in r]
        out: Counter = Counter()
        for lr, w in l.items():
            x = lr[0]
            if not ys or (x is not None and None not in ys and x not in ys):
                out[lr] += w
        return out

    _check(spark, tmp_path_factory, executor, plan, reference, "notin")


def test_null_safe_keys_match_null_with_null():
    keys = joins.null_safe_keys((("k", INT), ("s", TEXT)))
    assert [str(k) for k in keys] == ["coalesce($0(k), 0)", "is_null($0(k))", "coalesce($1(s), '')", "is_null($1(s))"]
