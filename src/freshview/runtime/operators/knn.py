"""Exact k-nearest-neighbour decisions, pure numpy: distances, top-k, merges, what to recompute.

The vector view's operator (``operators/vector.py``) keeps state and talks to the store; every
decision it makes is one of the functions here, each with a millisecond unit test.

Distances are pgvector's: ``l2`` the Euclidean distance (``<->``), ``cosine`` ``1 - cos(a, b)``
(``<=>``; cos = a·b / sqrt(|a|²|b|²) clipped to [-1, 1], so equal directions are exactly 0), ``inner_product`` the *negative* inner product (``<#>``); for all three smaller is nearer.
The result is ordered by (distance, the document's primary key), ranked 1..k.

Determinism: a document's distance to a query must not depend on the batch it was computed in (a
new document compared against every query, or a full recompute of one query), or ties between
equal vectors would break differently from a brute-force run.  BLAS products are fast but round
differently for different shapes, so they only *screen* (``screen_scores``, in float32): every
candidate within ``score_margin`` of the k-th screened score is then measured by
``exact_distances``, which multiplies in float64 (exact for float32 inputs) and sums each row by a
fixed pairwise tree of elementwise additions, so a pair's distance is bit-for-bit the same
whatever else is in the batch.

Vectors that cannot be compared are ignored (``usable``): NULL vectors, vectors with a NaN or
infinite component, and under ``cosine`` the zero vector (its cosine is undefined; pgvector gives NaN).
"""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

import numpy as np

METRICS = ("cosine", "l2", "inner_product")
_ROWS = 8192  # rows per block of an exact pass over many documents


def usable(vectors: np.ndarray, metric: str) -> np.ndarray:
    """Which rows of ``vectors`` (n × d; a NULL vector is a row of NaN) take part under ``metric``."""
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[1] == 0:
        return np.zeros(len(vectors), bool)
    ok = np.isfinite(vectors).all(axis=1)
    if metric == "cosine":
        ok &= (vectors != 0).any(axis=1)
    return ok


def _tree_sum(x: np.ndarray) -> np.ndarray:
    """Row sums of ``x`` (n × d) by a fixed pairwise tree of elementwise additions: the rounding of a
    row's sum depends on nothing but that row."""
    width = 1 << max(0, int(np.ceil(np.log2(max(x.shape[1], 1)))))
    if width != x.shape[1]:
        x = np.concatenate([x, np.zeros((len(x), width - x.shape[1]), x.dtype)], axis=1)
    while x.shape[1] > 1:
        half = x.shape[1] // 2
        x = x[:, :half] + x[:, half:]
    return x[:, 0]


def exact_distances(docs: np.ndarray, query: np.ndarray, metric: str) -> np.ndarray:
    """The distance of each row of ``docs`` (n × d) to ``query`` (d), float64; the same for a pair in
    every batch (see the module docstring)."""
    q = np.asarray(query, dtype=np.float64)
    qq = float(_tree_sum((q * q)[None, :])[0])
    out = np.empty(len(docs), dtype=np.float64)
    for start in range(0, len(docs), _ROWS):
        block = np.asarray(docs[start:start + _ROWS], dtype=np.float64)
        if metric == "l2":
            diff = block - q
            out[start:start + len(block)] = np.sqrt(_tree_sum(diff * diff))
        elif metric == "inner_product":
            out[start:start + len(block)] = -_tree_sum(block * q)
        elif metric == "cosine":
            dots, dd = _tree_sum(block * q), _tree_sum(block * block)
            out[start:start + len(block)] = 1.0 - np.clip(dots / np.sqrt(dd * qq), -1.0, 1.0)  # as pgvector
        else:
            raise ValueError(f"unknown metric {metric!r}")
    return out


def to_score(distance: np.ndarray | float, metric: str) -> np.ndarray | float:
    """A distance on the screening scale (``l2``: squared; the others: itself)."""
    return np.square(distance) if metric == "l2" else distance


def screen_queries(docs: np.ndarray, queries: np.ndarray, metric: str, doc_sq: np.ndarray | None = None,
                   query_sq: np.ndarray | None = None) -> np.ndarray:
    """Approximate scores (m queries × n docs, float32) by one float32 matrix product, ordered as
    distances (``l2``: squared distance): for choosing candidates only.  ``doc_sq``: the docs' squared
    norms, ``query_sq`` the queries' (computed when not given).  A zero row (a free slot) scores as if orthogonal; callers never take it as a candidate."""
    d = np.asarray(docs, dtype=np.float32)
    q = np.asarray(queries, dtype=np.float32)
    if len(d) == 0 or len(q) == 0:
        return np.zeros((len(q), len(d)), dtype=np.float32)
    scores = q @ d.T
    if metric == "inner_product":
        np.negative(scores, out=scores)
        return scores
    dn = (squared_norms(d) if doc_sq is None else np.asarray(doc_sq)).astype(np.float32)
    qn = (squared_norms(q) if query_sq is None else np.asarray(query_sq)).astype(np.float32)
    if metric == "l2":
        scores *= -2
        scores += dn[None, :]
        scores += qn[:, None]
        return scores
    if metric == "cosine":
        with np.errstate(divide="ignore"):
            inv_d = np.where(dn > 0, 1 / np.sqrt(dn), 0).astype(np.float32)
            inv_q = np.where(qn > 0, 1 / np.sqrt(qn), 0).astype(np.float32)
        scores *= inv_d[None, :]
        scores *= inv_q[:, None]
        np.subtract(1, scores, out=scores)
        return scores
    raise ValueError(f"unknown metric {metric!r}")


