"""plan.rewrite.prune: fixtures (input plan -> expected plan) and same rows on random tables."""

from __future__ import annotations

import pytest

from freshview.plan import nodes as pn
from freshview.plan.explain import render
from freshview.plan.expr import AggCall, Call, ColumnRef, Literal
from freshview.plan.rewrite.prune import prune
from freshview.schema import SqlType
from tests.plan.fixtures import A, B, INT, QUERIES, TEXT, before, check_same_result, raw

BOOL, INT8 = SqlType("bool"), SqlType("int8")


def test_join_inputs_keep_only_the_columns_used_above_and_their_keys():
    join = pn.Join(pn.Filter(A, Call(BOOL, ">", (ColumnRef(INT, 1), Literal(INT, 1)))), B,
                   (ColumnRef(INT, 0),), (ColumnRef(INT, 0),))
    plan = pn.Project(join, (ColumnRef(TEXT, 5),), ("t",))
    assert render(prune(plan)) == "\n".join([
        "Project t=$2",
        "  Join on $0 = $0",
        "    Project x=$0(x)",
        "      Filter >($1, 1)",
        "        Scan source a [x, y, s]",
        "    Project x=$0(x), t=$2(t)",
        "      Scan source b [x, z, t]",
    ])


def test_an_aggregate_input_keeps_its_group_and_argument_columns():
    plan = pn.Aggregate(A, (ColumnRef(TEXT, 2),), (AggCall("sum", ColumnRef(INT, 1), INT8),), ("s",))
    assert render(prune(plan)) == "\n".join([
        "Aggregate group by $1: sum($0)",
        "  Project y=$1(y), s=$2(s)",
        "    Scan source a [x, y, s]",
    ])


def test_an_input_of_which_no_column_is_used_keeps_one():
    plan = pn.Aggregate(pn.Join(A, B, (), ()), (), (AggCall("count_star", None, INT8),))
    pruned = prune(plan)
    join = pruned.input.input  # the aggregate's input narrowed to one column, over the join
    assert len(pruned.input.columns) == 1 and isinstance(join, pn.Join), render(pruned)
    assert [len(side.columns) for side in join.inputs()] == [1, 1], render(pruned)


def test_distinct_keeps_every_column():
    plan = pn.Project(pn.Distinct(A), (ColumnRef(INT, 0),), ("x",))
    assert prune(plan) == plan


def test_union_parts_are_narrowed_alike():
    plan = pn.Project(pn.UnionAll((A, pn.Negate(A))), (ColumnRef(TEXT, 2),), ("s",))
    pruned = prune(plan)
    assert all(len(p.columns) == 1 for p in pruned.input.parts), render(pruned)


def test_the_output_columns_never_change():
    plan = pn.Filter(A, Call(BOOL, ">", (ColumnRef(INT, 1), Literal(INT, 1))))
    assert prune(plan) == plan


@pytest.mark.parametrize("sql", QUERIES)
def test_same_rows_on_random_tables(sql):
    check_same_result(prune, before(prune, raw(sql)))


def test_an_unlowered_semijoin_keeps_what_its_condition_uses():
    residual = Call(BOOL, "<", (ColumnRef(INT, 1), ColumnRef(INT, 4)))  # a.y < b.z
    semi = pn.LogicalJoin("semi", A, B, (ColumnRef(INT, 0),), (ColumnRef(INT, 0),), residual)
    pruned = prune(pn.Project(semi, (ColumnRef(TEXT, 2),), ("s",)))
    join = pruned.input
    assert [n for n, _ in join.left.columns] == ["x", "y", "s"] and [n for n, _ in join.right.columns] == ["x", "z"]
    assert join.residual == Call(BOOL, "<", (ColumnRef(INT, 1), ColumnRef(INT, 4)))


def reads_of(sql: str) -> dict[str, set[str]]:
    from freshview.plan.rewrite import optimize
    from freshview.plan.rewrite.prune import columns_read

    return {name: set(cols) for name, cols in columns_read(optimize(raw(sql))).items()}


def test_columns_read_are_those_the_result_depends_on():
    assert reads_of("SELECT x FROM a WHERE y > 1") == {"a": {"x", "y"}}
    assert reads_of("SELECT s, COUNT(*) AS n FROM a GROUP BY s") == {"a": {"s"}}
    assert reads_of("SELECT COUNT(*) AS n FROM a") == {"a": set()}  # rows only: no column
    assert reads_of("SELECT * FROM a") == {"a": {"x", "y", "s"}}
    assert reads_of("SELECT a.s, b.t FROM a JOIN b ON a.x = b.x") == {"a": {"x", "s"}, "b": {"x", "t"}}
    assert reads_of("SELECT x FROM a WHERE EXISTS (SELECT 1 FROM c WHERE c.w = a.y)") == {
        "a": {"x", "y"}, "c": {"w"}}
    assert reads_of("SELECT x FROM a UNION ALL SELECT z FROM c") == {"a": {"x"}, "c": {"z"}}
    assert reads_of("SELECT DISTINCT s FROM a") == {"a": {"s"}}
    assert reads_of("SELECT COUNT(*) AS n FROM a WHERE y > 1") == {"a": {"y"}}
    assert reads_of("SELECT COUNT(*) AS n FROM (SELECT x FROM a UNION ALL SELECT z FROM c) u") == {
        "a": set(), "c": set()}
    assert reads_of("SELECT COUNT(*) AS n FROM (SELECT DISTINCT s FROM a) d") == {"a": {"s"}}
