"""Run by tests/flow/test_partitioned_cluster.py in its own process (a process has one SparkContext):
a PartitionedIncrementalFlow on a standalone cluster, checked against PostgreSQL after every step.

    python3 -m tests.support.partitioned_cluster_check <master-url> <state-dir> <postgres-dsn>
"""

from __future__ import annotations

import sys


def main() -> None:
    master, state_dir, dsn = sys.argv[1:4]
    from freshview.flow.partitioned import PartitionedIncrementalFlow
    from freshview.runtime.spark import get_session
    from tests.support.differential import run_differential
    from tests.support.oracle import PgOracle

    spark = get_session(master=master, driver_memory="1g")
    keys = {"orders": ["o_customer"], "customers": ["c_id"]}
    small = [0, 1, 2, 3, 4, 5, 6]
    with PgOracle(dsn) as oracle:
        report = run_differential(
            lambda execution=None: PartitionedIncrementalFlow(partitions=4, partition_key=keys, spark=spark,
                                                              state_uri=state_dir),
            oracle,
            sources={"orders": ("o_id INT, o_customer INT, amount INT", ["o_id"],
                                {"o_customer": small, "amount": small}),
                     "customers": ("c_id BIGINT, region TEXT", ["c_id"], {"c_id": small, "region": ["n", "s"]})},
            views=[("totals", "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer"),
                   ("by_region", "SELECT c.region, o.o_customer, SUM(o.amount) AS total FROM orders o "
                                 "JOIN customers c ON o.o_customer = c.c_id GROUP BY c.region, o.o_customer")],
            steps=4, seed=5, executions=["cluster"], check_watch=False)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    from freshview.runtime import shipping

    print(f"OK steps={report.steps} executors={executors} shipped={shipping.ship(spark)}")
    spark.stop()


if __name__ == "__main__":
    main()
