"""Checkpoint and restore time and size (``IncrementalFlow.checkpoint_full`` / ``checkpoint`` / ``restore``).

A flow with ``orders(o_id BIGINT, o_customer INT, amount NUMERIC(12,2))`` (``--rows`` rows, loaded in
ticks of 100k rows) and one view ``SELECT o_customer, SUM(amount), COUNT(*) FROM orders GROUP BY
o_customer`` (``execution="local"``), checkpointed to a local directory: a full checkpoint, then
``--deltas`` ticks of ``--changes`` updated rows each followed by a delta checkpoint, then a restore of
the chain's end into a fresh flow (checked equal).  Printed: time, bytes and files of each.  Not a test.

    python3 -m benchmarks.checkpoint [--rows 1000000] [--deltas 20] [--changes 1000]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa


def main() -> None:
    from freshview import IncrementalFlow

    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.checkpoint")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--changes", type=int, default=1000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fv-ckpt-bench-"))
    dest = str(root / "checkpoints")
    flow = IncrementalFlow(state_dir=root / "state", execution="local")
    flow.register_source("orders", "o_id BIGINT, o_customer INT, amount NUMERIC(12,2)", primary_key=["o_id"])
    flow.register_view("totals", "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer")
    amount = pa.decimal128(12, 2)
    t0 = time.perf_counter()
    for lo in range(0, args.rows, 100_000):
        ids = np.arange(lo, min(lo + 100_000, args.rows), dtype=np.int64)
        flow.tick("orders", pa.table({"o_id": ids, "o_customer": (ids % 10_000).astype(np.int32),
                                      "amount": pa.array((ids % 100_000) / 100).cast(amount),
                                      "_weight": np.ones(len(ids), np.int64)}))
    print(f"load average {os.getloadavg()[0]:.1f}; {args.rows:,} rows loaded in {time.perf_counter() - t0:.1f} s")
    print("| operation | time | bytes written/read | files |")
    print("|---|---:|---:|---:|")
    info = flow.checkpoint_full(dest)
    print(f"| full checkpoint ({args.rows:,} rows of state, step {info.step}) | {info.duration_s:.2f} s | "
          f"{info.bytes_written / 2**20:,.1f} MiB | {info.files} |")
    rng = random.Random(1)
    times, sizes = [], []
    for _ in range(args.deltas):
        ids = np.array(rng.sample(range(args.rows), args.changes), dtype=np.int64)
        old = pa.table({"o_id": ids, "o_customer": (ids % 10_000).astype(np.int32),
                        "amount": pa.array((ids % 100_000) / 100).cast(amount), "_weight": -np.ones(len(ids), np.int64)})
        new = old.set_column(3, "_weight", pa.array(np.ones(len(ids), np.int64))).set_column(
            1, "o_customer", pa.array(((ids + 1) % 10_000).astype(np.int32)))
        flow.tick("orders", pa.concat_tables([old, new]))
        flow.tick("orders", pa.concat_tables([new.set_column(3, "_weight", pa.array(-np.ones(len(ids), np.int64))),
                                              old.set_column(3, "_weight", pa.array(np.ones(len(ids), np.int64)))]))
        d = flow.checkpoint(dest)
        times.append(d.duration_s)
        sizes.append(d.bytes_written)
    print(f"| delta checkpoint after {args.changes:,} changed rows ×2 (median of {args.deltas}) | "
          f"{sorted(times)[len(times) // 2] * 1000:.0f} ms | {sorted(sizes)[len(sizes) // 2] / 2**20:,.2f} MiB | |")
    other = IncrementalFlow(state_dir=root / "restored", execution="local")
    info = other.restore(dest)
    print(f"| restore of the chain's end (checkpoint {info.checkpoint}) | {info.duration_s:.2f} s | "
          f"{info.bytes_written / 2**20:,.1f} MiB | {info.files} |")
    a, b = flow.snapshot("totals"), other.snapshot("totals")
    key = [("o_customer", "ascending")]
    print("restored view equals the original:", a.sort_by(key).equals(b.sort_by(key)))
    flow.close()
    other.close()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
