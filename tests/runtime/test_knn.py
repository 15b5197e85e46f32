"""The vector view's pure decisions (``runtime/operators/knn.py``): milliseconds each."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from freshview.runtime.operators import knn
from freshview.runtime.operators.vector import vectors_of
from freshview.schema import SqlType, TableSchema, array_length_mismatch, parse_type, schema_from_ddl


def key(i):
    return i


def test_exact_distances_do_not_depend_on_the_batch():
    rng = np.random.default_rng(1)
    docs = rng.normal(size=(301, 17)).astype(np.float32)
    q = rng.normal(size=17).astype(np.float32)
    for metric in knn.METRICS:
        whole = knn.exact_distances(docs, q, metric)
        for i in (0, 5, 150, 300):
            assert knn.exact_distances(docs[i:i + 1], q, metric)[0] == whole[i]  # bit for bit
            assert knn.exact_distances(docs[i:], q, metric)[0] == whole[i]


def test_exact_distances_are_pgvectors():
    a, b = np.array([[3.0, 4.0]], np.float32), np.array([0.0, 0.0], np.float32)
    assert knn.exact_distances(a, b, "l2")[0] == 5.0
    assert knn.exact_distances(a, np.array([1.0, 2.0]), "inner_product")[0] == -11.0
    assert knn.exact_distances(np.array([[2.0, 2.0]]), np.array([1.0, 1.0]), "cosine")[0] == 0.0
    assert knn.exact_distances(np.array([[1.0, 0.0]]), np.array([-1.0, 0.0]), "cosine")[0] == 2.0


def test_usable():
    v = np.array([[1, 2], [np.nan, np.nan], [0, 0], [np.inf, 1]], np.float32)
    assert knn.usable(v, "l2").tolist() == [True, False, True, False]
    assert knn.usable(v, "cosine").tolist() == [True, False, False, False]


def test_order_breaks_ties_by_key_and_includes_all_ties_at_the_cut():
    rows = np.array([5, 3, 9, 1])
    dist = np.array([1.0, 0.5, 0.5, 0.5])
    keys = {5: "e", 3: "c", 9: "a", 1: "b"}
    r, d = knn.order(rows, dist, 2, keys.__getitem__)
    assert r.tolist() == [9, 1] and d.tolist() == [0.5, 0.5]
    r, _ = knn.order(rows, dist, 10, keys.__getitem__)
    assert r.tolist() == [9, 1, 3, 5]


def test_top_k_screened_equals_brute_force():
    rng = np.random.default_rng(2)
    docs = rng.integers(-2, 3, size=(500, 8)).astype(np.float32)  # many exact ties
    for metric in knn.METRICS:
        cand = np.flatnonzero(knn.usable(docs, metric))
        for _ in range(5):
            q = rng.integers(-2, 3, size=8).astype(np.float32)
            if metric == "cosine" and not q.any():
                continue
            scores = knn.screen_scores(docs[cand], q[None, :], metric)[:, 0]
            m = knn.score_margin(metric, 8, float(q @ q), float(knn.squared_norms(docs).max()))
            fast = knn.top_k(docs, cand, q, 7, metric, key, screened=scores, margin=m)
            slow = knn.top_k(docs, cand, q, 7, metric, key)
            assert fast[0].tolist() == slow[0].tolist() and fast[1].tolist() == slow[1].tolist()


def test_screen_scores_are_within_the_margin():
    rng = np.random.default_rng(3)
    docs = (rng.normal(size=(200, 384)) * 10).astype(np.float32)
    q = (rng.normal(size=384) * 10).astype(np.float32)
    for metric in knn.METRICS:
        exact = knn.to_score(knn.exact_distances(docs, q, metric), metric)
        screened = knn.screen_scores(docs, q[None, :], metric)[:, 0]
        m = knn.score_margin(metric, 384, float(knn.squared_norms(q[None, :])[0]), float(knn.squared_norms(docs).max()))
        assert np.abs(exact - screened).max() < m / 10


def test_merge_takes_new_distances_and_cuts_to_k():
    rows, d = knn.merge(np.array([1, 2, 3]), np.array([0.1, 0.2, 0.3]), np.array([4, 2]), np.array([0.15, 0.5]),
                        3, key)
    assert rows.tolist() == [1, 4, 3] and d.tolist() == [0.1, 0.15, 0.3]


def test_needs_recompute_and_admitted():
    assert knn.needs_recompute([["a", "b"], ["c"], []], {"b", "z"}) == [True, False, False]
    scores = np.array([[0.1, 0.9], [0.5, 0.5]])
    got = knn.admitted(scores, kth_scores=np.array([0.2, 0.4]), full=np.array([True, False]), margins=np.zeros(2))
    assert got.tolist() == [[True, True], [False, True]]


def test_vectors_of_handles_nulls_and_lengths():
    arr = pa.array([[1, 2], None, [3, 4, 5], [6, 7]], pa.list_(pa.float32()))
    m, lengths = vectors_of(arr, None)
    assert lengths.tolist() == [2, -1, 3, 2]
    assert m.shape == (4, 2) and m[0].tolist() == [1, 2] and m[3].tolist() == [6, 7]
    assert np.isnan(m[1]).all() and np.isnan(m[2]).all()


def test_fixed_size_arrays_in_the_schema():
    t = parse_type("FLOAT4[384]")
    assert t == SqlType.array(SqlType("float4"), 384) and t.is_float_vector and t.arrow == pa.list_(pa.float32())
    assert parse_type("real [ 3 ]").dim == 3 and parse_type("float8[]").dim is None
    assert SqlType.from_arrow(pa.list_(pa.float32(), 8)).dim == 8
    s = schema_from_ddl("id INT, e FLOAT4[3], tags TEXT[]", ["id"])
    assert TableSchema.from_json(s.to_json()) == s  # arrays (and their lengths) survive the catalog
    assert not parse_type("INT[4]").is_float_vector
    table = pa.table({"id": [1, 2], "e": [[1.0, 2.0, 3.0], [1.0]], "tags": [None, None]})
    assert array_length_mismatch(table, s) == (1, "e", 1)
    with pytest.raises(Exception):
        parse_type("FLOAT4[0]")
