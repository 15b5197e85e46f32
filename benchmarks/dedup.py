"""What ``register_source(dedup=True)`` costs per tick, and that it does not grow with the seen set.

A keyless source ``events(id BIGINT, kind TEXT, qty INT)`` without views (``execution="local"``): ``--ticks``
ticks of ``--rows`` new rows each, without dedup and with it; then the same with the seen set pre-filled
with ``--seen`` digests (loaded straight into its arrangements, as if that many batches had been applied,
at a capacity equal to it, so every tick also drops the oldest); then a re-delivery of each batch (all
skipped).  Printed: median and p99 tick time of each.  Not a test.

    python3 -m benchmarks.dedup [--ticks 2000] [--rows 100] [--seen 2000000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa


def batch(i: int, rows: int) -> pa.Table:
    ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
    return pa.table({"id": ids, "kind": pa.array([f"k{j % 7}" for j in range(rows)]),
                     "qty": pa.array((ids % 13).astype(np.int32)), "_weight": np.ones(rows, np.int64)})


def run(flow, batches: list[pa.Table], expect_skipped: bool = False) -> list[float]:
    times = []
    for b in batches:
        t0 = time.perf_counter()
        summary = flow.tick("events", b)
        times.append((time.perf_counter() - t0) * 1000)
        assert bool(summary.deduplicated) == expect_skipped
    return times


def report(label: str, times: list[float]) -> None:
    q = statistics.quantiles(times, n=100)
    print(f"{label:<48} median {statistics.median(times):6.2f} ms   p99 {q[98]:6.2f} ms")


def main() -> None:
    from freshview import IncrementalFlow
    from freshview.flow import dedup
    from freshview.circuit.arrangements import dedup_meta as _seen_meta
    from freshview.circuit.arrangements import dedup_order as _seen_order_state
    from freshview.circuit.arrangements import dedup_seen as _seen_state

    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.dedup")
    parser.add_argument("--ticks", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--seen", type=int, default=2_000_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fv-dedup-bench-"))
    batches = [batch(i, args.rows) for i in range(args.ticks)]
    try:
        for label, kwargs in [("no dedup", {}), ("dedup, empty seen set", {"dedup": True})]:
            with IncrementalFlow(state_dir=root / label.replace(" ", "_"), execution="local") as flow:
                flow.register_source("events", "id BIGINT, kind TEXT, qty INT", **kwargs)
                report(label, run(flow, batches))
                if kwargs:
                    report("dedup, re-deliveries (skipped)", run(flow, batches, expect_skipped=True))

        with IncrementalFlow(state_dir=root / "full", execution="local") as flow:
            flow.register_source("events", "id BIGINT, kind TEXT, qty INT", dedup=True, dedup_capacity=args.seen)
            t0 = time.perf_counter()
            rng = np.random.default_rng(1)
            words = rng.integers(0, 2**64, size=(args.seen, 2), dtype=np.uint64)
            n = args.seen
            flow.store.begin()
            flow.store.apply(_seen_state("events"), pa.table({"hi": words[:, 0], "lo": words[:, 1],
                                                             "_weight": np.ones(n, np.int64)}))
            flow.store.apply(_seen_order_state("events"), pa.table({
                "seq": np.arange(n, dtype=np.int64), "hi": words[:, 0], "lo": words[:, 1],
                "_weight": np.ones(n, np.int64)}))
            flow.store.set_meta(_seen_meta("events"), dedup.SeenState(next=n, low=0).to_json())
            flow.store.commit()
            print(f"(pre-filled {n:,} digests in {time.perf_counter() - t0:.1f} s)")
            report(f"dedup, {n:,} seen, dropping one per tick", run(flow, batches))
            report(f"dedup, {n:,} seen, re-deliveries (skipped)", run(flow, batches, expect_skipped=True))
            m = flow.metrics()
            assert m["dedup_entries"] == n and m["dedup_dropped_total"] == args.ticks, m
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
