"""Join order: the same join written in different FROM orders (issue 23).

Two workloads, each under ``execution="local", first_computation="local"`` (no Spark):

* ``abc``: three ``--rows``-row tables ``a, b, c (k INT PRIMARY KEY, v INT)``, ``c.v = c.k``, and
  ``SELECT a.v, b.v FROM <order> WHERE a.k = c.k AND b.k = c.v`` for the FROM orders ``a, b, c`` (``a``
  and ``b`` share no condition), ``a, c, b`` and ``c, b, a``;
* ``chain``: ``--tables`` tables ``t1 .. tN (k INT PRIMARY KEY, v INT)`` of 10 rows, joined in a chain
  ``t_i.v = t_{i+1}.k`` with a one-row result, written in a FROM order where no two neighbours share a
  condition (odd tables first, then even ones) and in chain order.

* ``tpch`` (``--tpch-sf``): the TPC-H views with more than two relations in a join, over tpchgen-cli data
  (``benchmarks/tpch``): the rows each keeps in join state after its first computation.

Per case: the first computation (``register_view``), the median step time over ``--steps`` steps (each
updates ``--changes`` rows of every table), and the rows held in the view's join states after the last
step (``view/<v>/op*/left|right``).  ``--max-gb`` caps the process's address space (a FROM order that
builds a cross product fails with MemoryError instead of eating the machine).  Not a test.

    python3 -m benchmarks.join_order [--rows 3000] [--tables 17] [--steps 20] [--changes 10]
    python3 -m benchmarks.join_order --only tpch --tpch-sf 0.1
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa


def _table(k: np.ndarray, v: np.ndarray, weight: int = 1) -> pa.Table:
    return pa.table({"k": pa.array(k, pa.int32()), "v": pa.array(v, pa.int32()),
                     "_weight": np.full(len(k), weight, np.int64)})


def join_state_rows(flow, view: str) -> int:
    """Rows held in ``view``'s join states (both sides of every join)."""
    names = flow.store.list_arrangements(f"view/{view}/")
    return sum(flow.store.count(n) for n in names if n.endswith(("/left", "/right")))


class Tables:
    """Integrated tables ``name -> v by k`` and the steps that change them (an update: −old, +new)."""

    def __init__(self, initial: dict[str, np.ndarray], seed: int = 1) -> None:
        self.v = {name: v.copy() for name, v in initial.items()}
        self.rng = np.random.default_rng(seed)

    def load(self) -> dict[str, pa.Table]:
        return {name: _table(np.arange(len(v)), v) for name, v in self.v.items()}

    def step(self, changes: int, value) -> dict[str, pa.Table]:
        out = {}
        for name, v in self.v.items():
            keys = self.rng.choice(len(v), size=min(changes, len(v)), replace=False)
            old = v[keys].copy()
            v[keys] = value(name, keys)
            out[name] = pa.concat_tables([_table(keys, old, -1), _table(keys, v[keys])])
        return out


def run_case(label: str, ddl: dict[str, str], tables: Tables, sql: str, steps: int, changes: int, value) -> None:
    from freshview import IncrementalFlow

    with IncrementalFlow(execution="local", first_computation="local") as flow:
        for name, cols in ddl.items():
            flow.register_source(name, cols, primary_key=["k"])
        flow.tick(tables.load())
        t0 = time.perf_counter()
        try:
            flow.register_view("v", sql)
        except Exception as exc:  # out of memory (MemoryError, or a StateError when the store cannot map)
            print(f"| {label} | failed after {time.perf_counter() - t0:.1f} s: {type(exc).__name__} | | | |")
            return
        first = time.perf_counter() - t0
        times = []
        for _ in range(steps):
            delta = tables.step(changes, value)
            t0 = time.perf_counter()
            flow.tick(delta)
            times.append((time.perf_counter() - t0) * 1000)
        rows = flow.snapshot("v").num_rows
        print(f"| {label} | {first * 1000:,.0f} ms | {statistics.median(times):,.1f} ms "
              f"(max {max(times):,.1f}) | {join_state_rows(flow, 'v'):,} | {rows:,} |")


