"""A population's decisions (``populating``), without a database or an engine: which changes it takes
and applies, in which catch-up steps, and when the loop may join it."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from freshview.connectors.base import Transaction
from freshview.service import populating
from freshview.service.populating import Phase, Progress


@dataclass(frozen=True, order=True)
class Pos:
    value: int

    def to_text(self) -> str:
        return str(self.value)


def txn(i: int, rows: dict[str, int], truncated: tuple[str, ...] = ()) -> Transaction:
    return Transaction(Pos(i), float(i), rows, frozenset(truncated))


@pytest.mark.parametrize("seed", range(20))
def test_every_change_after_its_tables_pin_is_applied_once_whatever_is_offered_again(seed):
    """The loop offers the transactions it processes in batches; after a fault the stream sends some
    again (from the engine's position), and they are offered again.  The population must end holding
    each change to its tables committed after that table's pin exactly once, and nothing else."""
    rng = random.Random(seed)
    tables = ["public.followed", "public.new", "public.other"]
    stream = [txn(i, {t: rng.randint(1, 3) for t in rng.sample(tables, rng.randint(1, 3))})
              for i in range(1, 80)]
    pins = {"public.followed": Pos(rng.randint(0, 20)), "public.new": Pos(rng.randint(0, 60))}
    mine = frozenset(pins)
    seen = None
    queued: list[Transaction] = []
    at = 0
    while at < len(stream):
        batch = stream[at:at + rng.randint(1, 6)]
        taken, seen = populating.offered(batch, mine, seen)
        queued += taken
        at += len(batch)
        if rng.random() < 0.3:  # a fault: the stream resends from a position the loop had reached
            at = max(0, at - rng.randint(1, 8))
    applied = [(t.position.value, table) for t in populating.to_apply(queued, pins) for table in t.rows]
    expected = [(x.position.value, table) for x in stream for table in x.rows
                if table in pins and x.position > pins[table]]
    assert sorted(applied) == sorted(expected)
    assert len(set(applied)) == len(applied)


def test_a_table_whose_snapshot_is_not_taken_yet_is_not_applied():
    queued = [txn(1, {"public.new": 1, "public.followed": 2})]
    applied = populating.to_apply(queued, {"public.followed": Pos(0)})
    assert [dict(t.rows) for t in applied] == [{"public.followed": 2}]


def test_catch_up_steps_are_whole_transactions_and_a_truncate_is_a_step_of_its_own():
    queued = [txn(1, {"t": 3}), txn(2, {"t": 3}), txn(3, {}, ("t",)), txn(4, {"t": 1}), txn(5, {"t": 9}),
              txn(6, {"t": 1})]
    steps = [[t.position.value for t in step] for step in populating.batches(queued, max_rows=5)]
    assert steps == [[1, 2], [3], [4, 5], [6]]


def test_followed_pin_is_the_later_of_the_snapshot_and_what_the_loop_processed():
    assert populating.followed_pin(None, Pos(5)) == Pos(5)
    assert populating.followed_pin(Pos(3), Pos(5)) == Pos(5)
    assert populating.followed_pin(Pos(9), Pos(5)) == Pos(9)


def test_only_a_ready_population_is_joined():
    assert populating.may_join(Phase.READY, 0)
    assert populating.may_join(Phase.READY, populating.JOIN_ROWS)
    assert not populating.may_join(Phase.READY, populating.JOIN_ROWS + 1)
    for phase in (Phase.READING, Phase.COMPUTING, Phase.CATCHING_UP, Phase.FAILED):
        assert not populating.may_join(phase, 0)


def test_progress_text_says_how_far_it_got():
    assert Progress(Phase.READING, 1200, 5000, 3.25).text() == "reading: 1200 rows read of ~5000, 3.2 s"
    assert Progress(Phase.CATCHING_UP, 10, None, 1.0, behind=7).text() == \
        "catching up: 10 rows read, 1.0 s, 7 changes to catch up"


def test_populations_over_disjoint_new_tables_run_at_once_and_an_in_loop_create_waits_for_all():
    running = {"public.a": ["public.orders", "public.customers"], "public.b": []}
    assert populating.must_wait(["public.events"], False, running) is None
    assert populating.must_wait([], False, running) is None  # (only tables followed already: pinned copies)
    assert populating.must_wait(["public.orders"], False, running) == \
        "the population of public.a is following public.orders anew"
    assert "after the populations of public.a, public.b" in populating.must_wait([], True, running)
    assert populating.must_wait(["public.orders"], True, {}) is None  # (nothing running: created at once)
    assert populating.must_wait([], False, {}, ["public.v", "public.t"], ["public.v"]) == \
        "it reads public.v, not created yet"  # (a view being rebuilt: not a table)
    # a table read again, wider, by a running population: a view over it, even pinned, waits for that one
    assert populating.must_wait([], False, running, ["public.orders"], [], {"public.a": ["public.orders"]}) == \
        "the population of public.a is reading public.orders again"
    assert populating.must_wait([], False, running, ["public.events"], [], {"public.a": ["public.orders"]}) is None


def test_the_gil_is_handed_over_more_often_while_populations_run():
    import sys

    from freshview.service.population import Responsive
    before = sys.getswitchinterval()
    responsive = Responsive()
    try:
        responsive.update(True)
        assert sys.getswitchinterval() == pytest.approx(Responsive.SWITCH_S)
        responsive.update(True)
        responsive.update(False)
        assert sys.getswitchinterval() == pytest.approx(before)
    finally:
        sys.setswitchinterval(before)


def test_a_population_whose_pinned_table_was_followed_anew_starts_again():
    since = {"public.t": Pos(5), "public.u": Pos(7)}
    assert populating.stale(since, {"public.t": Pos(5), "public.u": Pos(7)}) == []
    assert populating.stale(since, {"public.t": Pos(9), "public.u": Pos(7)}) == ["public.t"]  # a new snapshot
    assert populating.stale(since, {"public.u": Pos(7)}) == ["public.t"]  # no longer followed
