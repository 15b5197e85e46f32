"""SpineStateStore: the cost of a step's state calls against the size of the state.

For each state size N it bulk-loads two arrangements of N rows (``rows``:
unique int64 key, four columns; ``minmax``: a MIN/MAX multiset, ~100 rows a
key, ordered by a float), then runs steps like an engine's: look up 1k keys,
apply 1k changed rows (500 updates), read the extremes of 1k keys, apply to
the multiset, commit.  A second loop commits steps touching 10 arrangements.
Then it scans, closes (checkpoint) and reopens.  Medians and 90th percentiles
of wall time over the steps, and the median CPU time of the calling thread
(which a busy machine inflates less), are printed as a table (milliseconds;
load/scan/reopen in seconds, wall).  Targets: lookup, apply < 1 ms; commit of 10 arrangements < 2 ms;
load of 6M rows < 3 s; all flat in N.

    python3 -m benchmarks.state_store [--sizes 1e6,6e6,20e6] [--steps 200] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from freshview.runtime.state import SpineStateStore
from freshview.runtime.state.layout import Layout

BATCH = 1000
ROWS = Layout(pa.schema([("k", pa.int64()), ("g", pa.int32()), ("v", pa.float64()), ("s", pa.string())]), ("k",))
MINMAX = Layout(pa.schema([("g", pa.int64()), ("v", pa.float64()), ("id", pa.int64())]), ("g",), order="v")


def rows_table(keys: np.ndarray, version: int, weight: int) -> pa.Table:
    n = len(keys)
    return pa.table({"k": keys, "g": (keys % 100_000).astype(np.int32), "v": keys * 0.5 + version,
                     "s": pa.array(keys % 1_000_003 + version).cast(pa.string()),
                     "_weight": np.full(n, weight, dtype=np.int64)})


def minmax_table(ids: np.ndarray, groups: int, weight: int) -> pa.Table:
    return pa.table({"g": ids % groups, "v": (ids * 7919 % 1_000_003) / 3.0, "id": ids,
                     "_weight": np.full(len(ids), weight, dtype=np.int64)})


def timed(f) -> float:
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def timed_cpu(out: dict[str, list[float]], name: str, f) -> None:
    """Wall time under ``name`` and this thread's CPU time under ``name + " cpu"`` (robust to a busy machine)."""
    wall, cpu = time.perf_counter(), time.thread_time()
    f()
    out[name + " cpu"].append(time.thread_time() - cpu)
    out[name].append(time.perf_counter() - wall)


def run_size(n: int, steps: int, root: Path) -> dict[str, list[float]]:
    directory = root / f"state-{n}"
    shutil.rmtree(directory, ignore_errors=True)
    rng = np.random.default_rng(n)
    store = SpineStateStore(directory)
    store.ensure_arrangement("rows", ROWS)
    store.ensure_arrangement("minmax", MINMAX)
    for i in range(10):
        store.ensure_arrangement(f"small/{i}", ROWS)
    groups = max(n // 100, 1)
    out: dict[str, list[float]] = {f"{name}{cpu}": [] for name in ("lookup", "apply", "extreme", "commit", "commit10")
                                   for cpu in ("", " cpu")}
    data = rows_table(np.arange(n, dtype=np.int64), 0, 1)

    def load_rows() -> None:
        store.begin()
        store.load("rows", data)
        store.commit()

    out["load"] = [timed(load_rows)]
    del data
    multiset = minmax_table(np.arange(n, dtype=np.int64), groups, 1)

    def load_minmax() -> None:
        store.begin()
        store.load("minmax", multiset)
        store.commit()

    out["load minmax"] = [timed(load_minmax)]
    del multiset
    version = np.zeros(n, dtype=np.int64)
    next_id = n
    for step in range(steps):
        probe = pa.table({"k": rng.integers(0, int(n * 1.1), BATCH)})  # ~10% absent
        changed = rng.choice(n, BATCH // 2, replace=False)
        delta = pa.concat_tables([rows_table(changed, 0, -1).set_column(2, "v", pa.array(changed * 0.5 + version[changed]))
                                  .set_column(3, "s", pa.array(changed % 1_000_003 + version[changed]).cast(pa.string())),
                                  rows_table(changed, 0, 1).set_column(2, "v", pa.array(changed * 0.5 + version[changed] + 1))
                                  .set_column(3, "s", pa.array(changed % 1_000_003 + version[changed] + 1).cast(pa.string()))])
        version[changed] += 1
        gone = rng.integers(0, next_id, BATCH // 2)  # ids may be gone already: then a negative weight is stored
        added = np.arange(next_id, next_id + BATCH // 2)
        next_id += BATCH // 2
        mm_delta = pa.concat_tables([minmax_table(gone, groups, -1), minmax_table(added, groups, 1)])
        mm_keys = pa.table({"g": rng.integers(0, groups, BATCH)})
        store.begin()
        timed_cpu(out, "lookup", lambda: store.lookup("rows", probe))
        timed_cpu(out, "apply", lambda: store.apply("rows", delta))
        timed_cpu(out, "extreme", lambda: store.extreme("minmax", mm_keys, "min"))
        store.apply("minmax", mm_delta)
        timed_cpu(out, "commit", store.commit)
    small = [rows_table(rng.integers(0, 10**9, BATCH), s, 1) for s in range(steps)]
    for step in range(steps):
        store.begin()
        for i in range(10):
            store.apply(f"small/{i}", small[(step + i) % steps])
        timed_cpu(out, "commit10", store.commit)
    out["scan"] = [timed(lambda: store.scan("rows"))]
    out["close"] = [timed(store.close)]
    reopened: list[SpineStateStore] = []
    out["reopen"] = [timed(lambda: reopened.append(SpineStateStore(directory)))]
    probe = pa.table({"k": rng.integers(0, n, BATCH)})
    out["first lookup"] = [timed(lambda: reopened[0].lookup("rows", probe))]
    reopened[0].close()
    shutil.rmtree(directory, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,6e6", help="comma-separated state sizes (rows)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--dir", default=None, help="where to put state (default: a temporary directory)")
    args = parser.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="fv-state-bench-"))
    results = {n: run_size(n, args.steps, root) for n in sizes}
    per_step = ("lookup", "apply", "extreme", "commit", "commit10")
    once = ("load", "load minmax", "scan", "close", "reopen", "first lookup")
    print("per call, ms: wall p50 / p90 (CPU p50)")
    print(f"{'rows':>12} | " + " | ".join(f"{m:>22}" for m in per_step))
    for n, r in results.items():
        cells = [f"{np.median(r[m]) * 1e3:6.2f} / {np.percentile(r[m], 90) * 1e3:6.2f} ({np.median(r[m + ' cpu']) * 1e3:.2f})"
                 for m in per_step]
        print(f"{n:>12,} | " + " | ".join(f"{c:>22}" for c in cells))
    print(f"\n{'rows':>12} | " + " | ".join(f"{m + ' s':>14}" for m in once))
    for n, r in results.items():
        print(f"{n:>12,} | " + " | ".join(f"{r[m][0]:>14.3f}" for m in once))


if __name__ == "__main__":
    main()
