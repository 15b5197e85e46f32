"""Sources declared by an Arrow schema with string_view / large_string columns (tpcgen-cli's and DuckDB's
Parquet read as string_view): they are text columns, and their rows flow like string columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from freshview import IncrementalFlow
from freshview.schema import WEIGHT, SqlType


@pytest.mark.parametrize("dtype", [pa.string(), pa.large_string(), pa.string_view()])
def test_string_types_are_text(dtype):
    assert SqlType.from_arrow(dtype) == SqlType("text")


def test_a_string_view_source_flows(tmp_path):
    schema = pa.schema([("k", pa.int64()), ("name", pa.string_view())])
    flow = IncrementalFlow(state_dir=tmp_path)
    flow.register_source("t", schema, primary_key=["k"])
    flow.register_view("v", "SELECT name, count(*) AS n FROM t GROUP BY name")
    rows = pa.table({"k": [1, 2, 3], "name": pa.array(["a", "b", "a"], pa.string_view()),
                     WEIGHT: pa.array([1, 1, 1], pa.int64())})
    flow.tick("t", rows)
    assert sorted(flow.snapshot("v").to_pylist(), key=lambda r: r["name"]) == [
        {"name": "a", "n": 2}, {"name": "b", "n": 1}]
