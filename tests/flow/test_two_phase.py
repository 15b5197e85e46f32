"""IncrementalFlow.prepare: the flow's two-phase step (flow/step.py) over the engine's.

Watches and vector sinks see a step only once it commits; an abort puts the flow back exactly (step,
counters, connector meta, the seen sets); ``tick(before_commit=...)`` is the same path; a change may be
given by key (``SourceChange``), equal to its weighted form.  No Spark: sources and in-process views.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from freshview import IncrementalFlow
from freshview.errors import DeltaError, StateError
from freshview.flow import SourceChange

TOTALS = "SELECT c, SUM(v) AS s FROM t GROUP BY c"


@pytest.fixture
def flow(tmp_path):
    f = IncrementalFlow(state_dir=tmp_path / "f", execution="local", first_computation="local")
    f.register_source("t", "k INT, c INT, v INT", primary_key=["k"])
    f.register_source("d", "x INT", dedup=True)
    f.register_view("totals", TOTALS)
    yield f
    f.close()


def t(rows, weight=1):
    return pa.table({"k": pa.array([r[0] for r in rows], pa.int32()), "c": pa.array([r[1] for r in rows], pa.int32()),
                     "v": pa.array([r[2] for r in rows], pa.int32()), "_weight": [weight] * len(rows)})


def d(xs):
    return pa.table({"x": pa.array(xs, pa.int32()), "_weight": [1] * len(xs)})


def totals(flow):
    return sorted((r["c"], r["s"]) for r in flow.snapshot("totals").to_pylist())


def test_watches_see_a_step_once_it_commits_and_an_abort_changes_nothing(flow):
    flow.tick({"t": t([(1, 1, 5)]), "d": d([1])})
    watch = flow.watch_output("totals")
    before = (flow.step, flow.metrics(), totals(flow), flow.get_meta("position"))
    step = flow.prepare({"t": t([(2, 1, 7)]), "d": d([2])})
    step.set_meta("position", "p2")
    assert step.outputs["totals"].column_names == ["c", "s", "_weight"] and step.step == 2
    assert watch.poll() == []
    with pytest.raises(StateError, match="a prepared step is open"):
        flow.register_view("other", "SELECT k FROM t")
    step.abort()
    assert (flow.step, flow.metrics(), totals(flow), flow.get_meta("position")) == before
    assert watch.poll() == []
    with flow.prepare({"t": t([(2, 1, 7)]), "d": d([2])}) as step:
        step.set_meta("position", "p2")
        summary = step.commit()
    assert summary.step == 2 and summary.duration_ms > 0 and flow.get_meta("position") == "p2"
    assert [b.step for b in watch.poll()] == [2] and totals(flow) == [(1, 12)]
    assert flow.metrics()["dedup_recorded_total"] == 2  # the aborted step recorded no digest

    def fail(outputs):
        raise RuntimeError("the result write failed")
    with pytest.raises(RuntimeError, match="result write"):
        flow.tick("t", t([(3, 2, 1)]), before_commit=fail)
    assert flow.step == 2 and totals(flow) == [(1, 12)] and watch.poll() == []


def test_a_change_by_key_equals_its_weighted_change(flow, tmp_path):
    twin = IncrementalFlow(state_dir=tmp_path / "twin", execution="local", first_computation="local")
    try:
        twin.register_source("t", "k INT, c INT, v INT", primary_key=["k"])
        twin.register_view("totals", TOTALS)
        for f in (flow, twin):
            f.tick("t", t([(1, 1, 5), (2, 1, 7), (3, 2, 1)]))
        new = t([(1, 2, 6)]).drop_columns(["_weight"])
        summary = flow.tick({"t": SourceChange(upserts=new, deletes=pa.table({"k": pa.array([3], pa.int32())}))})
        twin.tick("t", pa.concat_tables([t([(1, 1, 5), (3, 2, 1)], -1), t([(1, 2, 6)])]))
        assert summary.rows_in == 3 and totals(flow) == totals(twin) == [(1, 7), (2, 6)]
        assert flow.snapshot("t").equals(twin.snapshot("t").sort_by("k"))
        with pytest.raises(DeltaError, match="dedup=True: its changes are weighted rows"):
            flow.tick("d", SourceChange(truncate=True))
    finally:
        twin.close()
