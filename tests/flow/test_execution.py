"""The ``execution`` setting: which executor runs each view's step, and what the flow says about it."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest

from freshview import FreshviewError, IncrementalFlow
from freshview.runtime import cost

D = decimal.Decimal
ORDERS = "o_id INT, o_customer INT, amount NUMERIC(10,2)"
TOTALS = "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer"


def orders(rows, weight=1):
    return pa.table({
        "o_id": pa.array([r[0] for r in rows], pa.int32()),
        "o_customer": pa.array([r[1] for r in rows], pa.int32()),
        "amount": pa.array([D(str(r[2])) for r in rows], pa.decimal128(10, 2)),
        "_weight": pa.array([weight] * len(rows), pa.int64()),
    })


def snapshot_rows(flow, view):
    return sorted(tuple(r.values()) for r in flow.snapshot(view).to_pylist())


def make(make_flow, execution):
    f = make_flow(execution=execution)
    f.register_source("orders", ORDERS, primary_key=["o_id"])
    f.register_view("totals", TOTALS)
    return f


@pytest.mark.parametrize("execution", ["local", "spark"])
def test_forced_execution_runs_every_step_there_and_says_so(make_flow, execution):
    f = make(make_flow, execution)
    s = f.tick("orders", orders([(1, 10, 5), (2, 10, 7)]))
    step = s.views["totals"]
    assert step.executor == execution and step.reason == f"execution={execution!r}" and step.rows_in == 2
    assert snapshot_rows(f, "totals") == [(10, D("12.00"), 2)]
    text = f.explain("totals")
    assert f"execution: {execution}; last step: {execution}" in text and "cost model: local ≈" in text


def test_auto_runs_small_steps_in_process_and_large_ones_on_spark(make_flow):
    f = make(make_flow, "auto")
    s = f.tick("orders", orders([(i, i % 3, 1) for i in range(50)]))
    assert s.views["totals"].executor == "local" and s.views["totals"].reason.startswith("auto: 50 rows")
    big = 200_000  # beyond the priors' crossover: Spark's fixed cost pays off
    s = f.tick("orders", orders([(i, i % 3, 2) for i in range(50, 50 + big)]))
    assert s.views["totals"].executor == "spark", s.views["totals"].reason
    assert s.views["totals"].reason.startswith(f"auto: {big} rows")
    expected = {}
    for i in range(50 + big):
        total, n = expected.get(i % 3, (0, 0))
        expected[i % 3] = (total + (1 if i < 50 else 2), n + 1)
    assert snapshot_rows(f, "totals") == sorted((g, D(t).quantize(D("0.01")), n) for g, (t, n) in expected.items())
    s = f.tick("orders", orders([(7, 1, 1)], -1))  # and back in-process for a small one
    assert s.views["totals"].executor == "local"


def test_measured_step_times_move_the_choice(make_flow, monkeypatch):
    f = make(make_flow, "auto")
    monkeypatch.setitem(cost.PRIORS, "spark", (0.0, 0.0))  # as if Spark were free: the model sends steps there
    s = f.tick("orders", orders([(1, 1, 1)]))
    assert s.views["totals"].executor == "spark"
    assert "1 steps measured" in f.explain("totals").split("spark ≈")[1]


def test_skipped_views_name_no_executor(make_flow):
    f = make(make_flow, "auto")
    f.register_source("other", "x INT")
    s = f.tick("other", pa.table({"x": pa.array([1], pa.int32()), "_weight": [1]}))
    assert s.views["totals"].skipped and s.views["totals"].executor is None


def test_unknown_execution_is_refused():
    with pytest.raises(FreshviewError, match="execution must be one of auto, local, spark"):
        IncrementalFlow(execution="gpu")


def test_local_flow_needs_no_spark_until_a_first_computation(tmp_path):
    f = IncrementalFlow(state_dir=tmp_path / "s", execution="local")
    try:
        f.register_source("orders", ORDERS, primary_key=["o_id"])
        f.tick("orders", orders([(1, 10, 5)]))
        assert f._spark is None  # sources and steps without views never start Spark
    finally:
        f.close()


def test_register_views_computes_several_views_together(make_flow, monkeypatch):
    f = make_flow()
    f.register_source("orders", ORDERS, primary_key=["o_id"])
    f.tick("orders", orders([(1, 10, 5), (2, 10, 7), (3, 11, 1)]))
    reads = []
    original = f._current_contents
    monkeypatch.setattr(f, "_current_contents", lambda r: reads.append(r) or original(r))
    f.register_views([("totals", TOTALS),
                      ("big", "SELECT o_customer FROM totals WHERE total > 5"),
                      ("ids", "SELECT o_id FROM orders")])
    assert reads == ["orders"]  # one read of the source for the three views (and none of the new view)
    assert snapshot_rows(f, "big") == [(10,)] and snapshot_rows(f, "ids") == [(1,), (2,), (3,)]
    f.tick("orders", orders([(4, 11, 9)]))
    assert snapshot_rows(f, "big") == [(10,), (11,)]


def test_register_views_is_all_or_nothing(make_flow):
    f = make_flow()
    f.register_source("orders", ORDERS, primary_key=["o_id"])
    with pytest.raises(Exception, match="nope"):
        f.register_views([("totals", TOTALS), ("bad", "SELECT nope FROM orders")])
    assert f.views == []
    f.register_views([("totals", TOTALS)])
    f.register_views([("totals", TOTALS)])  # the same again: nothing to do
    assert f.views == ["totals"]


def test_a_delta_with_an_empty_chunk_between_two_others_loses_no_rows(make_flow):
    """PySpark's createDataFrame stopped at an empty record batch: the rows after it were dropped."""
    import numpy as np
    import pyarrow as pa

    results = {}
    for execution in ("local", "spark"):
        flow = make_flow(execution=execution)
        flow.register_source("t", "id BIGINT, g INT, v BIGINT", primary_key=["id"])
        flow.register_view("s", "SELECT g, SUM(v) AS s, COUNT(*) AS n FROM t GROUP BY g")
        n = 300
        base = pa.table({"id": np.arange(n), "g": (np.arange(n) % 10).astype(np.int32),
                         "v": np.ones(n, np.int64), "_weight": np.ones(n, np.int64)})
        flow.tick("t", base)
        plus = base.set_column(2, "v", pa.array(np.full(n, 2, np.int64)))
        minus = base.set_column(3, "_weight", pa.array(-np.ones(n, np.int64)))
        flow.tick("t", pa.concat_tables([plus, base.slice(0, 0), minus]))
        results[execution] = sorted((r["g"], int(r["s"]), r["n"]) for r in flow.snapshot("s").to_pylist())
    assert results["spark"] == results["local"] == [(g, 60, 30) for g in range(10)]
