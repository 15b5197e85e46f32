"""``IncrementalFlow.adopt_view``: a view computed in another flow joins this one, state and all, and then
steps exactly as if it had been registered here (checked against a flow that registered it itself)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from freshview.errors import CatalogError
from freshview.flow import IncrementalFlow

VIEW = "SELECT o.c, SUM(o.v) AS s, COUNT(*) AS n FROM o JOIN c ON o.c = c.id WHERE c.ok GROUP BY o.c"


def _rows(flow: IncrementalFlow, name: str) -> list:
    return sorted(flow.snapshot(name).to_pylist(), key=repr)


def _flows(tmp_path):
    def make(name: str) -> IncrementalFlow:
        flow = IncrementalFlow(state_dir=tmp_path / name, execution="local", first_computation="local")
        flow.register_source("c", "id INT, ok BOOLEAN", primary_key=["id"])
        return flow
    return make("main"), make("scratch"), make("reference")


def test_adopted_view_steps_like_one_registered_here(tmp_path):
    main, scratch, reference = _flows(tmp_path)
    customers = {"id": [1, 2, 3, 4], "ok": [True, False, True, None], "_weight": [1] * 4}
    orders = {"id": [1, 2, 3, 4, 5], "c": [1, 1, 2, 3, None], "v": [10, None, 5, 7, 1], "_weight": [1] * 5}
    for flow in (main, scratch, reference):
        flow.tick("c", pa.table(customers))
    for flow in (scratch, reference):
        flow.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
        flow.tick("o", pa.table(orders))
    scratch.register_view("v", VIEW)
    reference.register_view("v", VIEW)
    main.adopt_view(scratch, "v", ["o"])
    assert _rows(main, "v") == _rows(reference, "v")
    main.close()
    main = IncrementalFlow(state_dir=tmp_path / "main", execution="local")  # committed, catalog and all
    for flow in (main, reference):
        flow.tick({"o": pa.table({"id": [6, 1], "c": [3, 1], "v": [1, 10], "_weight": [1, -1]}),
                   "c": pa.table({"id": [2, 2], "ok": [False, True], "_weight": [-1, 1]})})
    assert _rows(main, "v") == _rows(reference, "v") != []
    assert _rows(main, "o") == _rows(reference, "o")


def test_refused_when_a_source_it_reads_differs(tmp_path):
    main, scratch, _ = _flows(tmp_path)
    scratch.register_source("o", "id INT, c INT, v INT", primary_key=["id"])
    main.register_source("o", "id INT, c INT", primary_key=["id"])
    scratch.register_view("v", VIEW)
    with pytest.raises(CatalogError, match="does not hold as it was read"):
        main.adopt_view(scratch, "v")
    assert "v" not in main.views
