"""A time-based view as time passes: freshview's ``advance()`` (rows released by their time bound) against
DuckDB recomputing the view at the same instant, side by side in one run.

``--rows`` events with timestamps spread over 30 days feed
``SELECT g, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE ts > now() - interval '7 days' GROUP BY g``; a fake
clock then moves ``--minutes`` per step for ``--steps`` steps with no source change.  Each step times
``flow.advance()`` (in-process executor) and DuckDB's query with ``now()`` as a literal; after the last
step both results must be equal.

    PYTHONPATH=src:. python3 -m benchmarks.temporal --rows 100000 1000000 --steps 20 --minutes 10
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time

import duckdb
import numpy as np
import pyarrow as pa

from freshview import IncrementalFlow

VIEW = "SELECT g, COUNT(*) AS n, SUM(v) AS s FROM ev WHERE ts > now() - interval '7 days' GROUP BY g"
START = dt.datetime(2026, 3, 1)


def run(rows: int, steps: int, minutes: int) -> dict:
    rng = np.random.default_rng(1)
    stamps = np.datetime64(START - dt.timedelta(days=29)) + \
        rng.integers(0, 30 * 86_400_000_000, rows).astype("timedelta64[us]")
    events = pa.table({"id": pa.array(np.arange(rows), pa.int64()), "g": pa.array(rng.integers(0, 50, rows), pa.int32()),
                       "v": pa.array(rng.integers(0, 100, rows), pa.int64()), "ts": pa.array(stamps, pa.timestamp("us"))})
    clock = [START]
    flow = IncrementalFlow(execution="local", first_computation="local", clock=lambda: clock[0])
    flow.register_source("ev", "id BIGINT, g INT, v BIGINT, ts TIMESTAMP")
    flow.register_view("recent", VIEW)
    flow.tick("ev", events.append_column("_weight", pa.array(np.ones(rows, np.int64))))
    con = duckdb.connect()
    con.register("ev", events)
    ours, theirs, released = [], [], []
    for _ in range(steps):
        clock[0] += dt.timedelta(minutes=minutes)
        started = time.perf_counter()
        summary = flow.advance()
        ours.append(time.perf_counter() - started)
        released.append(summary.views["recent"].rows_out if "recent" in summary.views else 0)
        sql = VIEW.replace("now()", f"TIMESTAMP '{clock[0].isoformat(sep=' ')}'")
        started = time.perf_counter()
        expected = con.sql(sql).to_arrow_table()
        theirs.append(time.perf_counter() - started)
    got = flow.snapshot("recent").sort_by("g")
    expected = expected.sort_by("g")
    assert got.column("n").to_pylist() == expected.column("n").to_pylist(), "results differ"
    assert got.column("s").to_pylist() == [int(x) for x in expected.column("s").to_pylist()], "results differ"
    flow.close()
    return {"rows": rows, "advance_ms": statistics.median(ours) * 1000, "duckdb_ms": statistics.median(theirs) * 1000,
            "groups_changed_per_step": statistics.median(released)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--minutes", type=int, default=10)
    args = parser.parse_args()
    print("| rows | freshview advance() median ms | DuckDB recompute median ms | result rows changed per step |")
    print("|---:|---:|---:|---:|")
    for rows in args.rows:
        r = run(rows, args.steps, args.minutes)
        print(f"| {r['rows']:,} | {r['advance_ms']:.1f} | {r['duckdb_ms']:.1f} | {r['groups_changed_per_step']:.0f} |")


if __name__ == "__main__":
    main()
