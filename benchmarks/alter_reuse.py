"""An alter's first computation with the old circuit's state reused (``runtime.reuse``) against computing
the new view in full, as a population does it (issue 24: "adding a column to an aggregate view or a
filter to a join costs the part that changed").

In-process, no database: a flow holds ``orders(id, customer, amount, status)`` (``N`` rows) and
``customers(id, region, active)`` (``N / 10``) and the old view
``SELECT c.region, o.customer, SUM(o.amount) AS total, COUNT(*) AS n FROM orders o JOIN customers c ...
GROUP BY c.region, o.customer``, computed and then stepped (so its state is made of steps too).  For each
new SQL, a scratch flow (an alter's population) takes the two copies as pinned (linked, as the service's
population does) and computes the new view twice, in fresh scratch flows: with the old view's pinned
circuit (``register_view(reusing=)``) and without (a full repopulation from the copies).  Printed per
case: what was reused, both times (best of ``REPEAT``), and whether the two results are equal.

    PYTHONPATH=src:. python3 -m benchmarks.alter_reuse [N]
"""
from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from freshview.flow import IncrementalFlow

OLD = ("SELECT c.region, o.customer, SUM(o.amount) AS total, COUNT(*) AS n FROM orders o "
       "JOIN customers c ON o.customer = c.id GROUP BY c.region, o.customer")
CASES = [
    ("aggregate column added (the join shared)",
     "SELECT c.region, o.customer, SUM(o.amount) AS total, COUNT(*) AS n, MAX(o.amount) AS top FROM orders o "
     "JOIN customers c ON o.customer = c.id GROUP BY c.region, o.customer"),
    ("HAVING added (the aggregate shared)", OLD + " HAVING COUNT(*) > 10"),
    ("filter on customers (the orders side shared)",
     "SELECT c.region, o.customer, SUM(o.amount) AS total, COUNT(*) AS n FROM orders o "
     "JOIN customers c ON o.customer = c.id WHERE c.active GROUP BY c.region, o.customer"),
    ("filter on orders (the customers side shared)",
     "SELECT c.region, o.customer, SUM(o.amount) AS total, COUNT(*) AS n FROM orders o "
     "JOIN customers c ON o.customer = c.id WHERE o.status <> 'cancelled' GROUP BY c.region, o.customer"),
]
REPEAT = 2


class _Reused(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.said = ""

    def emit(self, record: logging.LogRecord) -> None:
        if "state reused" in record.getMessage():
            self.said = record.getMessage().split("(", 1)[-1].rstrip(")")


def _tables(n: int) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(7)
    customers = n // 10
    orders = pa.table({"id": np.arange(n, dtype=np.int64),
                       "customer": rng.integers(0, customers, n, dtype=np.int64),
                       "amount": rng.integers(1, 500, n, dtype=np.int64),
                       "status": pa.array(np.where(rng.random(n) < 0.1, "cancelled", "open"))})
    people = pa.table({"id": np.arange(customers, dtype=np.int64),
                       "region": pa.array(np.array(["north", "south", "east", "west"])[np.arange(customers) % 4]),
                       "active": rng.random(customers) < 0.8})
    return orders, people


def _flow(directory: Path) -> IncrementalFlow:
    flow = IncrementalFlow(state_dir=directory, execution="local", first_computation="local")
    flow.register_source("orders", "id BIGINT, customer BIGINT, amount BIGINT, status TEXT", primary_key=["id"])
    flow.register_source("customers", "id BIGINT, region TEXT, active BOOLEAN", primary_key=["id"])
    return flow


def main(n: int) -> None:
    reused = _Reused()
    logging.getLogger("freshview").addHandler(reused)
    logging.getLogger("freshview").setLevel(logging.INFO)
    root = Path(tempfile.mkdtemp(prefix="fv-alter-reuse-"))
    try:
        orders, people = _tables(n)
        old = _flow(root / "main")
        old.load_source("orders", [orders])
        old.load_source("customers", [people])
        started = time.perf_counter()
        old.register_view("v", OLD)
        print(f"N={n:,}: the old view's first computation {time.perf_counter() - started:.2f} s")
        for i in range(20):  # its state made of steps too
            old.tick("orders", pa.table({"id": [n + i], "customer": [i], "amount": [i + 1], "status": ["open"],
                                          "_weight": [1]}))
        pinned_view = old.pin_view("v")
        pins = {s: old.pin_source(s) for s in ("orders", "customers")}
        for label, sql in CASES:
            times: dict[bool, float] = {}
            rows: dict[bool, list] = {}
            for reuse in (True, False):
                best = float("inf")
                for attempt in range(REPEAT):
                    directory = root / f"scratch-{reuse}-{attempt}"
                    scratch = _flow(directory)
                    for source, pin in pins.items():
                        scratch.adopt_source(source, pin)
                    reused.said = ""
                    started = time.perf_counter()
                    scratch.register_view("v", sql, reusing=pinned_view if reuse else None)
                    best = min(best, time.perf_counter() - started)
                    said = reused.said
                    rows[reuse] = sorted(scratch.snapshot("v").to_pylist(), key=repr)
                    scratch.close()
                    shutil.rmtree(directory, ignore_errors=True)
                times[reuse] = best
                if reuse:
                    what = said or "nothing"
            print(f"{label}: reused {what}; {times[True]:.2f} s against {times[False]:.2f} s in full "
                  f"({times[False] / times[True]:.1f}x); results {'equal' if rows[True] == rows[False] else 'DIFFER'}")
        old.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
