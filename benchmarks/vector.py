"""Vector views: the step time of an exact k-nearest-neighbour view under document changes.

A flow with ``docs(id BIGINT, title TEXT, embedding FLOAT4[dim])`` (``--docs`` rows of clustered
random vectors, loaded in ticks of 20k), ``queries(q_id INT, embedding FLOAT4[dim])`` (``--queries``
rows) and ``register_vector_view(k=--k, metric=--metric)`` (``execution="local"``).  Then, for each
``--changes`` count, ``--repeat`` ticks of each kind: inserts of new documents, updates of random
documents' vectors, deletes of random documents, and deletes of documents that are among some
query's k nearest (each such query recomputes over all documents).  Printed: the median of the
vector view's time in the step and of the whole tick.  The result is checked against brute force
at the end.  With ``--hnsw``: a second view with ``index="hnsw"`` over the same sources, its step
times, and its recall@k against the exact view after its first computation and after the changes.
Not a test.

    python3 -m benchmarks.vector [--docs 100000] [--dim 384] [--queries 100] [--k 10] [--changes 1 100 1000] [--hnsw]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa


def vectors(rng: np.random.Generator, centers: np.ndarray, n: int) -> np.ndarray:
    pick = rng.integers(len(centers), size=n)
    return (centers[pick] + rng.normal(scale=0.6, size=(n, centers.shape[1]))).astype(np.float32)


def docs_table(ids: np.ndarray, vecs: np.ndarray, weight: int) -> pa.Table:
    dim = vecs.shape[1]
    emb = pa.ListArray.from_arrays(pa.array(np.arange(0, (len(ids) + 1) * dim, dim, dtype=np.int32)),
                                   pa.array(vecs.reshape(-1)))
    return pa.table({"id": pa.array(ids, pa.int64()), "title": pa.array([f"doc {i}" for i in ids]),
                     "embedding": emb, "_weight": pa.array(np.full(len(ids), weight, np.int64))})


def main() -> None:
    from freshview import IncrementalFlow

    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.vector")
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--metric", default="cosine")
    parser.add_argument("--changes", type=int, nargs="+", default=[1, 100, 1000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--hnsw", action="store_true", help="also measure an HNSW index's recall")
    args = parser.parse_args()
    rng = np.random.default_rng(11)
    centers = rng.normal(size=(64, args.dim)).astype(np.float32)
    root = Path(tempfile.mkdtemp(prefix="fv-vector-bench-"))
    flow = IncrementalFlow(state_dir=root / "state", execution="local", cache_mb=1024)
    flow.register_source("docs", f"id BIGINT, title TEXT, embedding FLOAT4[{args.dim}]", primary_key=["id"])
    flow.register_source("queries", f"q_id INT, embedding FLOAT4[{args.dim}]", primary_key=["q_id"])
    live: dict[int, np.ndarray] = {}
    t0 = time.perf_counter()
    for lo in range(0, args.docs, 20_000):
        ids = np.arange(lo, min(lo + 20_000, args.docs), dtype=np.int64)
        vecs = vectors(rng, centers, len(ids))
        flow.tick("docs", docs_table(ids, vecs, 1))
        live.update(zip(ids.tolist(), vecs))
    qv = vectors(rng, centers, args.queries)
    flow.tick("queries", pa.table({"q_id": pa.array(np.arange(args.queries), pa.int32()),
                                   "embedding": pa.array(list(qv), pa.list_(pa.float32())),
                                   "_weight": np.ones(args.queries, np.int64)}))
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=args.k,
                              metric=args.metric, payload=["id", "title"])
    first_s = time.perf_counter() - t0
    if args.hnsw:
        t0 = time.perf_counter()
        flow.register_vector_view("approx", source="docs", vector="embedding", queries="queries", k=args.k,
                                  metric=args.metric, payload=["id"], index="hnsw")
        print(f"HNSW view: first computation (graph built) {time.perf_counter() - t0:.1f} s; "
              f"recall@{args.k} {recall(flow):.3f}")
    print(f"load average {os.getloadavg()[0]:.1f}; {args.docs:,} docs × {args.dim} dims loaded in {load_s:.1f} s; "
          f"first computation ({args.queries} queries, k={args.k}, {args.metric}) {first_s:.2f} s")
    # a warm-up step builds nothing new (the operator's vectors were loaded by the first computation)
    next_id = args.docs
    extra = " HNSW view step (median) |" if args.hnsw else ""
    print(f"| change | docs changed | vector view step (median) | whole tick (median) | queries recomputed |{extra}")
    print("|---|---:|---:|---:|---:|" + ("---:|" if args.hnsw else ""))
    for n in args.changes:
        for kind in ("insert", "update", "delete", "delete top-k members"):
            view_ms, tick_ms, recomputed, approx_ms = [], [], [], []
            for _ in range(args.repeat):
                if kind == "insert":
                    ids = np.arange(next_id, next_id + n, dtype=np.int64)
                    next_id += n
                    new = vectors(rng, centers, n)
                    delta = docs_table(ids, new, 1)
                    after = dict(zip(ids.tolist(), new))
                    gone: list[int] = []
                elif kind == "update":
                    ids = rng.choice(np.fromiter(live, np.int64), n, replace=False)
                    new = vectors(rng, centers, n)
                    delta = pa.concat_tables([docs_table(ids, np.stack([live[i] for i in ids.tolist()]), -1),
                                              docs_table(ids, new, 1)])
                    after, gone = dict(zip(ids.tolist(), new)), []
                else:
                    if kind == "delete":
                        ids = rng.choice(np.fromiter(live, np.int64), n, replace=False)
                    else:
                        near = np.unique(flow.snapshot("nearest").column("id").to_numpy())
                        ids = rng.choice(near, min(n, len(near)), replace=False)
                    delta = docs_table(ids, np.stack([live[i] for i in ids.tolist()]), -1)
                    after, gone = {}, ids.tolist()
                top_before = flow.snapshot("nearest")
                hit = set(top_before.filter(pa.compute.is_in(top_before.column("id"), pa.array(ids)))
                          .column("q_id").to_pylist())
                summary = flow.tick("docs", delta)
                view_ms.append(summary.views["nearest"].duration_ms)
                tick_ms.append(summary.duration_ms)
                recomputed.append(len(hit))
                if args.hnsw:
                    approx_ms.append(summary.views["approx"].duration_ms)
                for i in gone:
                    live.pop(i)
                live.update(after)
            print(f"| {kind} | {n:,} | {statistics.median(view_ms):.1f} ms | {statistics.median(tick_ms):.1f} ms | "
                  f"{statistics.median(recomputed):.0f} |"
                  + (f" {statistics.median(approx_ms):.1f} ms |" if args.hnsw else ""))
    check(flow, live, qv, args.k, args.metric)
    if args.hnsw:
        print(f"HNSW view after the changes: recall@{args.k} {recall(flow):.3f}")
    flow.close()


def check(flow, live: dict[int, np.ndarray], qv: np.ndarray, k: int, metric: str) -> None:
    """The view against numpy brute force for a few queries (ids by rank)."""
    from freshview.runtime.operators import knn

    ids = np.fromiter(live, np.int64)
    order = np.argsort(ids)
    ids = ids[order]
    matrix = np.stack([live[i] for i in ids.tolist()])
    snap = flow.snapshot("nearest").to_pylist()
    for q in range(min(5, len(qv))):
        dist = knn.exact_distances(matrix, qv[q], metric)
        want = ids[np.lexsort((ids, dist))[:k]].tolist()
        got = [r["id"] for r in sorted((r for r in snap if r["q_id"] == q), key=lambda r: r["rank"])]
        assert got == want, (q, got, want)
    print("checked against brute force: equal")


def recall(flow) -> float:
    """The share of the exact view's (query, document) pairs that the HNSW view has."""
    exact, approx = flow.snapshot("nearest").to_pylist(), flow.snapshot("approx").to_pylist()
    want = {(r["q_id"], r["id"]) for r in exact}
    return len(want & {(r["q_id"], r["id"]) for r in approx}) / max(1, len(want))


if __name__ == "__main__":
    main()
