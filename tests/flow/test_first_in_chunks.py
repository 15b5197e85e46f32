"""A first computation whose inputs are over ``Engine.first_chunk_bytes`` takes them in chunks, each a step
(``Engine._first_in_chunks``): the view it makes is the one computed in one step, and so is every step
after it.  Here the threshold is 0 and the chunks a few rows, so small inputs are cut into many chunks."""

from __future__ import annotations

import logging
import random

import pyarrow as pa
import pytest

from freshview.flow import IncrementalFlow
from freshview.runtime import engine as engine_module

VIEWS = {
    "join + aggregate": "SELECT c.region, COUNT(*) AS n, SUM(o.v) AS s, MIN(o.v) AS lo FROM o JOIN c ON o.c = c.id "
                        "GROUP BY c.region",
    "left join": "SELECT o.id, c.region FROM o LEFT JOIN c ON o.c = c.id",
    "global aggregate": "SELECT COUNT(*) AS n, SUM(v) AS s, AVG(v) AS a FROM o",
    "distinct": "SELECT DISTINCT c, v FROM o WHERE v IS NOT NULL",
    "window": "SELECT id, c, v, ROW_NUMBER() OVER (PARTITION BY c ORDER BY v, id) AS r FROM o",
    "top-k": "SELECT id, v FROM o ORDER BY v DESC NULLS LAST, id LIMIT 5",
    "anti join": "SELECT id FROM o WHERE NOT EXISTS (SELECT 1 FROM c WHERE c.id = o.c AND c.region = 'north')",
    "union and count distinct": "SELECT c, COUNT(DISTINCT v) AS d FROM (SELECT c, v FROM o UNION ALL "
                                "SELECT id, 1 FROM c) t GROUP BY c",
}


def _rows(flow: IncrementalFlow, name: str) -> list:
    return sorted(flow.snapshot(name).to_pylist(), key=repr)


def _tables(rng: random.Random, n: int) -> dict[str, pa.Table]:
    orders = {"id": list(range(n)), "c": [rng.choice([None, *range(9)]) for _ in range(n)],
              "v": [rng.choice([None, 1, 2, 2, 5, 8]) for _ in range(n)], "_weight": [1] * n}
    customers = {"id": list(range(8)), "region": [rng.choice(["north", "south", None]) for _ in range(8)],
                 "_weight": [1] * 8}
    return {"o": pa.table(orders), "c": pa.table(customers)}


def _flow(tmp_path, name: str) -> IncrementalFlow:
    flow = IncrementalFlow(state_dir=tmp_path / name, execution="local", first_computation="local")
    flow.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
    flow.register_source("c", "id INT, region TEXT", primary_key=["id"])
    return flow


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_a_first_computation_in_chunks_is_the_one_in_one_step(tmp_path, monkeypatch, caplog, view):
    rng = random.Random(sorted(VIEWS).index(view))
    chunked, whole = _flow(tmp_path, "chunked"), _flow(tmp_path, "whole")
    for flow in (chunked, whole):
        for source, rows in _tables(random.Random(5), 120).items():
            flow.tick(source, rows)
    gone = whole.snapshot("o", weighted=True).slice(0, 7)  # deletions in a later run: a row and its retraction
    for flow in (chunked, whole):
        flow.tick("o", gone.set_column(3, "_weight", pa.array([-1] * 7, pa.int64())))
    chunked.engine.first_chunk_bytes = 0
    monkeypatch.setattr(engine_module, "FIRST_CHUNK_ROWS", 16)
    with caplog.at_level(logging.INFO, logger="freshview"):
        chunked.register_view("v", VIEWS[view])
    assert "its inputs in chunks of 16 rows" in caplog.text
    whole.register_view("v", VIEWS[view])
    assert _rows(chunked, "v") == _rows(whole, "v")
    next_id = 1000
    for _ in range(8):  # then steps: the same state, the same results
        ids = [next_id + i for i in range(3)]
        next_id += 3
        change = {"o": pa.table({"id": ids, "c": [rng.choice([None, 1, 2]) for _ in ids],
                                 "v": [rng.choice([None, 2, 9]) for _ in ids], "_weight": [1] * 3})}
        for flow in (chunked, whole):
            flow.tick(change)
        assert _rows(chunked, "v") == _rows(whole, "v")


def test_empty_inputs_still_make_the_first_step(tmp_path):
    flow = _flow(tmp_path, "empty")
    flow.engine.first_chunk_bytes = -1
    flow.register_view("v", VIEWS["global aggregate"])
    assert _rows(flow, "v") == [{"n": 0, "s": None, "a": None}]
