"""An enum value whose label the view's enum type lacks (added by ALTER TYPE ... ADD VALUE after the view
was created) stops the step with an error under both executors: its declared order is unknown, and a
silently wrong MIN/MAX or ORDER BY is not an option."""

from __future__ import annotations

import pyarrow as pa
import pytest

from freshview.runtime.cost import EXECUTORS


@pytest.mark.parametrize("execution", EXECUTORS)
def test_an_unknown_enum_label_is_an_error(make_flow, execution):
    flow = make_flow(execution=execution)
    flow.register_source("t", "id INT, m mood AS ENUM ('zen', 'sad', 'ok')", primary_key=["id"])
    flow.register_view("lo", "SELECT MIN(m) AS lo, MAX(m) AS hi FROM t")
    flow.tick("t", pa.table({"id": pa.array([1, 2, 3], pa.int32()), "m": ["ok", None, "zen"],
                             "_weight": pa.array([1, 1, 1], pa.int64())}))
    assert flow.snapshot("lo").to_pylist() == [{"lo": "zen", "hi": "ok"}]
    with pytest.raises(Exception, match="ALTER TYPE"):
        flow.tick("t", pa.table({"id": pa.array([4], pa.int32()), "m": ["happy"], "_weight": pa.array([1], pa.int64())}))
