"""Vector views (``register_vector_view``): equal to brute force after every step, under random
inserts, updates and deletes of documents and queries, with NULL vectors, duplicates and ties;
restart, rollback, watches, Debezium, flush interval, explain, drop; the errors."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pyarrow as pa
import pytest

from freshview import CatalogError, DeltaError, IncrementalFlow
from freshview.plan.shape import result_key


def _flow(tmp_path, name="state", **kw) -> IncrementalFlow:
    return IncrementalFlow(state_dir=tmp_path / name, execution="local", **kw)


def docs_delta(rows, weight=1):
    """rows: (id, title, vector or None)."""
    return pa.table({
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "title": pa.array([r[1] for r in rows], pa.string()),
        "embedding": pa.array([None if r[2] is None else [float(x) for x in r[2]] for r in rows],
                              pa.list_(pa.float32())),
        "_weight": pa.array([weight] * len(rows), pa.int64()),
    })


def queries_delta(rows, weight=1):
    return pa.table({
        "q_id": pa.array([r[0] for r in rows], pa.int32()),
        "embedding": pa.array([None if r[1] is None else [float(x) for x in r[1]] for r in rows],
                              pa.list_(pa.float32())),
        "_weight": pa.array([weight] * len(rows), pa.int64()),
    })


def distance(a, b, metric):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if metric == "l2":
        return math.sqrt(float(np.sum((a - b) ** 2)))
    if metric == "inner_product":
        return -float(np.dot(a, b))
    return 1.0 - min(1.0, max(-1.0, float(np.dot(a, b)) / math.sqrt(float(np.dot(a, a)) * float(np.dot(b, b)))))


def measurable(v, metric):
    if v is None:
        return False
    v = np.asarray(v, np.float32)
    return bool(np.isfinite(v).all()) and (metric != "cosine" or bool((v != 0).any()))


def brute_force(docs: dict, queries: dict, k: int, metric: str) -> list[tuple]:
    """(q_id, rank, id, title, distance) by (distance, id), rank 1..k."""
    out = []
    for q, qv in sorted(queries.items()):
        if not measurable(qv, metric):
            continue
        near = sorted((distance(v, qv, metric), d, t) for d, (t, v) in docs.items() if measurable(v, metric))
        out += [(q, r + 1, d, t, dist) for r, (dist, d, t) in enumerate(near[:k])]
    return out


def view_rows(flow, name):
    return sorted(tuple(r.values()) for r in flow.snapshot(name).to_pylist())


def assert_matches(got, want):
    assert [g[:-1] for g in got] == [w[:-1] for w in want]
    for g, w in zip(got, want):
        assert g[-1] == pytest.approx(w[-1], rel=1e-9, abs=1e-9)


def random_vector(rng, dim, mode):
    if mode == "int":  # small integers: many exact ties
        return rng.integers(-2, 3, dim).astype(np.float32)
    return rng.normal(size=dim).astype(np.float32)


@pytest.mark.parametrize("metric", ["cosine", "l2", "inner_product"])
@pytest.mark.parametrize("mode", ["float", "int"])
def test_random_changes_equal_brute_force(tmp_path, metric, mode):
    rng = np.random.default_rng(abs(hash((metric, mode))) % 2**32)
    dim, k = int(rng.integers(4, 17)), int(rng.integers(1, 5))
    flow = _flow(tmp_path)
    flow.register_source("docs", f"id BIGINT, title TEXT, embedding FLOAT4[{dim}]", primary_key=["id"])
    flow.register_source("queries", f"q_id INT, embedding FLOAT4[{dim}]", primary_key=["q_id"])
    docs: dict[int, tuple] = {}
    queries: dict[int, object] = {}

    def new_vector():
        r = rng.random()
        if r < 0.1:
            return None
        if r < 0.25 and docs:  # a duplicate of an existing vector
            existing = [v for _, v in docs.values() if v is not None]
            if existing:
                return existing[int(rng.integers(len(existing)))].copy()
        return random_vector(rng, dim, mode)

    first = [(i, f"t{i}", new_vector()) for i in range(12)]
    for i, t, v in first:
        docs[i] = (t, v)
    flow.tick("docs", docs_delta(first))
    qs = [(q, random_vector(rng, dim, mode)) for q in range(5)]
    queries.update(qs)
    flow.tick("queries", queries_delta(qs))
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=k,
                              metric=metric, payload=["id", "title"])
    watch = flow.watch_output("nearest")
    integrated: dict[tuple, int] = {}
    for row in flow.snapshot("nearest").to_pylist():
        integrated[tuple(row.values())] = 1
    assert_matches(view_rows(flow, "nearest"), brute_force(docs, queries, k, metric))
    next_id, next_q = 100, 10
    for step in range(40):
        removes, adds, qremoves, qadds = [], [], [], []
        for _ in range(int(rng.integers(1, 5))):
            op = rng.random()
            live = [d for d in docs if d not in {r[0] for r in removes}]
            if op < 0.35 or not live:  # insert
                adds.append((next_id, f"t{next_id}", new_vector()))
                next_id += 1
            elif op < 0.6:  # delete, often one of some query's nearest
                snap = flow.snapshot("nearest").column("id").to_pylist()
                pool = [d for d in snap if d in live] if snap and rng.random() < 0.7 else live
                d = pool[int(rng.integers(len(pool)))] if pool else live[0]
                removes.append((d, *docs[d]))
            else:  # update: new vector and/or title
                d = live[int(rng.integers(len(live)))]
                if d in {a[0] for a in adds}:
                    continue
                t, v = docs[d]
                removes.append((d, t, v))
                adds.append((d, t + "'" if rng.random() < 0.3 else t, new_vector() if rng.random() < 0.8 else v))
        if rng.random() < 0.3:
            qop = rng.random()
            if qop < 0.4:
                qadds.append((next_q, random_vector(rng, dim, mode) if rng.random() > 0.1 else None))
                next_q += 1
            elif queries:
                q = list(queries)[int(rng.integers(len(queries)))]
                qremoves.append((q, queries[q]))
                if qop < 0.8:
                    qadds.append((q, random_vector(rng, dim, mode)))
        changes = {"docs": pa.concat_tables([docs_delta(removes, -1), docs_delta(adds)])}
        if qadds or qremoves:
            changes["queries"] = pa.concat_tables([queries_delta(qremoves, -1), queries_delta(qadds)])
        flow.tick(changes)
        for d, _, _ in removes:
            docs.pop(d, None)
        for d, t, v in adds:
            docs[d] = (t, v)
        for q, _ in qremoves:
            queries.pop(q, None)
        for q, v in qadds:
            queries[q] = v
        assert_matches(view_rows(flow, "nearest"), brute_force(docs, queries, k, metric)), step
        for batch in watch.poll():  # the emitted changes add up to the view
            for row in batch.table.to_pylist():
                w = row.pop("_weight")
                key = tuple(row.values())
                integrated[key] = integrated.get(key, 0) + w
                if integrated[key] == 0:
                    del integrated[key]
        assert sorted(integrated) == view_rows(flow, "nearest")
        if step == 20:  # restart: the state comes back from the store
            flow.close()
            flow = _flow(tmp_path)
            watch = flow.watch_output("nearest")
    flow.close()


def test_fixed_query_and_k_larger_than_documents(tmp_path):
    flow = _flow(tmp_path)
    flow.register_source("docs", "id BIGINT, title TEXT, embedding FLOAT4[2]", primary_key=["id"])
    flow.tick("docs", docs_delta([(1, "a", [1, 0]), (2, "b", [0, 1]), (3, "c", None)]))
    flow.register_vector_view("near", source="docs", vector="embedding", query=[1.0, 0.1], k=5, metric="l2",
                              payload=["title"])
    assert [n for n, _ in flow.view_columns("near")] == ["rank", "title", "distance"]
    rows = flow.snapshot("near").sort_by("rank").to_pylist()
    assert [(r["rank"], r["title"]) for r in rows] == [(1, "a"), (2, "b")]
    assert rows[0]["distance"] == pytest.approx(0.1, rel=1e-6)
    flow.tick("docs", docs_delta([(4, "d", [1, 0.1])]))
    assert flow.snapshot("near").sort_by("rank").column("title").to_pylist() == ["d", "a", "b"]
    assert result_key(flow.view_plan("near")).key == (0,)
    flow.close()


def test_ties_break_by_primary_key_and_duplicates(tmp_path):
    flow = _flow(tmp_path)
    flow.register_source("docs", "id BIGINT, title TEXT, embedding FLOAT4[3]", primary_key=["id"])
    flow.register_source("queries", "q_id INT, embedding FLOAT4[3]", primary_key=["q_id"])
    flow.tick("queries", queries_delta([(1, [1, 1, 0])]))
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=2)
    # the same vector three times, inserted in separate steps, largest key first
    for i in (30, 20, 10):
        flow.tick("docs", docs_delta([(i, "x", [2, 2, 0])]))
    assert [(r["rank"], r["id"]) for r in flow.snapshot("nearest").sort_by("rank").to_pylist()] == [(1, 10), (2, 20)]
    flow.tick("docs", docs_delta([(10, "x", [2, 2, 0])], -1))  # the next tie comes in
    assert [(r["rank"], r["id"]) for r in flow.snapshot("nearest").sort_by("rank").to_pylist()] == [(1, 20), (2, 30)]
    assert flow.snapshot("nearest").column("distance").to_pylist() == [0.0, 0.0]
    flow.close()


def test_rolled_back_step_leaves_the_view_consistent(tmp_path):
    flow = _flow(tmp_path)
    flow.register_source("docs", "id BIGINT, title TEXT, embedding FLOAT4[2]", primary_key=["id"])
    flow.register_source("queries", "q_id INT, embedding FLOAT4[2]", primary_key=["q_id"])
    flow.tick({"docs": docs_delta([(1, "a", [1, 0]), (2, "b", [0, 1])]), "queries": queries_delta([(1, [1, 0])])})
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=1, payload=["title"])

    def fail(_changes):
        raise RuntimeError("sink down")
    with pytest.raises(RuntimeError):
        flow.tick("docs", docs_delta([(3, "c", [1, 0.01])]), before_commit=fail)
    assert view_rows(flow, "nearest")[0][:3] == (1, 1, "a")
    flow.tick("docs", docs_delta([(1, "a", [1, 0])], -1))  # the operator's memory had seen doc 3: rebuilt
    assert [r[:3] for r in view_rows(flow, "nearest")] == [(1, 1, "b")]
    flow.close()


def test_watch_debezium_flush_interval_explain_drop(tmp_path):
    flow = _flow(tmp_path, flush_interval=3600)
    flow.register_source("docs", "id BIGINT, title TEXT, embedding FLOAT4[2]", primary_key=["id"])
    flow.register_source("queries", "q_id INT, embedding FLOAT4[2]", primary_key=["q_id"])
    flow.tick({"docs": docs_delta([(1, "a", [1, 0]), (2, "b", [0, 1])]), "queries": queries_delta([(7, [1, 0])])})
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=1,
                              metric="cosine", payload=["id", "title"])
    messages = flow.watch_output("nearest", format="debezium", schemas=False)
    flow.tick("docs", docs_delta([(3, "c", [1, 0.001])]))  # not nearer: no change
    flow.tick("docs", docs_delta([(1, "a", [1, 0])], -1))  # the first change goes out at once
    out = messages.poll()
    assert len(out) == 1 and out[0]["op"] == "u" and out[0]["after"]["q_id"] == 7
    assert out[0]["before"]["id"] == 1 and out[0]["after"]["id"] == 3
    flow.tick("docs", docs_delta([(1, "a", [1, 0])]))  # held back by the flush interval until flushed
    assert messages.poll() == []
    flow.flush()
    out = messages.poll()
    assert len(out) == 1 and out[0]["before"]["id"] == 3 and out[0]["after"]["id"] == 1
    text = flow.explain("nearest")
    assert "VectorSearch 1 nearest by cosine" in text and "view/nearest/op1/top" in text
    with pytest.raises(CatalogError):
        flow.drop_source("docs")  # the vector view reads it
    flow.drop_view("nearest")
    assert not flow.store.list_arrangements("view/nearest/")
    flow.drop_source("docs")
    flow.close()


def test_sql_view_over_a_vector_view(tmp_path):
    flow = _flow(tmp_path)
    flow.register_source("docs", "id BIGINT, title TEXT, embedding FLOAT4[2]", primary_key=["id"])
    flow.register_source("queries", "q_id INT, embedding FLOAT4[2]", primary_key=["q_id"])
    flow.tick({"docs": docs_delta([(1, "a", [1, 0]), (2, "b", [0, 1])]),
               "queries": queries_delta([(1, [1, 0]), (2, [0, 1])])})
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=1,
                              payload=["title"])
    flow.register_view("best", "SELECT title, COUNT(*) AS n FROM nearest GROUP BY title")
    assert view_rows(flow, "best") == [("a", 1), ("b", 1)]
    flow.tick("queries", queries_delta([(3, [0.9, 0.1])]))
    assert view_rows(flow, "best") == [("a", 2), ("b", 1)]
    flow.close()


def test_errors(tmp_path):
    flow = _flow(tmp_path)
    flow.register_source("docs", "id BIGINT, title TEXT, embedding FLOAT4[4], tags INT[]", primary_key=["id"])
    flow.register_source("queries", "q_id INT, embedding FLOAT4[3]", primary_key=["q_id"])
    flow.register_source("bag", "id BIGINT, embedding FLOAT4[4]")

    def reg(**kw):
        args = dict(source="docs", vector="embedding", queries="queries", k=3)
        args.update(kw)
        flow.register_vector_view("v", **{k: v for k, v in args.items() if v is not ...})

    with pytest.raises(CatalogError, match="no column 'nope'"):
        reg(vector="nope")
    with pytest.raises(CatalogError, match="docs.title is text, not a vector"):
        reg(vector="title")
    with pytest.raises(CatalogError, match="not a vector"):
        reg(vector="tags")
    with pytest.raises(CatalogError, match="dimension mismatch: docs.embedding holds 4 values, queries.embedding 3"):
        reg()
    with pytest.raises(CatalogError, match="dimension mismatch: the query vector has 2 values"):
        reg(queries=None, query=[1.0, 2.0])
    with pytest.raises(CatalogError, match="k must be"):
        reg(k=0)
    with pytest.raises(CatalogError, match="unknown metric 'dot'"):
        reg(metric="dot")
    with pytest.raises(CatalogError, match="not both"):
        reg(query=[1.0, 2.0, 3.0, 4.0])
    with pytest.raises(CatalogError, match="not neither"):
        reg(queries=None)
    with pytest.raises(CatalogError, match="unknown source 'nowhere'"):
        reg(source="nowhere")
    with pytest.raises(CatalogError, match="needs a primary key"):
        reg(source="bag", queries=None, query=[1.0] * 4)
    with pytest.raises(CatalogError, match="no column 'x'"):
        reg(queries=None, query=[1.0] * 4, payload=["x"])
    with pytest.raises(CatalogError, match="repeat 'rank'"):
        flow.register_source("ranked", "id BIGINT, rank INT, embedding FLOAT4[4]", primary_key=["id"])
        reg(source="ranked", queries=None, query=[1.0] * 4, payload=["id", "rank"])
    with pytest.raises(CatalogError, match="unknown index"):
        reg(queries=None, query=[1.0] * 4, index="ivf")
    assert "v" not in flow.views
    # a wrong-length vector is refused at the source, naming the row's key
    with pytest.raises(DeltaError, match=r"embedding of \(id=5\) has 3 values, but the column is real\[4\]"):
        flow.tick("docs", pa.table({"id": [5], "title": ["x"], "embedding": [[1.0, 2.0, 3.0]], "tags": [None],
                                    "_weight": [1]}))
    flow.close()


def test_undeclared_dimension_mismatch_fails_the_step(tmp_path):
    flow = _flow(tmp_path)
    flow.register_source("docs", "id BIGINT, title TEXT, embedding FLOAT4[]", primary_key=["id"])
    flow.register_source("queries", "q_id INT, embedding FLOAT4[]", primary_key=["q_id"])
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=2)
    flow.tick({"docs": docs_delta([(1, "a", None), (2, "b", [1, 0, 0])]), "queries": queries_delta([(1, [1, 0, 0])])})
    assert [r[:3] for r in view_rows(flow, "nearest")] == [(1, 1, 2)]
    with pytest.raises(DeltaError, match=r"vector view 'nearest': docs.embedding of \(id=3\) has 2 values, "
                                         r"but the view's vectors have 3") as err:
        flow.tick("docs", docs_delta([(3, "c", [1, 0])]))
    assert err.value.view == "nearest"
    assert [r[:3] for r in view_rows(flow, "nearest")] == [(1, 1, 2)]
    flow.close()


@pytest.mark.skipif(importlib.util.find_spec("hnswlib") is None, reason="hnswlib is not installed (pip install hnswlib)")
def test_hnsw_index_recall_under_changes(tmp_path):
    rng = np.random.default_rng(9)
    dim, k = 8, 5
    flow = _flow(tmp_path)
    flow.register_source("docs", f"id BIGINT, title TEXT, embedding FLOAT4[{dim}]", primary_key=["id"])
    flow.register_source("queries", f"q_id INT, embedding FLOAT4[{dim}]", primary_key=["q_id"])
    docs = {i: (f"t{i}", rng.normal(size=dim).astype(np.float32)) for i in range(400)}
    flow.tick("docs", docs_delta([(i, t, v) for i, (t, v) in docs.items()]))
    queries = {q: rng.normal(size=dim).astype(np.float32) for q in range(10)}
    flow.tick("queries", queries_delta(list(queries.items())))
    flow.register_vector_view("approx", source="docs", vector="embedding", queries="queries", k=k,
                              metric="l2", payload=["id", "title"], index="hnsw")
    assert "index hnsw" in flow.explain("approx")

    def recall():
        want = {(r[0], r[2]) for r in brute_force(docs, queries, k, "l2")}
        got = view_rows(flow, "approx")
        assert len(got) == len(want)
        return len(want & {(r[0], r[2]) for r in got}) / len(want)
    assert recall() >= 0.95
    for step in range(10):
        near = flow.snapshot("approx").column("id").to_pylist()
        gone = sorted(set(near))[:5]
        new = [(1000 + step * 10 + j, "n", rng.normal(size=dim).astype(np.float32)) for j in range(5)]
        flow.tick("docs", pa.concat_tables([docs_delta([(d, *docs[d]) for d in gone], -1), docs_delta(new)]))
        for d in gone:
            docs.pop(d)
        docs.update({i: (t, v) for i, t, v in new})
        assert recall() >= 0.9
        if step == 5:
            flow.close()
            flow = _flow(tmp_path)
    flow.close()


def test_under_the_spark_executor(make_flow):
    """execution="spark": the operator still runs on numpy; its input and output cross to Spark."""
    flow = make_flow(execution="spark")
    flow.register_source("docs", "id BIGINT, title TEXT, embedding FLOAT4[3]", primary_key=["id"])
    flow.register_source("queries", "q_id INT, embedding FLOAT4[3]", primary_key=["q_id"])
    rng = np.random.default_rng(4)
    docs = {i: (f"t{i}", rng.normal(size=3).astype(np.float32)) for i in range(30)}
    queries = {1: rng.normal(size=3).astype(np.float32), 2: rng.normal(size=3).astype(np.float32)}
    flow.tick({"docs": docs_delta([(i, t, v) for i, (t, v) in docs.items()]), "queries": queries_delta(list(queries.items()))})
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=3, metric="l2",
                              payload=["id", "title"])
    gone = sorted(set(flow.snapshot("nearest").column("id").to_pylist()))[:2]
    summary = flow.tick("docs", docs_delta([(d, *docs[d]) for d in gone], -1))
    assert summary.views["nearest"].executor == "spark"
    for d in gone:
        docs.pop(d)
    assert_matches(view_rows(flow, "nearest"), brute_force(docs, queries, 3, "l2"))


def test_checkpoint_restore(tmp_path):
    from tests.vector.test_sinks import DictSink, normalized

    flow = _flow(tmp_path)
    flow.register_source("docs", "id BIGINT, title TEXT, embedding FLOAT4[2]", primary_key=["id"])
    flow.register_source("queries", "q_id INT, embedding FLOAT4[2]", primary_key=["q_id"])
    docs = {1: ("a", [1, 0]), 2: ("b", [0, 1]), 3: ("c", [1, 1])}
    queries = {1: np.array([1, 0.2], np.float32)}
    flow.tick({"docs": docs_delta([(i, *v) for i, v in docs.items()]), "queries": queries_delta(list(queries.items()))})
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=2,
                              payload=["id", "title"])
    sink = DictSink()
    flow.attach_vector_sink("nearest", sink)
    flow.checkpoint_full(str(tmp_path / "ckpt"))
    flow.tick("docs", docs_delta([(1, "a", [1, 0])], -1))
    flow.restore(str(tmp_path / "ckpt"))  # back to before the delete; the sink is refilled
    assert_matches(view_rows(flow, "nearest"), brute_force(docs, queries, 2, "cosine"))
    assert normalized(list(sink.rows.values()), [0, 1]) == normalized(flow.snapshot("nearest").to_pylist(), [0, 1])
    flow.tick("docs", docs_delta([(2, "b", [0, 1])], -1))
    docs.pop(2)
    assert_matches(view_rows(flow, "nearest"), brute_force(docs, queries, 2, "cosine"))
    assert normalized(list(sink.rows.values()), [0, 1]) == normalized(flow.snapshot("nearest").to_pylist(), [0, 1])
    flow.close()
