"""plan.rewrite.optimize: the whole rule sequence keeps the builder's plain plan's rows; no LogicalJoin is left."""

from __future__ import annotations

import pytest

from freshview.plan import nodes as pn
from freshview.plan.rewrite import RULES, joins, optimize
from tests.plan.fixtures import QUERIES, check_same_result, raw


def test_lowering_comes_after_pushdown_and_pruning():
    names = [r.__name__ for r in RULES]
    assert names.index("lower_joins") > names.index("prune") > names.index("pushdown")
    assert [r.__name__ for r in RULES[-2:]] == ["merge_projects", "temporal_filter"]  # now() scheduled last


@pytest.mark.parametrize("sql", QUERIES)
def test_optimized_plan_has_the_plain_plans_rows(sql):
    plan = raw(sql)
    optimized = optimize(plan)
    assert not any(isinstance(n, pn.LogicalJoin) for n in pn.walk(optimized))
    check_same_result(lambda p: optimized, joins.lower_joins(plan))
