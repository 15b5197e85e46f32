"""PartitionedIncrementalFlow on the session's Spark (local[*]: every shard step is a Spark task):
views equal PostgreSQL's answer after every step of random streams with NULLs and duplicates; a step a
shard refuses is undone everywhere; a coordinator stopped mid-step finishes it; restart, checkpoints."""

from __future__ import annotations

import itertools
import shutil

import pyarrow as pa
import pytest

from freshview.errors import DeltaError, FreshviewError
from freshview.flow.partitioned import PartitionedIncrementalFlow, partition_of, shard_task
from freshview.flow.partitioning import PartitionError
from tests.support.differential import run_differential

_small = [0, 1, 2, 3, 4, 5, 6]
ORDERS = ("o_id INT, o_customer INT, amount INT, status TEXT", ["o_id"], {"o_customer": _small, "amount": _small})
CUSTOMERS = ("c_id BIGINT, region TEXT", ["c_id"], {"c_id": _small, "region": ["n", "s", "e"]})
KEYS = {"orders": ["o_customer"], "customers": ["c_id"]}


@pytest.fixture
def make_partitioned(spark, tmp_path):
    counter = itertools.count()
    flows = []

    def factory(execution=None, partitions=4, state_uri=None):
        flow = PartitionedIncrementalFlow(partitions=partitions, partition_key=KEYS, spark=spark,
                                          state_uri=state_uri or tmp_path / f"p{next(counter)}")
        flows.append(flow)
        return flow
    yield factory
    for flow in flows:
        flow.close()


def test_views_equal_postgres_after_every_step(make_partitioned, oracle):
    report = run_differential(
        make_partitioned, oracle, sources={"orders": ORDERS, "customers": CUSTOMERS},
        views=[("totals", "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n, MIN(status) AS s "
                          "FROM orders GROUP BY o_customer"),
               ("by_region", "SELECT c.region, o.o_customer, SUM(o.amount) AS total FROM orders o "
                             "JOIN customers c ON o.o_customer = c.c_id GROUP BY c.region, o.o_customer"),
               ("left", "SELECT o_id, o_customer, region FROM orders LEFT JOIN customers ON o_customer = c_id"),
               ("cheap", "SELECT amount, status FROM orders WHERE amount < 3"),
               ("distinct", "SELECT DISTINCT o_customer, status FROM orders"),
               ("over_view", "SELECT o_customer, total FROM totals WHERE n > 1")],
        steps=6, seed=3, executions=["partitioned"])
    assert report.steps == 6 and max(report.view_rows["by_region"]) > 0


def test_a_view_that_cannot_be_sharded_is_refused_naming_the_column(make_partitioned):
    flow = make_partitioned()
    flow.register_source("orders", ORDERS[0], primary_key=ORDERS[1])
    with pytest.raises(PartitionError, match=r"view 'v': GROUP BY status does not include the partition key "
                                             r"\(orders: o_customer\)"):
        flow.register_view("v", "SELECT status, COUNT(*) FROM orders GROUP BY status")
    assert flow.views == []
    with pytest.raises(PartitionError, match="no partition key"):
        flow.register_source("other", "x INT")


def _orders(rows, weight=1):
    return pa.table({"o_id": pa.array([r[0] for r in rows], pa.int32()),
                     "o_customer": pa.array([r[1] for r in rows], pa.int32()),
                     "amount": pa.array([r[2] for r in rows], pa.int32()),
                     "status": pa.array([None] * len(rows), pa.string()),
                     "_weight": pa.array([weight] * len(rows), pa.int64())})


def test_a_step_one_shard_refuses_is_undone_on_the_others(make_partitioned):
    flow = make_partitioned(partitions=4)
    flow.register_source("orders", ORDERS[0], primary_key=ORDERS[1])
    flow.register_view("totals", "SELECT o_customer, SUM(amount) AS total FROM orders GROUP BY o_customer")
    flow.tick("orders", _orders([(i, i % 7, i) for i in range(20)]))
    before = sorted(flow.snapshot("totals").to_pylist(), key=str)
    watch = flow.watch_output("totals", timeout=0.1)
    bad = pa.concat_tables([_orders([(100 + i, i, 1) for i in range(7)]), _orders([(999, 3, 1)], weight=-1)])
    with pytest.raises(DeltaError, match="delete of a row that is not present"):
        flow.tick("orders", bad)
    assert flow.step == 1
    assert sorted(flow.snapshot("totals").to_pylist(), key=str) == before  # no shard kept its part
    assert watch.poll() == []
    flow.tick("orders", _orders([(100, 1, 5)]))  # and the flow goes on
    assert flow.step == 2 and {r["o_customer"]: r["total"] for r in flow.snapshot("totals").to_pylist()}[1] == \
        {r["o_customer"]: r["total"] for r in before}[1] + 5
    assert [b.step for b in watch.poll()] == [2]