def screen_scores(docs: np.ndarray, queries: np.ndarray, metric: str, doc_sq: np.ndarray | None = None
                  ) -> np.ndarray:
    """``screen_queries`` transposed: n docs × m queries."""
    return screen_queries(docs, queries, metric, doc_sq).T


def squared_norms(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float64)
    return np.einsum("ij,ij->i", v, v) if len(v) else np.zeros(0)


def score_margin(metric: str, dim: int, query_sq: float | np.ndarray, max_doc_sq: float) -> float | np.ndarray:
    """A bound on |screened − exact| score: a float32 dot product of length ``dim`` errs by at most
    about dim·2⁻²⁴ of Σ|aᵢbᵢ| ≤ |a||b| (taken 4× for safety)."""
    err = 4.0 * max(dim, 1) * 2.0 ** -24
    if metric == "cosine":
        return 3 * err + 1e-12
    if metric == "inner_product":
        return err * np.sqrt(query_sq) * np.sqrt(max_doc_sq) + 1e-12
    return 2 * err * (max_doc_sq + query_sq) + 1e-12


def order(rows: np.ndarray, distances: np.ndarray, k: int, key_of: Callable[[int], Hashable]
          ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest of ``rows`` by (distance, primary key): ``key_of(row)`` is the row's key,
    asked only of rows tied at the cut."""
    rows, distances = np.asarray(rows, np.int64), np.asarray(distances, np.float64)
    if len(rows) == 0 or k < 1:
        return rows[:0], distances[:0]
    by_distance = np.argsort(distances, kind="stable")
    cut = distances[by_distance[min(k, len(rows)) - 1]]
    head = by_distance[distances[by_distance] <= cut]  # everything up to the k-th, ties included
    ranked = sorted(head.tolist(), key=lambda i: (distances[i], key_of(int(rows[i]))))[:k]
    return rows[ranked], distances[ranked]


def top_k(docs: np.ndarray, candidates: np.ndarray, query: np.ndarray, k: int, metric: str,
          key_of: Callable[[int], Hashable], screened: np.ndarray | None = None,
          margin: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The exact top ``k`` of ``query`` among rows ``candidates`` of ``docs``: (rows, distances).

    With ``screened`` (the candidates' approximate scores) only those within ``margin`` of the k-th
    screened score are measured exactly; without it every candidate is (brute force)."""
    candidates = np.asarray(candidates, dtype=np.int64)
    if len(candidates) == 0 or k < 1:
        return candidates[:0], np.zeros(0)
    if screened is not None and len(candidates) > k:
        kth = np.partition(screened, k - 1)[k - 1]
        candidates = candidates[screened <= kth + margin]
    return order(candidates, exact_distances(docs[candidates], query, metric), k, key_of)


def merge(rows: np.ndarray, distances: np.ndarray, new_rows: np.ndarray, new_distances: np.ndarray, k: int,
          key_of: Callable[[int], Hashable]) -> tuple[np.ndarray, np.ndarray]:
    """A top-k plus newly measured documents, cut back to ``k``; a row in both takes its new distance."""
    keep = ~np.isin(rows, new_rows)
    return order(np.concatenate([np.asarray(rows, np.int64)[keep], new_rows]),
                 np.concatenate([np.asarray(distances, np.float64)[keep], new_distances]), k, key_of)


def needs_recompute(tops: Sequence[Sequence[Hashable]], touched: set) -> list[bool]:
    """Per query, whether its top-k must be recomputed from all documents: one of its current nearest
    documents was touched (deleted, or its vector or payload changed).  Any other query merges the
    touched documents' new versions into its top-k: its untouched neighbours kept their distances,
    so its new top-k lies within old top-k ∪ touched."""
    return [any(key in touched for key in top) for top in tops]


def admitted(scores: np.ndarray, kth_scores: np.ndarray, full: np.ndarray, margins: np.ndarray) -> np.ndarray:
    """Which screened (docs × queries) scores may enter a query's top-k: the query holds fewer than k
    documents (``full`` False), or the score is within the margin of its k-th document's."""
    return ~np.asarray(full, bool)[None, :] | (scores <= (np.asarray(kth_scores) + margins)[None, :])
