"""The flow's catalog: views are typed entries (``flow.catalog.ViewEntry``: a SQL view's text, a vector
view's definition, told apart by a field); a catalog of format 3 (a vector view's definition as SQL
text behind a marker) is migrated on load and written as format 4 by the next transaction."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from freshview import IncrementalFlow, SqlError
from freshview.flow.catalog import CATALOG_FORMAT, CATALOG_KEY, ViewEntry, ViewKind

SQL = "SELECT id, v FROM docs WHERE v > 1"


def _flow(path) -> IncrementalFlow:
    return IncrementalFlow(state_dir=path, execution="local", first_computation="local")


def _docs(rows, weight=1) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "v": pa.array([r[1] for r in rows], pa.int64()),
                     "embedding": pa.array([list(r[2]) for r in rows], pa.list_(pa.float32(), 2)),
                     "_weight": pa.array([weight] * len(rows), pa.int64())})


def _fill(flow: IncrementalFlow) -> None:
    flow.register_source("docs", "id BIGINT, v BIGINT, embedding FLOAT4[2]", primary_key=["id"])
    flow.tick("docs", _docs([(1, 1, (1.0, 0.0)), (2, 5, (0.0, 1.0)), (3, 7, (0.7, 0.7))]))
    flow.register_view("big", SQL)
    flow.register_vector_view("near", source="docs", vector="embedding", query=[1.0, 0.1], k=2)


def _rows(flow: IncrementalFlow, name: str) -> list:
    return sorted(flow.snapshot(name).to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def test_views_are_typed_entries_and_survive_a_restart(tmp_path):
    with _flow(tmp_path / "s") as flow:
        _fill(flow)
        stored = flow.store.get_meta(CATALOG_KEY)
        before = {n: _rows(flow, n) for n in ("big", "near")}
    assert stored["format"] == CATALOG_FORMAT == 4
    kinds = {e["name"]: e["kind"] for e in stored["views"]}
    assert kinds == {"big": "sql", "near": "vector"}
    entries = {e["name"]: ViewEntry.from_json(e) for e in stored["views"]}
    assert entries["big"].kind is ViewKind.SQL and entries["big"].sql == SQL and entries["big"].vector is None
    assert entries["near"].kind is ViewKind.VECTOR and entries["near"].vector.k == 2 and entries["near"].sql is None
    with _flow(tmp_path / "s") as flow:
        assert {n: _rows(flow, n) for n in ("big", "near")} == before


def test_a_format_3_catalog_is_migrated_on_load(tmp_path):
    with _flow(tmp_path / "s") as flow:
        _fill(flow)
        stored = flow.store.get_meta(CATALOG_KEY)
        before = {n: _rows(flow, n) for n in ("big", "near")}
        old = dict(stored, format=3, views=[  # as freshview wrote it before typed entries
            [e["name"], e["sql"] if e["kind"] == "sql" else "VECTOR SEARCH " + json.dumps(e["vector"], sort_keys=True),
             e["statistics"]] for e in stored["views"]])
        with flow.engine.transaction():
            flow.store.set_meta(CATALOG_KEY, old)
    with _flow(tmp_path / "s") as flow:
        assert {n: _rows(flow, n) for n in ("big", "near")} == before
        flow.tick("docs", _docs([(4, 9, (1.0, 0.05))]))
        assert [r["id"] for r in flow.snapshot("near").to_pylist()] == [4, 1] or \
            sorted(r["id"] for r in flow.snapshot("near").to_pylist()) == [1, 4]
        assert 4 in [r["id"] for r in flow.snapshot("big").to_pylist()]
        assert flow.store.get_meta(CATALOG_KEY)["format"] == 4  # written anew by the step
        flow.register_vector_view("near", source="docs", vector="embedding", query=[1.0, 0.1], k=2)  # the same


def test_sql_text_is_never_read_as_a_vector_definition(tmp_path):
    with _flow(tmp_path / "s") as flow:
        _fill(flow)
        with pytest.raises(SqlError):
            flow.register_view("fake", 'VECTOR SEARCH {"source": "docs", "vector": "embedding", "k": 1}')
        assert "fake" not in flow.views