def abc(rows: int, steps: int, changes: int) -> None:
    rng = np.random.default_rng(0)
    initial = {"a": rng.integers(0, 1000, rows), "b": rng.integers(0, 1000, rows), "c": np.arange(rows)}
    ddl = dict.fromkeys("abc", "k INT, v INT")

    def value(name, keys):  # c.v = c.k stays: every c row matches one a and one b row
        return np.asarray(keys) if name == "c" else rng.integers(0, 1000, len(keys))
    for order in ("a, b, c", "a, c, b", "c, b, a"):
        sql = f"SELECT a.v AS av, b.v AS bv FROM {order} WHERE a.k = c.k AND b.k = c.v"
        run_case(f"abc {rows:,} rows, FROM {order}", ddl, Tables(initial), sql, steps, changes, value)


def chain(n: int, steps: int, changes: int) -> None:
    names = [f"t{i}" for i in range(1, n + 1)]
    where = " AND ".join(f"{names[i]}.v = {names[i + 1]}.k" for i in range(n - 1))
    # row 0 of each table continues the chain (v = 0); every other row points nowhere (v >= 100)
    initial = {t: np.where(np.arange(10) == 0, 0, np.arange(10) + 100) for t in names}

    def value(name, keys):  # rows other than 0 get new dead-end values; row 0 keeps the chain
        return np.where(np.asarray(keys) == 0, 0, 100 + np.random.default_rng(len(keys)).integers(0, 50, len(keys)))
    for label, order in (("odd then even", names[0::2] + names[1::2]), ("chain order", names)):
        sql = f"SELECT {names[0]}.k AS first, {names[-1]}.v AS last FROM {', '.join(order)} WHERE {where}"
        run_case(f"chain of {n} 10-row tables, FROM {label}", dict.fromkeys(names, "k INT, v INT"),
                 Tables(initial), sql, steps, changes, value)


TPCH_VIEWS = ("q2", "q5", "q7", "q8", "q9", "q10", "q11", "q15", "q21")  # the ones join_order changes


def tpch(sf: float, cache: Path) -> None:
    from benchmarks.tpch.data import Tables, generate
    from benchmarks.tpch.queries import VIEWS
    from benchmarks.tpch.suite import load_sources
    from freshview import IncrementalFlow

    tables = Tables.load(generate(sf, cache))
    with IncrementalFlow(execution="local", first_computation="local") as flow:
        load_sources(flow, tables)
        for view in TPCH_VIEWS:
            t0 = time.perf_counter()
            flow.register_view(view, VIEWS[view])
            first = time.perf_counter() - t0
            print(f"| TPC-H SF {sf:g} {view} | {first * 1000:,.0f} ms | | {join_state_rows(flow, view):,} | "
                  f"{flow.snapshot(view).num_rows:,} |")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.join_order")
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--tables", type=int, nargs="+", default=[17])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--max-gb", type=float, default=8.0)
    parser.add_argument("--only", choices=["abc", "chain", "tpch"])
    parser.add_argument("--tpch-sf", type=float, default=None, help="also the TPC-H views at this scale factor")
    parser.add_argument("--cache", type=Path, default=Path(__file__).parent / "data", help="generated TPC-H data")
    args = parser.parse_args()
    limit = int(args.max_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    print("| case | first computation | step median | join state rows | view rows |")
    print("|---|---|---|---|---|")
    if args.only in (None, "abc"):
        abc(args.rows, args.steps, args.changes)
    if args.only in (None, "chain"):
        for n in args.tables:
            chain(n, args.steps, min(args.changes, 10))
    if args.only == "tpch" or (args.only is None and args.tpch_sf is not None):
        tpch(args.tpch_sf or 0.1, args.cache)


if __name__ == "__main__":
    main()
