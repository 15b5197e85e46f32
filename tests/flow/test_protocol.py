"""``flow.Flow``: IncrementalFlow and PartitionedIncrementalFlow both implement it, and one scenario written
against the protocol alone (catalog, ticks, snapshots, watches, explain, drops) gives the same rows on both.
"""

from __future__ import annotations

import inspect

import pyarrow as pa

from freshview import IncrementalFlow, PartitionedIncrementalFlow
from freshview.flow import Flow

ORDERS = "o_id INT, o_customer INT, amount INT"
TOTALS = "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer"


def orders(rows, weight=1):
    return pa.table({"o_id": pa.array([r[0] for r in rows], pa.int32()),
                     "o_customer": pa.array([r[1] for r in rows], pa.int32()),
                     "amount": pa.array([r[2] for r in rows], pa.int32()), "_weight": [weight] * len(rows)})


def scenario(flow: Flow) -> list:
    """Everything the protocol promises, used once; returns what a caller would see."""
    seen = []
    flow.register_source("orders", ORDERS, ["o_id"])
    flow.register_source("unused", "x INT")
    flow.register_views([("totals", TOTALS), ("big", "SELECT o_customer FROM totals WHERE total > 5")])
    assert flow.sources == ["orders", "unused"] and flow.views == ["totals", "big"]
    assert flow.readers("orders") == ["totals"] and flow.readers("totals") == ["big"]
    assert [n for n, _ in flow.view_columns("totals")] == ["o_customer", "total", "n"]
    assert flow.source_schema("orders").primary_key == ("o_id",)
    assert flow.relation_columns("totals")[1] is True
    watch = flow.watch_output("totals")
    first = flow.tick("orders", orders([(1, 10, 5), (2, 10, 7), (3, 11, 1)]))
    second = flow.tick({"orders": pa.concat_tables([orders([(3, 11, 1)], -1), orders([(4, 11, 9)])])})
    assert (first.step, second.step, flow.step) == (1, 2, 2) and second.rows_in == 2 and second.duration_ms >= 0
    seen.append(sorted(tuple(r.values()) for r in flow.snapshot("totals").to_pylist()))
    seen.append(sorted(flow.snapshot("big").column("o_customer").to_pylist()))
    seen.append(sum(b.table.num_rows for b in watch.poll()))
    assert "totals" in flow.explain("totals")
    flow.drop_view("big")
    flow.drop_source("unused")
    assert flow.views == ["totals"] and flow.sources == ["orders"]
    return seen


def test_both_flows_implement_the_protocol(spark, tmp_path):
    for cls in (IncrementalFlow, PartitionedIncrementalFlow):
        missing = [name for name in dir(Flow) if not name.startswith("_") and not hasattr(cls, name)]
        assert not missing, (cls.__name__, missing)
        for name in ("tick", "snapshot", "register_source", "watch_output"):  # the shared parameters, in order
            shared = list(inspect.signature(getattr(Flow, name)).parameters)
            assert list(inspect.signature(getattr(cls, name)).parameters)[:len(shared)] == shared, (cls, name)
    with IncrementalFlow(spark=spark, state_dir=tmp_path / "one") as one, \
            PartitionedIncrementalFlow(partitions=2, partition_key={"orders": ["o_customer"], "unused": ["x"]},
                                       spark=spark, state_uri=tmp_path / "sharded") as sharded:
        assert isinstance(one, Flow) and isinstance(sharded, Flow)
        assert scenario(one) == scenario(sharded) == [[(10, 12, 2), (11, 9, 1)], [10, 11], 4]
