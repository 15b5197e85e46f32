"""One step's result write: the PostgreSQL transaction that holds a step's view changes and its LSN.

The service writes, inside each engine step's ``before_commit``, every changed
view's delta into its result table plus the position reached, in one
transaction (``ResultSink.commit_step``, here ``PostgresResults``).  This script times exactly that call, with
no engine and no replication: a throwaway PostgreSQL (the benchmark settings of
``service_latency``: ``fsync=off``, ``synchronous_commit=on``), the freshview
schema, and the result tables of the service benchmark's two views, filled
with ``--groups`` rows:

* ``public.customer_totals (customer int PRIMARY KEY, n bigint, total numeric)``;
* ``public.region_totals (region text PRIMARY KEY, n bigint, total numeric)``;
* ``public.order_list (customer int, amount numeric(12,2), _fv_count bigint)``, a
  counted view (no GROUP BY: keyed by all columns, with a multiplicity).

Each measured step writes a delta to all three: ``--rows`` rows into
``customer_totals`` (half the old rows at -1, half the new rows at +1, so
``rows / 2`` groups change), 2 rows into ``region_totals`` and ``--rows`` rows
into ``order_list`` (half new rows, half removals).  The median and p90 of
``--repeat`` steps are printed, once per ``--rows`` value given.

    python3 -m benchmarks.sink_write [--rows 5 10000] [--repeat 200] [--groups 10000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from decimal import Decimal

import psycopg
import pyarrow as pa

from benchmarks.service_latency import PG_SETTINGS
from freshview.connectors.base import StepStats
from freshview.connectors.postgres import control
from freshview.connectors.postgres.lsn import Lsn
from freshview.connectors.postgres.results import PostgresResults
from freshview.connectors.postgres.sink import ResultShape, ResultTable
from freshview.service.embedded import PostgresServer, find_pg_bindir

SHAPES = {
    "customer_totals": ResultShape((("customer", "integer"), ("n", "bigint"), ("total", "numeric")),
                                   ("customer",), False, False),
    "region_totals": ResultShape((("region", "text"), ("n", "bigint"), ("total", "numeric")),
                                 ("region",), False, False),
    "order_list": ResultShape((("customer", "integer"), ("amount", "numeric(12,2)")),
                              ("customer", "amount"), True, False),
}
TYPES = {"integer": pa.int32(), "bigint": pa.int64(), "numeric": pa.decimal128(38, 6), "text": pa.string(),
         "numeric(12,2)": pa.decimal128(12, 2)}


def _table(view: str, rows: list[tuple]) -> pa.Table:
    shape = SHAPES[view]
    names = [n for n, _ in shape.columns] + ["_weight"]
    types = [TYPES[t] for _, t in shape.columns] + [pa.int64()]
    columns = list(zip(*rows)) if rows else [[] for _ in names]
    return pa.Table.from_arrays([pa.array(list(c), t) for c, t in zip(columns, types)], names=names)


class State:
    """The current contents, so that each step's delta removes rows that are there."""

    def __init__(self, groups: int) -> None:
        self.customers = {c: (10, Decimal(c)) for c in range(1, groups + 1)}
        self.regions = {f"r{i}": (groups // 8, Decimal(i)) for i in range(8)}
        self.orders = [(1 + i % groups, Decimal(i) / 100) for i in range(groups)]
        self.next_order = groups
        self.step = 0

    def initial(self) -> dict[str, pa.Table]:
        return {"customer_totals": _table("customer_totals", [(c, n, t, 1) for c, (n, t) in self.customers.items()]),
                "region_totals": _table("region_totals", [(r, n, t, 1) for r, (n, t) in self.regions.items()]),
                "order_list": _table("order_list", [(c, a, 1) for c, a in self.orders])}

    def delta(self, rows: int) -> dict[str, pa.Table]:
        self.step += 1
        half = max(1, rows // 2)
        keys = list(self.customers)
        start = (self.step * half) % len(keys)
        changed = [keys[(start + i) % len(keys)] for i in range(half)]
        cust = []
        for c in changed:
            n, t = self.customers[c]
            cust.append((c, n, t, -1))
            self.customers[c] = (n + 1, t + Decimal("0.25"))
            cust.append((c, n + 1, t + Decimal("0.25"), 1))
        if rows % 2:
            cust.pop(1)  # an odd count: one group only loses its old row (a delete)
            del self.customers[changed[0]]
        region = f"r{self.step % 8}"
        n, t = self.regions[region]
        self.regions[region] = (n + 1, t + 1)
        regions = [(region, n, t, -1), (region, n + 1, t + 1, 1)]
        orders = []
        for _ in range(rows - rows // 2):
            self.next_order += 1
            row = (1 + self.next_order % 97, Decimal(self.next_order) / 100)
            self.orders.append(row)
            orders.append(row + (1,))
        for _ in range(rows // 2):
            orders.append(self.orders.pop(0) + (-1,))
        return {"customer_totals": _table("customer_totals", cust),
                "region_totals": _table("region_totals", regions),
                "order_list": _table("order_list", orders)}


def results_on(conn: psycopg.Connection) -> PostgresResults:
    """The PostgreSQL result sink on ``conn`` with the three result tables known (slot ``bench``)."""
    results = PostgresResults(conn, "bench")
    results.tables = {f"public.{v}": ResultTable(f"public.{v}", s) for v, s in SHAPES.items()}
    return results


def qualified(outputs: dict) -> dict:
    return {f"public.{v}": d for v, d in outputs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[5, 10_000])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--groups", type=int, default=10_000)
    args = parser.parse_args()
    server = PostgresServer(bindir=find_pg_bindir(), settings=PG_SETTINGS)
    try:
        dsn = server.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            control.install(conn)
            svc = results_on(conn)
            conn.execute("INSERT INTO freshview.progress (slot) VALUES ('bench')")
            state = State(args.groups)
            with conn.transaction():
                for name, table in svc.tables.items():
                    for statement in table.create_sql():
                        conn.execute(statement)
                    conn.execute("INSERT INTO freshview.views (name, sql, status, rows) VALUES (%s, '', 'active', 0)",
                                 (name,))
            svc.commit_step(qualified(state.initial()), Lsn(1), StepStats(0, 0.0, 0.0))
            conn.execute("VACUUM ANALYZE")
            lsn = 2
            for rows in args.rows:
                times = []
                repeat = args.repeat if rows < 1000 else max(5, args.repeat // 10)
                for i in range(repeat + 3):
                    outputs = state.delta(rows)
                    t0 = time.perf_counter()
                    svc.commit_step(qualified(outputs), Lsn(lsn), StepStats(rows, 0.0, 0.0))
                    if i >= 3:  # the first steps prepare statements
                        times.append((time.perf_counter() - t0) * 1000)
                    lsn += 1
                times.sort()
                print(f"delta of {rows:,} rows (+2 and {rows:,} in the other views): "
                      f"median {statistics.median(times):.2f} ms, p90 {times[int(len(times) * 0.9)]:.2f} ms, "
                      f"min {times[0]:.2f} ms over {len(times)} steps", flush=True)
            for name in svc.tables:  # the contents must equal the model
                got = conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
                want = {"public.customer_totals": len(state.customers), "public.region_totals": len(state.regions),
                        "public.order_list": len(set(state.orders))}[name]
                if got != want:
                    print(f"WRONG: {name} has {got} rows, expected {want}")
                    return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
