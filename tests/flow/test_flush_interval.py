"""IncrementalFlow(flush_interval=...): a view's changes are held back and emitted consolidated at most once
per interval (watches and before_commit alike), while its rows (snapshot, views over it) stay current."""

from __future__ import annotations

import collections
import random

import pyarrow as pa
import pytest

import freshview.flow.flow as flow_module
from freshview.errors import FreshviewError
from freshview.flow.flow import flush_due, parse_interval


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(flow_module.time, "monotonic", c.monotonic)
    return c


def rows(table: pa.Table) -> collections.Counter:
    cols = [c.to_pylist() for c in table.columns]
    out: collections.Counter = collections.Counter()
    for r in zip(*cols):
        *values, w = r if "_weight" in table.column_names else (*r, 1)
        out[tuple(values)] += w
    return +out


def add(total: collections.Counter, delta: pa.Table) -> None:
    for r in zip(*(c.to_pylist() for c in delta.columns)):
        total[tuple(r[:-1])] += r[-1]


@pytest.mark.parametrize("execution", ["local", "spark"])
def test_changes_are_consolidated_per_interval_and_add_up(make_flow, clock, execution):
    flow = make_flow(execution=execution, flush_interval="1 second")
    flow.register_source("t", "id INT, g INT, v INT", primary_key=["id"])
    flow.register_view("sums", "SELECT g, SUM(v) AS s FROM t GROUP BY g")
    flow.register_view("big", "SELECT g FROM sums WHERE s > 10")  # reads the current rows of sums
    watch = flow.watch_output("sums")
    committed: list[dict] = []
    emitted: collections.Counter = collections.Counter()
    rng = random.Random(5)
    live: dict[int, tuple] = {}
    steps = 6 if execution == "spark" else 25
    for step in range(steps):
        clock.now += rng.choice([0.1, 0.2, 0.3, 1.5])
        delta = []
        for _ in range(rng.randint(1, 4)):
            i = rng.randint(1, 12)
            if i in live:
                delta.append((*live.pop(i), -1))
            else:
                live[i] = (i, rng.randint(1, 3), rng.randint(-5, 9))
                delta.append((*live[i], 1))
        table = pa.table({"id": pa.array([d[0] for d in delta], pa.int32()), "g": pa.array([d[1] for d in delta], pa.int32()),
                          "v": pa.array([d[2] for d in delta], pa.int32()), "_weight": [d[3] for d in delta]})
        flow.tick("t", table, before_commit=lambda changes: committed.append((clock.now, dict(changes))))
        expected_big = {(g,) for (g, s) in rows(flow.snapshot("sums")) if s is not None and s > 10}
        assert set(rows(flow.snapshot("big"))) == expected_big  # views over a held view stay exact
    times = []
    for batch in watch.poll():
        add(emitted, batch.table)
        times.append(batch.step)
    flushed = flow.flush()
    if "sums" in flushed:
        add(emitted, flushed["sums"])
    for batch in watch.poll():
        pass
    assert +emitted == rows(flow.snapshot("sums"))  # everything emitted adds up to the view
    held = [at for at, c in committed if "sums" not in c]
    sent = [at for at, c in committed if "sums" in c]
    assert held, "no step was held back"
    assert all(b - a >= 1.0 for a, b in zip(sent, sent[1:])), sent  # at most once per interval
    assert len(times) == len(sent)  # the watch saw what before_commit saw


def test_nothing_is_held_without_an_interval(make_flow):
    flow = make_flow(execution="local")
    flow.register_source("t", "id INT, v INT", primary_key=["id"])
    flow.register_view("v", "SELECT v FROM t")
    assert flow.flush() == {}
    w = flow.watch_output("v")
    flow.tick("t", pa.table({"id": pa.array([1], pa.int32()), "v": pa.array([2], pa.int32()), "_weight": [1]}))
    assert len(w.poll()) == 1


def test_held_changes_survive_a_restart(make_flow, clock, tmp_path):
    state = tmp_path / "s"
    flow = make_flow(execution="local", state_dir=state, flush_interval=60)
    flow.register_source("t", "id INT, v INT", primary_key=["id"])
    flow.register_view("v", "SELECT v FROM t")
    one = pa.table({"id": pa.array([1], pa.int32()), "v": pa.array([2], pa.int32()), "_weight": [1]})
    two = pa.table({"id": pa.array([2], pa.int32()), "v": pa.array([3], pa.int32()), "_weight": [1]})
    flow.tick("t", one)  # emitted at once (nothing emitted yet)
    clock.now += 1
    flow.tick("t", two)  # held
    flow.close()
    again = make_flow(execution="local", state_dir=state, flush_interval=60)
    assert rows(again.flush()["v"]) == collections.Counter({(3,): 1})


def test_intervals_are_read_and_checked():
    assert parse_interval("1 second") == 1 and parse_interval("500 ms") == 0.5 and parse_interval(2) == 2
    assert parse_interval("1 hour") == 3600 and parse_interval("1 day") == 86400 and parse_interval(None) is None
    with pytest.raises(FreshviewError, match="cannot read the interval"):
        parse_interval("soon")
    assert flush_due(10, None, 5, False) and flush_due(10, 5, 5, False) and not flush_due(10, 6, 5, False)
    assert flush_due(10, 9.9, 5, True)
