"""In-process step cost of the service benchmarks' two views, by SQL dialect: no database, no service.

The views and data of ``benchmarks.service_latency`` / ``benchmarks.mysql_service`` (200,000 orders,
10,000 customers; ``customer_totals`` and ``region_totals``) in an ``IncrementalFlow`` with
``execution="local"``, under the PostgreSQL dialect and the MySQL one (``customers.region`` under
``utf8mb4_general_ci``, so ``GROUP BY c.region`` groups by collation key and shows a MIN spelling).
Each step ticks ``--rows`` single-row changes in the benchmarks' mix (50 % amount updates, 15 % customer
moves, 25 % inserts, 10 % region moves) into both sources at once; the first 20 steps are dropped.
Reported: the step's thread CPU time and wall time (p50, mean).  Thread CPU time is the steadier
figure on a shared machine.  Not a test: nothing asserts a speed.

    python3 -m benchmarks.service_views_step [--dialect postgres mysql] [--steps 150] [--rows 2 35]
"""

from __future__ import annotations

import argparse
import decimal
import random
import statistics
import tempfile
import time

import pyarrow as pa

from benchmarks.report import machine, machine_line
from freshview import IncrementalFlow

REGIONS = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST", "OCEANIA", "ANTARCTICA", "ARCTIC"]
VIEWS = {
    "customer_totals": "SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY customer",
    "region_totals": "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS total "
                     "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region",
}


def run(dialect: str, steps: int, rows_per_step: int, orders: int = 200_000, customers: int = 10_000,
        seed: int = 1) -> dict[str, float]:
    collate = " COLLATE utf8mb4_general_ci" if dialect == "mysql" else ""
    flow = IncrementalFlow(None, tempfile.mkdtemp(prefix="fv-views-step-"), execution="local", dialect=dialect,
                           default_schema="app" if dialect == "mysql" else "public")
    try:
        flow.register_source("customers", f"id INT NOT NULL, region TEXT{collate} NOT NULL", primary_key=["id"])
        flow.register_source("orders", "id BIGINT NOT NULL, customer INT NOT NULL, amount DECIMAL(12,2) NOT NULL",
                             primary_key=["id"])
        region = {i: REGIONS[i % len(REGIONS)] for i in range(1, customers + 1)}
        order = {i: (1 + (i * 7919) % customers, decimal.Decimal((i * 37) % 100_000) / 100) for i in range(1, orders + 1)}
        flow.tick("customers", _customers([(i, r, 1) for i, r in region.items()]))
        flow.tick("orders", _orders([(i, c, a, 1) for i, (c, a) in order.items()]))
        for name, sql in VIEWS.items():
            flow.register_view(name, sql)
        rng = random.Random(seed)
        ids, next_id = list(order), orders + 1
        cpu, wall = [], []
        for step in range(steps):
            o_rows, c_rows = [], []
            for _ in range(rows_per_step):
                r = rng.random()
                if r < 0.65:  # an amount update, or a customer move
                    i = rng.choice(ids)
                    c, a = order[i]
                    new = (c, decimal.Decimal(rng.randrange(100_000)) / 100) if r < 0.5 else (rng.randrange(1, customers + 1), a)
                    o_rows += [(i, c, a, -1), (i, *new, 1)]
                    order[i] = new
                elif r < 0.9:
                    new = (rng.randrange(1, customers + 1), decimal.Decimal(rng.randrange(100_000)) / 100)
                    o_rows.append((next_id, *new, 1))
                    order[next_id] = new
                    ids.append(next_id)
                    next_id += 1
                else:  # a region move
                    i = rng.randrange(1, customers + 1)
                    old = region[i]
                    region[i] = REGIONS[(REGIONS.index(old) + 1) % len(REGIONS)]
                    c_rows += [(i, old, -1), (i, region[i], 1)]
            batch = {"orders": _orders(o_rows)} if o_rows else {}
            if c_rows:
                batch["customers"] = _customers(c_rows)
            started, started_cpu = time.perf_counter(), time.thread_time()
            flow.tick(batch)
            if step >= 20:
                cpu.append((time.thread_time() - started_cpu) * 1000)
                wall.append((time.perf_counter() - started) * 1000)
    finally:
        flow.close()
    return {"cpu_ms_p50": statistics.median(cpu), "cpu_ms_mean": statistics.fmean(cpu),
            "wall_ms_p50": statistics.median(wall), "wall_ms_mean": statistics.fmean(wall)}


def _orders(rows: list[tuple]) -> pa.Table:
    ids, customers, amounts, weights = zip(*rows)
    return pa.table({"id": pa.array(ids, pa.int64()), "customer": pa.array(customers, pa.int32()),
                     "amount": pa.array(amounts, pa.decimal128(12, 2)), "_weight": pa.array(weights, pa.int64())})


def _customers(rows: list[tuple]) -> pa.Table:
    ids, regions, weights = zip(*rows)
    return pa.table({"id": pa.array(ids, pa.int32()), "region": pa.array(regions, pa.string()),
                     "_weight": pa.array(weights, pa.int64())})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dialect", nargs="+", default=["postgres", "mysql"], choices=["postgres", "mysql"])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rows", type=int, nargs="+", default=[2, 35], help="row changes per step")
    args = parser.parse_args()
    print(machine_line(machine()))
    print("| dialect | changes per step | CPU p50 / mean (ms) | wall p50 / mean (ms) |")
    print("|---|---|---|---|")
    for rows in args.rows:
        for dialect in args.dialect:
            r = run(dialect, args.steps + 20, rows)
            print(f"| {dialect} | {rows} | {r['cpu_ms_p50']:.1f} / {r['cpu_ms_mean']:.1f} | "
                  f"{r['wall_ms_p50']:.1f} / {r['wall_ms_mean']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
