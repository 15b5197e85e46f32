"""Partitioned flows: step throughput from 1 to 2 Spark workers and from 1 to 8 partitions.

For each number of workers (1 core each) a standalone cluster starts on loopback (the pyspark
installation's master and workers); for each number of partitions a ``PartitionedIncrementalFlow`` over
``orders(o_id, o_customer, amount)`` partitioned by ``o_customer`` keeps
``SELECT o_customer, SUM(amount), COUNT(*) FROM orders GROUP BY o_customer`` and a join with
``customers``; after an initial load of ``--rows`` rows, ``--steps`` steps of ``--changes`` changes
(inserts, updates as delete+insert, deletes) are timed.  Printed: changes/s per (workers, partitions).
Not a test: nothing asserts a speed.

    python3 -m benchmarks.partitioned [--rows 200000] [--changes 20000] [--steps 5] [--workers 1 2] [--partitions 1 2 4 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def inner(master: str, partitions: list[int], rows: int, changes: int, steps: int) -> dict:
    import numpy as np
    import pyarrow as pa

    from freshview.flow.partitioned import PartitionedIncrementalFlow
    from freshview.runtime.spark import get_session

    spark = get_session(master=master, driver_memory="2g")
    rng = np.random.default_rng(1)
    customers = 10_000
    out = {}
    for p in partitions:
        with tempfile.TemporaryDirectory() as tmp:
            flow = PartitionedIncrementalFlow(partitions=p, partition_key={"orders": ["o_customer"],
                                                                           "customers": ["c_id"]},
                                              spark=spark, state_uri=tmp)
            flow.register_source("orders", "o_id BIGINT, o_customer INT, amount BIGINT", primary_key=["o_id"])
            flow.register_source("customers", "c_id INT, region TEXT", primary_key=["c_id"])
            flow.register_views([
                ("totals", "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer"),
                ("by_region", "SELECT c.region, o.o_customer, SUM(o.amount) AS total FROM orders o JOIN customers c "
                              "ON o.o_customer = c.c_id GROUP BY c.region, o.o_customer")])
            ids = np.arange(rows)
            cust = rng.integers(0, customers, rows).astype(np.int32)
            amount = rng.integers(1, 1000, rows)
            flow.tick({"orders": pa.table({"o_id": ids, "o_customer": cust, "amount": amount,
                                           "_weight": np.ones(rows, np.int64)}),
                       "customers": pa.table({"c_id": np.arange(customers, dtype=np.int32),
                                              "region": [f"r{i % 5}" for i in range(customers)],
                                              "_weight": np.ones(customers, np.int64)})})
            next_id = rows
            timings = []
            for _ in range(steps):
                old = rng.choice(len(ids), changes // 2, replace=False)
                new_ids = np.arange(next_id, next_id + changes // 2)
                next_id += changes // 2
                new_c = rng.integers(0, customers, changes // 2).astype(np.int32)
                new_a = rng.integers(1, 1000, changes // 2)
                delta = pa.table({"o_id": np.concatenate([ids[old], new_ids]),
                                  "o_customer": np.concatenate([cust[old], new_c]),
                                  "amount": np.concatenate([amount[old], new_a]),
                                  "_weight": np.concatenate([-np.ones(len(old), np.int64),
                                                             np.ones(len(new_ids), np.int64)])})
                keep = np.ones(len(ids), bool)
                keep[old] = False
                ids, cust, amount = (np.concatenate([ids[keep], new_ids]), np.concatenate([cust[keep], new_c]),
                                     np.concatenate([amount[keep], new_a]))
                started = time.perf_counter()
                flow.tick("orders", delta)
                timings.append(time.perf_counter() - started)
            flow.close()
        median = sorted(timings)[len(timings) // 2]
        out[p] = {"step_s_median": round(median, 3), "changes_per_s": round(changes / median)}
        print(f"  partitions {p}: step {median * 1000:.0f} ms, {changes / median:,.0f} changes/s", flush=True)
    spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.partitioned")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--changes", type=int, default=20_000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.inner:
        print("RESULT " + json.dumps(inner(args.inner, args.partitions, args.rows, args.changes, args.steps)))
        return
    sys.path.insert(0, str(ROOT))
    from tests.support.spark_cluster import standalone_cluster

    results = {}
    for workers in args.workers:
        print(f"{workers} worker(s), 1 core each:", flush=True)
        with standalone_cluster(workers=workers, cores=1, memory="2g") as master:
            proc = subprocess.run([sys.executable, "-m", "benchmarks.partitioned", "--inner", master,
                                   "--rows", str(args.rows), "--changes", str(args.changes), "--steps",
                                   str(args.steps), "--partitions", *map(str, args.partitions)],
                                  cwd=ROOT, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
                                  capture_output=True, text=True)
        line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(proc.stdout[-2000:] + proc.stderr[-4000:])
        print("\n".join(l for l in proc.stdout.splitlines() if l.startswith("  ")))
        results[workers] = json.loads(line[7:])
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
           "load": os.getloadavg()[0], "rows": args.rows, "changes": args.changes, "results": results}
    print(json.dumps(doc, indent=2))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
