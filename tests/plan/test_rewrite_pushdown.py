"""plan.rewrite.pushdown: fixtures (input plan -> expected plan) and same rows on random tables."""

from __future__ import annotations

import pytest

from freshview.plan import nodes as pn
from freshview.plan.explain import render
from freshview.plan.expr import Call, ColumnRef, Literal
from freshview.plan.rewrite import joins
from freshview.plan.rewrite.pushdown import pushdown, split_equality
from freshview.schema import SqlType
from tests.plan.fixtures import A, B, INT, QUERIES, TEXT, before, check_same_result, raw

BOOL = SqlType("bool")


def col(i, t=INT):
    return ColumnRef(t, i)


def eq(a, b):
    return Call(BOOL, "=", (a, b))


def gt(a, n):
    return Call(BOOL, ">", (a, Literal(INT, n)))


def test_conjuncts_move_into_the_join_inputs_and_equalities_become_keys():
    plan = pn.Filter(pn.Join(A, B, (), ()), Call(BOOL, "and", (eq(col(0), col(3)), Call(BOOL, "and", (
        gt(col(1), 1), gt(col(4), 2))))))
    assert render(pushdown(plan)) == "\n".join([
        "Join on $0 = $0",
        "  Filter >($1, 1)",
        "    Scan source a [x, y, s]",
        "  Filter >($1, 2)",
        "    Scan source b [x, z, t]",
    ])


def test_a_conjunct_over_both_sides_that_is_no_equality_stays_above_the_join():
    plan = pn.Filter(pn.Join(A, B, (), ()), Call(BOOL, "<", (col(1), col(4))))
    assert pushdown(plan) == plan


def test_a_conjunct_reading_a_scalar_subquerys_single_row_stays_above_the_join():
    # sql.single_row: the value (and its "more than one row" error) is due only on rows that read it,
    # so neither the equality (no key computed on b's rows) nor a condition on b's side alone moves down.
    value = Call(INT, "single_row", (col(4), col(5)), "postgres")
    for conjunct in (eq(col(1), value), gt(value, 2)):
        plan = pn.Filter(pn.Join(A, B, (), ()), Call(BOOL, "and", (conjunct, gt(col(3), 1))))
        assert pushdown(plan) == pn.Filter(pn.Join(A, pn.Filter(B, gt(col(0), 1)), (), ()), conjunct), render(
            pushdown(plan))
    assert split_equality(eq(col(1), value), 3) is None


def test_through_a_projection_the_conjunct_is_rewritten_over_its_input():
    plus = Call(INT, "+", (col(1), Literal(INT, 1)))
    plan = pn.Filter(pn.Project(A, (col(0), plus), ("x", "v")), gt(col(1), 2))
    assert pushdown(plan) == pn.Project(pn.Filter(A, gt(plus, 2)), (col(0), plus), ("x", "v"))


def test_below_an_aggregate_only_conjuncts_on_group_columns():
    agg = pn.Aggregate(A, (col(0),), (), ("x",))
    from freshview.plan.expr import AggCall
    agg = pn.Aggregate(A, (col(0),), (AggCall("count_star", None, SqlType("int8")),), ("x",))
    on_count = Call(BOOL, ">", (ColumnRef(SqlType("int8"), 1), Literal(SqlType("int8"), 1)))
    plan = pn.Filter(agg, Call(BOOL, "and", (gt(col(0), 1), on_count)))
    assert pushdown(plan) == pn.Filter(pn.Aggregate(pn.Filter(A, gt(col(0), 1)), agg.group, agg.aggs, ("x",)),
                                       on_count)


def test_topk_stops_a_conjunct():
    top = pn.TopK(A, (pn.SortKey(1),), 2)
    plan = pn.Filter(top, gt(col(0), 1))
    assert pushdown(plan) == plan


def test_over_a_left_join_a_conjunct_on_the_padded_side_filters_only_matched_rows():
    """σ_{r.z IS NULL}(A ⟕ B): B's rows are filtered in the matched branch; in the padded branch the
    conjunct is true, so the anti-join (every unmatched A row) is untouched."""
    lowered = joins.outer_join("left", A, B, (col(0),), (col(0),))
    plan = pushdown(pn.Filter(lowered, Call(BOOL, "is_null", (col(4),))))
    matched, padded = plan.parts
    assert render(matched) == "\n".join([
        "Join on $0 = $0",
        "  Scan source a [x, y, s]",
        "  Filter is_null($1)",
        "    Scan source b [x, z, t]",
    ])
    assert padded == lowered.parts[1]


def test_a_conjunct_no_padded_row_passes_leaves_the_inner_join():
    lowered = joins.outer_join("left", A, B, (col(0),), (col(0),))
    plan = pushdown(pn.Filter(lowered, eq(ColumnRef(TEXT, 5), Literal(TEXT, "p"))))
    assert isinstance(plan, pn.Join) and not any(isinstance(n, pn.Negate) for n in pn.walk(plan)), render(plan)


def test_split_equality():
    assert split_equality(eq(col(0), col(4)), 3) == (col(0), col(1))
    assert split_equality(eq(col(4), col(0)), 3) == (col(0), col(1))
    assert split_equality(eq(col(0), col(1)), 3) is None
    assert split_equality(eq(col(0), Literal(INT, 1)), 3) is None


@pytest.mark.parametrize("sql", QUERIES)
def test_same_rows_on_random_tables(sql):
    check_same_result(pushdown, before(pushdown, raw(sql)))


def test_the_check_catches_a_filter_pushed_below_the_padded_side():
    """The unsound move (filtering B before A ⟕ B by a WHERE conjunct on B) changes the rows."""
    is_null = Call(BOOL, "is_null", (col(1),))
    sound = pn.Filter(joins.outer_join("left", A, B, (col(0),), (col(0),)), Call(BOOL, "is_null", (col(4),)))
    unsound = joins.outer_join("left", A, pn.Filter(B, is_null), (col(0),), (col(0),))
    with pytest.raises(AssertionError):
        check_same_result(lambda _plan: unsound, sound)


def test_above_an_unlowered_left_join_only_conjuncts_on_the_preserved_side_move():
    join = pn.LogicalJoin("left", A, B, (col(0),), (col(0),))
    on_a, on_b = gt(col(1), 1), Call(BOOL, "is_null", (col(4),))
    plan = pushdown(pn.Filter(join, Call(BOOL, "and", (on_a, on_b))))
    assert plan == pn.Filter(pn.LogicalJoin("left", pn.Filter(A, on_a), B, (col(0),), (col(0),)), on_b)


def test_above_a_semijoin_every_conjunct_moves_into_its_left():
    join = pn.LogicalJoin("anti", A, B, (col(0),), (col(0),))
    assert pushdown(pn.Filter(join, gt(col(1), 1))) == pn.LogicalJoin("anti", pn.Filter(A, gt(col(1), 1)), B,
                                                                      (col(0),), (col(0),))
