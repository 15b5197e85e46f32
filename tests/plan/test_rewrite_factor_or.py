"""plan.rewrite.factor_or: fixtures (input plan -> expected plan) and same rows on random tables."""

from __future__ import annotations

import pytest

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, ColumnRef, Literal
from freshview.plan.rewrite.factor_or import factor_common_conjuncts, factor_or
from freshview.schema import SqlType
from tests.plan.fixtures import A, INT, QUERIES, before, check_same_result, raw

BOOL = SqlType("bool")
P, Q, R = (Call(BOOL, ">", (ColumnRef(INT, i), Literal(INT, 1))) for i in range(3))


def AND(a, b):
    return Call(BOOL, "and", (a, b))


def OR(a, b):
    return Call(BOOL, "or", (a, b))


def test_common_conjunct_factored_out():
    assert factor_common_conjuncts(OR(AND(P, Q), AND(P, R))) == AND(P, OR(Q, R))


def test_a_branch_that_is_only_the_common_part_implies_the_or():
    assert factor_common_conjuncts(OR(P, AND(P, R))) == P


def test_nothing_common_nothing_changes():
    assert factor_common_conjuncts(OR(Q, AND(P, R))) == OR(Q, AND(P, R))


def test_applied_to_every_filter():
    plan = pn.Filter(A, AND(R, OR(AND(P, Q), P)))
    assert factor_or(plan) == pn.Filter(A, AND(R, P))


@pytest.mark.parametrize("sql", [QUERIES[1], QUERIES[2], QUERIES[5]])
def test_same_rows_on_random_tables(sql):
    check_same_result(factor_or, before(factor_or, raw(sql)))


def test_same_rows_with_nulls_in_every_branch():
    plan = pn.Filter(A, OR(AND(P, Q), AND(P, Call(BOOL, "is_null", (ColumnRef(INT, 1),)))))
    check_same_result(factor_or, plan)
