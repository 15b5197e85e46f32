"""Updates whose old rows the caller does not have (REPLICA IDENTITY DEFAULT): looked up by the caller, or by key.

A keyed source ``orders(o_id, o_customer, amount)`` of ``--rows`` rows under ``SELECT o_customer,
SUM(amount), COUNT(*) FROM orders GROUP BY o_customer`` (``execution="local"``) gets ``--steps`` steps of
``--batch`` updates of random existing keys, two ways:

* **lookup + tick**: the caller reads the old rows (``source_rows``, one lookup), builds −old +new and
  ticks them (the source operator looks the same keys up again to validate): the service's path today;
* **keyed**: ``tick({"orders": SourceChange(upserts=new rows)})``: the engine looks the keys up once,
  for the old rows and the validation together.

Printed: the median ms per step of each, and the ratio.  Not a test: nothing asserts a speed.

    python3 -m benchmarks.keyed_changes [--rows 1000000] [--batch 1000] [--steps 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa


def main() -> None:
    from freshview import IncrementalFlow
    from freshview.flow import SourceChange

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(1)

    def rows(ids: np.ndarray, seed: int) -> pa.Table:
        return pa.table({"o_id": pa.array(ids, pa.int64()),
                         "o_customer": pa.array((ids * 7 + seed) % 1000, pa.int64()),
                         "amount": pa.array((ids * 13 + seed) % 10_000, pa.int64())})

    timings: dict[str, list[float]] = {"lookup + tick": [], "keyed": []}
    with tempfile.TemporaryDirectory() as root:
        flows = {}
        for way in timings:
            flow = flows[way] = IncrementalFlow(state_dir=f"{root}/{way.replace(' ', '')}", execution="local",
                                                first_computation="local")
            flow.register_source("orders", "o_id BIGINT, o_customer BIGINT, amount BIGINT", primary_key=["o_id"])
            flow.register_view("totals", "SELECT o_customer, SUM(amount) AS s, COUNT(*) AS n FROM orders "
                                         "GROUP BY o_customer")
            start = rows(np.arange(args.rows, dtype=np.int64), 0)
            flow.tick("orders", start.append_column("_weight", pa.array(np.ones(args.rows, np.int64))))
        for step in range(1, args.steps + 1):
            ids = rng.choice(args.rows, size=args.batch, replace=False).astype(np.int64)
            new = rows(ids, step)
            for way, flow in flows.items():
                t0 = time.perf_counter()
                if way == "keyed":
                    flow.tick({"orders": SourceChange(upserts=new)})
                else:
                    old = flow.source_rows("orders", new.select(["o_id"]))
                    delta = pa.concat_tables([
                        old.append_column("_weight", pa.array(np.full(old.num_rows, -1, np.int64))),
                        new.append_column("_weight", pa.array(np.ones(new.num_rows, np.int64)))])
                    flow.tick("orders", delta)
                timings[way].append((time.perf_counter() - t0) * 1000)
        a, b = flows.values()
        assert a.snapshot("totals").sort_by("o_customer").equals(b.snapshot("totals").sort_by("o_customer"))
        for flow in flows.values():
            flow.close()
    medians = {way: statistics.median(t) for way, t in timings.items()}
    print(f"{args.rows:,} rows, {args.steps} steps of {args.batch:,} updates by key (median ms per step):")
    for way, ms in medians.items():
        print(f"  {way:14s} {ms:8.1f} ms")
    print(f"  keyed / lookup + tick: {medians['keyed'] / medians['lookup + tick']:.2f}")


if __name__ == "__main__":
    main()
