"""IncrementalFlow's clock for time-based views: one instant per step, never backwards, due times, resume."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from freshview import IncrementalFlow
from freshview.errors import FreshviewError

T0 = dt.datetime(2026, 3, 1, 12, 0)


def _rows(ids, stamps) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int32()), "ts": pa.array(stamps, pa.timestamp("us")),
                     "_weight": pa.array([1] * len(ids), pa.int64())})


def _ids(flow, view: str) -> list:
    return sorted(flow.snapshot(view).column("id").to_pylist())


def _flow(tmp_path, clock, **kw) -> IncrementalFlow:
    return IncrementalFlow(state_dir=tmp_path / "state", execution="local", first_computation="local",
                           clock=clock, **kw)


def test_rows_leave_on_time_and_the_state_resumes_with_its_schedule(tmp_path):
    now = [T0]
    flow = _flow(tmp_path, lambda: now[0])
    flow.register_source("ev", "id INT, ts TIMESTAMP")
    flow.register_view("recent", "SELECT id FROM ev WHERE ts > now() - interval '1 day'")
    flow.register_view("future", "SELECT id FROM ev WHERE ts <= now()")
    flow.tick("ev", _rows([1, 2, 3, 4], [T0 - dt.timedelta(hours=1), T0 - dt.timedelta(hours=23),
                                          T0 + dt.timedelta(hours=2), None]))
    assert _ids(flow, "recent") == [1, 2, 3] and _ids(flow, "future") == [1, 2]
    assert flow.next_due() == (T0 + dt.timedelta(hours=1)).replace(tzinfo=dt.timezone.utc).timestamp()
    now[0] = T0 + dt.timedelta(hours=1)  # exactly row 2's bound: ts > now - 1 day is false from then on
    flow.advance()
    assert _ids(flow, "recent") == [1, 3]
    flow.close()

    now[0] = T0 + dt.timedelta(hours=3)
    flow = _flow(tmp_path, lambda: now[0])  # reopened: the schedule is in the state
    assert _ids(flow, "recent") == [1, 3]
    summary = flow.advance()
    assert _ids(flow, "recent") == [1, 3] and _ids(flow, "future") == [1, 2, 3]
    assert summary.rows_in == 0 and summary.rows_out == 1
    now[0] = T0 + dt.timedelta(days=2)
    flow.advance()
    assert _ids(flow, "recent") == [] and flow.next_due() is None
    flow.close()


def test_one_instant_per_step_and_a_clock_set_back_is_held(tmp_path):
    reads, now = [], [T0]

    def clock():
        reads.append(now[0])
        return now[0]

    flow = _flow(tmp_path, clock)
    flow.register_source("ev", "id INT, ts TIMESTAMP")
    flow.register_view("a", "SELECT id FROM ev WHERE ts <= now()")
    flow.register_view("b", "SELECT id FROM ev WHERE ts > localtimestamp")
    reads.clear()
    flow.tick("ev", _rows([1], [T0 + dt.timedelta(minutes=1)]))
    assert len(reads) == 1  # both views stepped at the same instant
    now[0] = T0 + dt.timedelta(minutes=2)
    flow.advance()
    assert _ids(flow, "a") == [1] and _ids(flow, "b") == []
    now[0] = T0  # the clock goes back: the step keeps the last step's time
    flow.advance()
    assert _ids(flow, "a") == [1] and _ids(flow, "b") == []
    flow.close()


def test_the_clock_may_return_seconds_and_a_bad_reading_is_a_clear_error(tmp_path):
    flow = _flow(tmp_path, lambda: "noon")
    flow.register_source("ev", "id INT, ts TIMESTAMP")
    with pytest.raises(FreshviewError, match="the clock returned 'noon'"):
        flow.tick("ev", _rows([1], [T0]))
    flow.close()
    flow = IncrementalFlow(execution="local", first_computation="local", clock=lambda: 1_772_366_400.0)
    flow.register_source("ev", "id INT, ts TIMESTAMP")
    flow.register_view("a", "SELECT id FROM ev WHERE ts <= now()")
    flow.tick("ev", _rows([1, 2], [dt.datetime(2026, 3, 1, 11, 59), dt.datetime(2026, 3, 1, 12, 1)]))
    assert _ids(flow, "a") == [1]
    flow.close()


def test_a_clock_set_back_across_a_restart_is_held_at_the_last_step(tmp_path):
    now = [T0]
    flow = _flow(tmp_path, lambda: now[0])
    flow.register_source("ev", "id INT, ts TIMESTAMP", primary_key=["id"])
    flow.register_view("a", "SELECT id FROM ev WHERE ts <= now() AND ts > now() - interval '1 hour'")
    flow.tick("ev", _rows([1], [T0 - dt.timedelta(minutes=30)]))
    now[0] = T0 + dt.timedelta(minutes=10)
    flow.advance()
    flow.close()
    now[0] = T0 - dt.timedelta(hours=2)  # reopened with a clock two hours behind
    flow = _flow(tmp_path, lambda: now[0])
    flow.tick("ev", pa.table({"id": pa.array([1, 2], pa.int32()),
                              "ts": pa.array([T0 - dt.timedelta(minutes=30), T0 - dt.timedelta(minutes=5)],
                                             pa.timestamp("us")), "_weight": pa.array([-1, 1], pa.int64())}))
    assert _ids(flow, "a") == [2]  # at the last step's time (T0 + 10 min), not two hours before
    now[0] = T0 + dt.timedelta(minutes=56)
    flow.advance()
    assert _ids(flow, "a") == []  # row 1's schedule was cancelled by its delete: no ghost row
    assert flow.next_due() is None
    flow.close()
