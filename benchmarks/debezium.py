"""Debezium messages decoded and applied per second (``IncrementalFlow.tick_debezium``).

A keyed source ``orders(o_id, o_customer, amount NUMERIC(10,2), status)`` gets
``--rows`` rows, then batches of ``--batch`` JSON messages (40 % ``c``, 45 %
``u`` with the whole ``before``, 15 % ``d``, as Debezium's PostgreSQL connector
with REPLICA IDENTITY FULL sends them) under the view ``SELECT o_customer,
SUM(amount), COUNT(*) FROM orders GROUP BY o_customer`` (``execution="local"``).
Printed per batch size: messages/s end to end (JSON text in, view updated), and
the share of that time spent reading (JSON + conversion) and netting into
keyed operations (``formats.debezium.read`` / ``net``; the engine then looks the keys up once).  Also messages/s written by a
``watch_output(format="debezium")``.  Not a test: nothing asserts a speed.

    python3 -m benchmarks.debezium [--rows 100000] [--batch 100 1000 10000] [--batches 20]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time


def main() -> None:
    from freshview import IncrementalFlow
    from freshview.formats import debezium

    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.debezium")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, nargs="+", default=[100, 1000, 10_000])
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(1)
    flow = IncrementalFlow(execution="local")
    flow.register_source("orders", "o_id BIGINT, o_customer INT, amount NUMERIC(10,2), status TEXT",
                         primary_key=["o_id"])
    flow.register_view("totals", "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders "
                                 "GROUP BY o_customer")
    live: dict[int, dict] = {}

    def row(oid: int) -> dict:
        return {"o_id": oid, "o_customer": rng.randint(1, 10_000), "amount": f"{rng.randint(1, 100_000) / 100:.2f}",
                "status": rng.choice(["open", "paid", "shipped"])}

    load = []
    for oid in range(1, args.rows + 1):
        live[oid] = row(oid)
        load.append(json.dumps({"op": "r", "after": live[oid], "ts_ms": 0}))
    started = time.perf_counter()
    flow.tick_debezium("orders", load)
    print(f"load: {args.rows:,} 'r' messages in {time.perf_counter() - started:.1f} s (first computation included)")
    next_id = args.rows + 1
    watch = flow.watch_output("totals", format="debezium", decimal_handling="string")
    schema = flow.source_schema("orders")
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores\n")
    print("| batch | messages/s (end to end) | read | net | engine step + watch | view messages out |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in args.batch:
        total = read_s = net_s = 0.0
        out = 0
        for _ in range(args.batches):
            msgs = []
            for _ in range(size):
                op = rng.random()
                if op < 0.4 or len(live) < 10:
                    live[next_id] = row(next_id)
                    msgs.append(json.dumps({"op": "c", "before": None, "after": live[next_id], "ts_ms": 1}))
                    next_id += 1
                elif op < 0.85:
                    oid = rng.choice(list(live)) if len(live) < 1000 else rng.randint(1, next_id - 1)
                    if oid not in live:
                        continue
                    old, live[oid] = live[oid], row(oid)
                    msgs.append(json.dumps({"op": "u", "before": old, "after": live[oid], "ts_ms": 1}))
                else:
                    oid = rng.randint(1, next_id - 1)
                    if oid not in live:
                        continue
                    msgs.append(json.dumps({"op": "d", "before": live.pop(oid), "after": None, "ts_ms": 1}))
            t0 = time.perf_counter()
            changes = debezium.read(msgs, schema)
            t1 = time.perf_counter()
            debezium.net(changes, schema, "orders")
            t2 = time.perf_counter()
            flow.tick_debezium("orders", msgs)
            t3 = time.perf_counter()
            read_s, net_s, total = read_s + t1 - t0, net_s + t2 - t1, total + t3 - t2  # (tick_debezium: all three)
            out += len(watch.poll())
        n = size * args.batches
        print(f"| {size:,} | {n / total:,.0f} | {read_s / total:.0%} | {net_s / total:.0%} | "
              f"{1 - (read_s + net_s) / total:.0%} | {out / args.batches:,.0f} per batch |")
    flow.close()


if __name__ == "__main__":
    main()