def test_a_stopped_coordinator_finishes_its_step_and_restarts_where_it_was(make_partitioned, tmp_path):
    uri = tmp_path / "state"
    flow = make_partitioned(state_uri=uri)
    flow.register_source("orders", ORDERS[0], primary_key=ORDERS[1])
    flow.register_view("totals", "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders "
                                 "GROUP BY o_customer")
    flow.tick("orders", _orders([(i, i % 7, i) for i in range(30)]))
    # Step 2 dispatched, half the shards applied it, then the coordinator "died" before publishing it.
    step2 = _orders([(100 + i, i % 7, 1) for i in range(14)])
    shard = partition_of(step2, [1], 4)
    per_shard = {int(i): {"orders": _ipc(step2.filter(pa.array(shard == i)))} for i in set(shard.tolist())}
    flow._write_pending(2, per_shard)
    first = sorted(per_shard)[0]
    assert shard_task((first, flow._shard_dir(first), flow._catalog(), 2, per_shard[first], False))[1] == "ok"
    flow.close()
    again = make_partitioned(state_uri=uri)
    assert again.step == 2 and again.views == ["totals"]
    totals = {r["o_customer"]: (r["total"], r["n"]) for r in again.snapshot("totals").to_pylist()}
    expected = {}
    for i in range(30):
        t, n = expected.get(i % 7, (0, 0))
        expected[i % 7] = (t + i, n + 1)
    for i in range(14):
        t, n = expected[i % 7]
        expected[i % 7] = (t + 1, n + 1)
    assert totals == expected  # the shard that had applied step 2 did not apply it twice


def test_checkpoint_and_restore(make_partitioned, tmp_path):
    flow = make_partitioned(state_uri=tmp_path / "a")
    flow.register_source("orders", ORDERS[0], primary_key=ORDERS[1])
    flow.register_view("totals", "SELECT o_customer, SUM(amount) AS total FROM orders GROUP BY o_customer")
    flow.tick("orders", _orders([(i, i % 7, i) for i in range(30)]))
    infos = flow.checkpoint_full(str(tmp_path / "ckpt"))
    assert len(infos) == 4
    flow.tick("orders", _orders([(100, 1, 1000)]))
    flow.checkpoint(str(tmp_path / "ckpt"))
    fresh = make_partitioned(state_uri=tmp_path / "b")
    fresh.restore(str(tmp_path / "ckpt"))
    assert fresh.step == 2
    assert sorted(fresh.snapshot("totals").to_pylist(), key=str) == sorted(flow.snapshot("totals").to_pylist(), key=str)
    fresh.tick("orders", _orders([(101, 1, 1)]))
    assert "partitioned view totals: 4 shards by orders(o_customer)" in fresh.explain("totals")
    shutil.rmtree(tmp_path / "a")


def _ipc(table):
    from freshview.algebra.batch import ipc_bytes

    return ipc_bytes(table)


def test_a_spark_connect_session_is_refused_saying_why(tmp_path):
    """A partitioned flow's shards are tasks of a SparkContext, which Spark Connect sessions lack (a stand-in of
    the Connect session's class: the client needs grpc, not installed here)."""
    connect_session = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    flow = PartitionedIncrementalFlow(partitions=2, partition_key={"o": ["k"]}, spark=connect_session,
                                      state_uri=tmp_path / "p")
    flow.register_source("o", "k INT")
    with pytest.raises(FreshviewError, match="Spark Connect session does not have: pass a classic SparkSession"):
        flow.register_view("v", "SELECT k, COUNT(*) AS n FROM o GROUP BY k")
    assert flow.views == []
