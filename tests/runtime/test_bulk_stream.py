"""A first computation on Spark streams its results to state in bounded batches (issue 22).

``BulkKernels.BATCH_ROWS`` is lowered to a few rows; the first computation of a
join feeding a join and an aggregate of many groups must then never take more
than that many rows of a Spark result at once (every way results reach the
driver is spied on: ``DataFrame.toArrow``, ``Delta.materialize`` and the
batches the store's bulk load takes in), write its state in several runs, and
give the same rows, state and later steps as the in-process first computation.
"""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from freshview.runtime.delta import Delta
from freshview.runtime.kernels.spark import BulkKernels
from freshview.runtime.state import SpineStateStore

LIMIT = 50
N = 600  # rows of the larger source: many times LIMIT

SOURCES = {"orders": ("o_id INT, o_customer INT, amount NUMERIC(10,2)", ["o_id"]),
           "lines": ("l_order INT, l_no INT, qty INT", ["l_order", "l_no"]),
           "customers": ("c_id INT, segment TEXT", ["c_id"])}
VIEWS = {
    # a join of a join (the inner join's output is a Spark result that must reach state) and a plain
    # join as the view's output
    "wide": "SELECT c_id, segment, o_id, l_no, qty, amount FROM customers JOIN orders ON o_customer = c_id "
            "JOIN lines ON l_order = o_id",
    # an aggregate of many groups over the same joins
    "per_order": "SELECT o_id, segment, COUNT(*) AS n, SUM(qty * amount) AS total FROM customers "
                 "JOIN orders ON o_customer = c_id JOIN lines ON l_order = o_id GROUP BY o_id, segment",
}


def data() -> dict[str, pa.Table]:
    orders = pa.table({"o_id": pa.array(range(N), pa.int32()),
                       "o_customer": pa.array([i % 97 for i in range(N)], pa.int32()),
                       "amount": pa.array([Decimal(i % 13) + Decimal("0.25") for i in range(N)], pa.decimal128(10, 2)),
                       "_weight": pa.array([1] * N, pa.int64())})
    lines = pa.table({"l_order": pa.array([i // 2 for i in range(2 * N)], pa.int32()),
                      "l_no": pa.array([i % 2 for i in range(2 * N)], pa.int32()),
                      "qty": pa.array([i % 7 for i in range(2 * N)], pa.int32()),
                      "_weight": pa.array([1] * (2 * N), pa.int64())})
    customers = pa.table({"c_id": pa.array(range(100), pa.int32()),
                          "segment": pa.array([f"s{i % 5}" for i in range(100)], pa.string()),
                          "_weight": pa.array([1] * 100, pa.int64())})
    return {"orders": orders, "lines": lines, "customers": customers}


def rows(flow, view):
    return sorted(tuple(r.values()) for r in flow.snapshot(view).to_pylist())


@pytest.fixture
def spied(spark, monkeypatch):
    """The largest number of rows a Spark result handed the driver at once, per way."""
    seen = {"toArrow": 0, "materialize": 0, "load_runs": 0, "load_runs_tables": 0}
    frame = type(spark.range(1))
    to_arrow = frame.toArrow

    def spy_to_arrow(self):
        table = to_arrow(self)
        seen["toArrow"] = max(seen["toArrow"], table.num_rows)
        return table

    materialize = Delta.materialize

    def spy_materialize(self, consolidated=True):
        spark_result = self.arrow is None
        table = materialize(self, consolidated)
        if spark_result:
            seen["materialize"] = max(seen["materialize"], table.num_rows)
        return table

    load_runs = SpineStateStore.load_runs

    def spy_load_runs(self, name, tables):
        def counted():
            for t in tables:
                seen["load_runs"] = max(seen["load_runs"], t.num_rows)
                seen["load_runs_tables"] += 1
                yield t
        return load_runs(self, name, counted())

    monkeypatch.setattr(frame, "toArrow", spy_to_arrow)
    monkeypatch.setattr(Delta, "materialize", spy_materialize)
    monkeypatch.setattr(SpineStateStore, "load_runs", spy_load_runs)
    monkeypatch.setattr(BulkKernels, "BATCH_ROWS", LIMIT, raising=False)
    return seen


def make(make_flow, first: str):
    flow = make_flow(execution="local", first_computation=first)
    for name, (ddl, key) in SOURCES.items():
        flow.register_source(name, ddl, primary_key=key)
    flow.tick(data())
    return flow


def test_a_first_computation_on_spark_takes_its_results_in_bounded_batches(make_flow, spied):
    ours = make(make_flow, "spark")
    before = dict(spied)
    for view, sql in VIEWS.items():
        ours.register_view(view, sql)
    assert ours.explain("wide").count("first computation: spark") == 1
    # nothing larger than a batch came from Spark, however it came ...
    assert spied["toArrow"] <= LIMIT and spied["materialize"] <= LIMIT, spied
    # ... and the joins' sides, the aggregate's accumulators and the views' rows went to state in many
    # batches (the sources' bulk loads before, if any, are not counted)
    assert spied["load_runs"] <= 2 * N and spied["load_runs_tables"] - before["load_runs_tables"] > 2 * N // LIMIT
    local = make(make_flow, "local")
    for view, sql in VIEWS.items():
        local.register_view(view, sql)
    for view in VIEWS:
        assert rows(ours, view) == rows(local, view) and len(rows(ours, view)) >= N, view
    # the state written batch by batch is the state a step reads: later steps agree too
    change = {"lines": pa.table({"l_order": pa.array([3, 4], pa.int32()), "l_no": pa.array([0, 5], pa.int32()),
                                 "qty": pa.array([6, 9], pa.int32()), "_weight": pa.array([-1, 1], pa.int64())}),
              "customers": pa.table({"c_id": pa.array([5], pa.int32()), "segment": pa.array(["s0"]),
                                     "_weight": pa.array([-1], pa.int64())})}
    for flow in (ours, local):
        flow.tick(change)
    for view in VIEWS:
        assert rows(ours, view) == rows(local, view), view
