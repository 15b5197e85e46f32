"""plan.rewrite.merge_projects: fixtures (input plan -> expected plan) and same rows on random tables."""

from __future__ import annotations

import pytest

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, ColumnRef, Literal
from freshview.plan.rewrite.merge_projects import merge_projects
from freshview.schema import SqlType
from tests.plan.fixtures import A, INT, QUERIES, before, check_same_result, raw

BOOL = SqlType("bool")
PLUS = Call(INT, "+", (ColumnRef(INT, 1), Literal(INT, 1)))


def test_a_selection_over_a_projection_becomes_one_projection():
    inner = pn.Project(A, (ColumnRef(INT, 0), PLUS), ("x", "v"))
    plan = pn.Project(inner, (ColumnRef(INT, 1),), ("v",))
    assert merge_projects(plan) == pn.Project(A, (PLUS,), ("v",))


def test_a_computation_over_a_computation_is_not_merged():
    inner = pn.Project(A, (PLUS,), ("v",))
    twice = Call(INT, "*", (ColumnRef(INT, 0), ColumnRef(INT, 0)))
    plan = pn.Project(inner, (twice,), ("w",))
    assert merge_projects(plan) == plan  # merged, v would be computed twice per row


def test_an_identity_projection_is_dropped_a_renaming_one_kept():
    same = pn.Project(A, tuple(ColumnRef(t, i, n) for i, (n, t) in enumerate(A.columns)), ("x", "y", "s"))
    renamed = pn.Project(A, same.exprs, ("x", "y", "u"))
    assert merge_projects(same) == A
    assert merge_projects(renamed) == renamed


def test_adjacent_filters_merge():
    p = Call(BOOL, ">", (ColumnRef(INT, 0), Literal(INT, 1)))
    q = Call(BOOL, "<", (ColumnRef(INT, 1), Literal(INT, 2)))
    assert merge_projects(pn.Filter(pn.Filter(A, p), q)) == pn.Filter(A, Call(BOOL, "and", (p, q)))


@pytest.mark.parametrize("sql", QUERIES[::2])
def test_same_rows_on_random_tables(sql):
    check_same_result(merge_projects, before(merge_projects, raw(sql)))
