"""The aggregates of ``linear_aggs`` and ``ordered_aggs``: their finalisers, and each incremental rule
against its non-incremental self under each executor (the pattern of ``test_operators``)."""

from __future__ import annotations

import math
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from freshview.plan import nodes as pn
from freshview.plan.expr import AggCall, AggOrder, Call, ColumnRef, Literal
from freshview.runtime.operators import linear_aggs
from freshview.schema import SqlType
from tests.runtime.test_operators import EXECUTORS, INT, LEFT, NUM, RIGHT, SEEDS, TEXT, run

BOOL, INT8 = SqlType("bool"), SqlType("int8")
Q16 = Decimal(1).scaleb(-16)
EXAMPLES = {"local": 6, "spark": 2}  # fewer streams than test_operators: these circuits are wider


def examples(executor: str):
    return settings(max_examples=EXAMPLES[executor], derandomize=True, deadline=None,
                    suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------------- finalisers
def test_bool_finalisers_follow_three_valued_logic():
    acc = pa.table({"n0": [0, 3, 3], "f0": [0, 0, 1], "n1": [0, 2, 2], "t1": [0, 0, 2]})
    assert linear_aggs.finalize("bool_and", acc, 0, pa.bool_()).to_pylist() == [None, True, False]
    assert linear_aggs.finalize("bool_or", acc, 1, pa.bool_()).to_pylist() == [None, False, True]


def test_float_variance_is_nan_while_a_non_finite_value_is_counted():
    # values {1, 3} (+ one Infinity in row 1); row 2 has one value; row 3 none
    acc = pa.table({"s0": [4.0, 4.0, 5.0, 0.0], "q0": [10.0, 10.0, 25.0, 0.0],
                    "n0": [2, 3, 1, 0], "x0": [0, 1, 0, 0]})
    samp = linear_aggs.finalize("var_samp", acc, 0, pa.float64()).to_pylist()
    assert samp[0] == 2.0 and math.isnan(samp[1]) and samp[2] is None and samp[3] is None
    pop = linear_aggs.finalize("stddev_pop", acc, 0, pa.float64()).to_pylist()
    assert pop[0] == 1.0 and math.isnan(pop[1]) and pop[2] == 0.0 and pop[3] is None


def test_exact_variance_rounds_half_away_from_zero_at_the_result_scale():
    t = pa.decimal128(38, 16)
    # values {0, 0, 1}: var_samp = 1/3, var_pop = 2/9; {1, 2}: 0.5 and 0.25
    acc = pa.table({"s0": pa.array([1, 3], pa.int64()), "q0": pa.array([Decimal(1), Decimal(5)], pa.decimal128(38, 0)),
                    "n0": pa.array([3, 2], pa.int64())})
    assert linear_aggs.finalize("var_samp", acc, 0, t).to_pylist() == [Decimal("0.3333333333333333"), Decimal("0.5")]
    assert linear_aggs.finalize("var_pop", acc, 0, t).to_pylist() == [Decimal("0.2222222222222222"), Decimal("0.25")]
    sd = linear_aggs.finalize("stddev_samp", acc, 0, t).to_pylist()
    assert abs(sd[0] - Decimal(1 / 3) ** Decimal("0.5")) < Decimal("1e-15") and sd[1] == Decimal("0.7071067811865476")


# ---------------------------------------------------------------------- incremental = recomputed
def _exact_var(vals, sample):
    n = len(vals)
    if n < (2 if sample else 1):
        return None
    s, q = sum(vals), sum(v * v for v in vals)
    return ((n * q - s * s) / Decimal(n * (n - 1) if sample else n * n)).quantize(Q16, ROUND_HALF_UP) \
        if n * q - s * s else Decimal(0)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_distinct_bool_and_variance_equal_recomputed(spark, tmp_path_factory, executor):
    v = ColumnRef(NUM, 1)
    positive = Call(BOOL, ">", (v, Literal(NUM, Decimal("0"))))
    var_type = SqlType.numeric(None, 16)
    plan = pn.Aggregate(LEFT, (ColumnRef(INT, 0),), (
        AggCall("count", v, INT8, distinct=True), AggCall("sum", v, SqlType.numeric(None, 2), distinct=True),
        AggCall("avg", v, var_type, distinct=True), AggCall("bool_and", positive, BOOL),
        AggCall("bool_or", positive, BOOL), AggCall("var_samp", v, var_type), AggCall("var_pop", v, var_type),
        AggCall("var_samp", v, var_type, distinct=True),
    ), ("k",))

    def reference(l, _r):
        groups: dict = {}
        for (k, val), w in l.items():
            groups.setdefault(k, []).extend([val] * w)
        out: Counter = Counter()
        for k, vals in groups.items():
            if not vals:
                continue
            nn = [x for x in vals if x is not None]
            ds = sorted(set(nn))
            pos = [x > 0 for x in nn]
            avg = (sum(ds) / len(ds)).quantize(Q16, ROUND_HALF_UP) if ds else None
            out[(k, len(ds), sum(ds) if ds else None, avg, all(pos) if nn else None, any(pos) if nn else None,
                 _exact_var(nn, True), _exact_var(nn, False), _exact_var(ds, True))] += 1
        return out

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("ad"), plan, reference, steps=10, seed=seed, executor=executor)

    check()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_string_agg_equals_recomputed(spark, tmp_path_factory, executor):
    s = ColumnRef(TEXT, 1)
    plan = pn.Aggregate(RIGHT, (ColumnRef(INT, 0),), (
        AggCall("string_agg", s, TEXT, order=(AggOrder(s, desc=True, nulls_first=True),), separator=","),
        AggCall("string_agg", s, TEXT, separator=""),
        AggCall("count", s, INT8, distinct=True),
        AggCall("string_agg", s, TEXT, distinct=True, order=(AggOrder(s),), separator="|"),
    ), ("k",))
    glob = pn.Aggregate(RIGHT, (), (AggCall("string_agg", s, TEXT, separator="-"),), ())

    def reference(_l, r):
        groups: dict = {}
        for (k, val), w in r.items():
            groups.setdefault(k, []).extend([val] * w)
        out: Counter = Counter()
        for k, vals in groups.items():
            if vals:
                nn = sorted(x for x in vals if x is not None)
                out[(k, ",".join(reversed(nn)) if nn else None, "".join(nn) if nn else None, len(set(nn)),
                     "|".join(sorted(set(nn))) if nn else None)] += 1
        return out

    def global_reference(_l, r):
        nn = sorted(x for (_, x), w in r.items() for _ in range(w) if x is not None)
        return Counter({("-".join(nn) if nn else None,): 1})

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("sa"), plan, reference, steps=10, seed=seed, executor=executor)
        run(spark, tmp_path_factory.mktemp("sg"), glob, global_reference, steps=6, seed=seed, executor=executor)

    check()
