"""A source's copy filled in bulk (``load_source``) against chunk by chunk (``tick``), then the first computation.

TPC-H customer, orders and lineitem at ``SF`` (the columns the create_view benchmark's view reads, with
their primary keys), in chunks of 100,000 rows as the service's snapshot read delivers them, go into a
fresh ``IncrementalFlow`` either way, alternately (``--repeat`` rounds, the order swapped each round, so
both see the same load); then the view joining the three is registered and its first computation timed
(``first_computation`` as given: auto, local or spark).  Printed per round: seconds per table, the
first computation, the process's peak RSS so far.

    PYTHONPATH=src:. python3 -m benchmarks.bulk_load [SF] [--repeat N] [--first auto|local|spark]
"""
from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.create_view import VIEW
from benchmarks.tpch.data import Tables, generate
from freshview import IncrementalFlow

COLUMNS = {"customer": ["c_custkey", "c_mktsegment"],
           "orders": ["o_orderkey", "o_custkey", "o_orderdate", "o_orderpriority"],
           "lineitem": ["l_orderkey", "l_linenumber", "l_extendedprice", "l_discount"]}
KEYS = {"customer": ["c_custkey"], "orders": ["o_orderkey"], "lineitem": ["l_orderkey", "l_linenumber"]}
CHUNK = 100_000


def _chunks(table: pa.Table, weighted: bool):
    for offset in range(0, table.num_rows, CHUNK):
        chunk = table.slice(offset, CHUNK)
        yield chunk.append_column("_weight", pa.array(np.ones(chunk.num_rows, np.int64))) if weighted else chunk


def run(data: Tables, how: str, first: str, directory: Path) -> dict[str, float]:
    times: dict[str, float] = {}
    with IncrementalFlow(state_dir=directory, execution="auto", first_computation=first) as flow:
        for name, table in data.data.items():
            flow.register_source(name, table.schema, KEYS[name])
            started = time.perf_counter()
            if how == "bulk":
                flow.load_source(name, _chunks(table, False))
            else:
                for chunk in _chunks(table, True):
                    flow.tick(name, chunk)
            times[name] = time.perf_counter() - started
        started = time.perf_counter()
        flow.register_view("v", VIEW)
        times["first computation"] = time.perf_counter() - started
        times["rows"] = flow.snapshot("v").num_rows
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sf", nargs="?", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--first", default="local", choices=["auto", "local", "spark"])
    args = parser.parse_args()
    data = Tables.load(generate(args.sf, Path(__file__).parent / "data"), COLUMNS)
    print(f"TPC-H SF {args.sf:g}: " + ", ".join(f"{n} {t.num_rows:,}" for n, t in data.data.items()), flush=True)
    for round_ in range(args.repeat):
        for how in (("bulk", "tick") if round_ % 2 == 0 else ("tick", "bulk")):
            with tempfile.TemporaryDirectory(prefix="fv-bulk-") as directory:
                times = run(data, how, args.first, Path(directory) / "state")
            sources = sum(v for k, v in times.items() if k in COLUMNS)
            print(f"round {round_ + 1} {how:4}: sources {sources:6.2f} s (" +
                  ", ".join(f"{k} {times[k]:.2f}" for k in COLUMNS) +
                  f"); first computation ({args.first}) {times['first computation']:.2f} s; "
                  f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB; "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
