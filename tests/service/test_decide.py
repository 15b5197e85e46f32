"""The replay/write decisions (``decide``) at every crash point, without a database or an engine.

A small model plays the three parties the service writes to: the database
(result tables + stored position, one transaction), the engine (its state +
position, one commit) and the source (re-sends everything after the last
acknowledged position).  A crash at each point between those commits, then a
restart from what was stored, must leave every transaction applied exactly
once to the result tables and exactly once to the engine.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field

import pytest

from freshview.connectors.base import Transaction
from freshview.service import decide
from freshview.service.decide import Positions, Step, committed, plan_steps, position_to_record


@dataclass(frozen=True, order=True)
class Pos:
    value: int

    def to_text(self) -> str:
        return str(self.value)


def txn(i: int, truncated: tuple[str, ...] = ()) -> Transaction:
    return Transaction(Pos(i), float(i), {"public.t": 1}, frozenset(truncated))


def never_alone(_: Transaction) -> bool:
    return False


def positions(steps: list[Step]) -> list[tuple[list[int], bool]]:
    return [([t.position.value for t in s.transactions], s.write) for s in steps]


def test_new_transactions_are_one_written_step():
    assert positions(plan_steps([txn(1), txn(2), txn(3)], Positions(), never_alone)) == [([1, 2, 3], True)]


def test_transactions_the_engine_holds_are_skipped():
    at = Positions(Pos(2), Pos(2))
    assert positions(plan_steps([txn(1), txn(2), txn(3)], at, never_alone)) == [([3], True)]


def test_transactions_the_results_hold_are_replayed_without_writing_then_new_ones_written():
    at = Positions(Pos(1), Pos(3))  # crashed after the result commit of 2..3, before the engine's
    assert positions(plan_steps([txn(1), txn(2), txn(3), txn(4), txn(5)], at, never_alone)) == \
        [([2, 3], False), ([4, 5], True)]


def test_a_truncating_transaction_is_a_step_of_its_own():
    batch = [txn(1), txn(2, truncated=("public.t",)), txn(3), txn(4)]
    steps = plan_steps(batch, Positions(), lambda t: bool(t.truncated))
    assert positions(steps) == [([1], True), ([2], True), ([3, 4], True)]


def test_nothing_stored_yet_is_before_every_position():
    assert positions(plan_steps([txn(0)], Positions(None, None), never_alone)) == [([0], True)]


def test_committed_moves_the_results_position_only_when_the_step_wrote():
    at = Positions(Pos(1), Pos(3))
    assert committed(at, Step((txn(2), txn(3)), False)) == Positions(Pos(3), Pos(3))
    assert committed(Positions(Pos(3), Pos(3)), Step((txn(4),), True)) == Positions(Pos(4), Pos(4))


def test_a_position_without_changes_is_recorded_only_past_the_engine():
    at = Positions(Pos(5), Pos(5))
    assert position_to_record(Pos(4), at) is None and position_to_record(None, at) is None
    assert position_to_record(Pos(6), at) == Pos(6)


# ---------------------------------------------------------------- crashes, end to end in the model
class Crash(Exception):
    pass


CRASH_POINTS = ("before_results_commit", "after_results_commit", "after_engine_commit", "before_ack")


@dataclass
class World:
    """What survives a crash: the database, the engine's committed state, the source's acknowledged position."""

    results: list[int] = field(default_factory=list)  # transactions applied to the result tables, in order
    results_at: Pos | None = None
    engine: list[int] = field(default_factory=list)
    engine_at: Pos | None = None
    acked: int = 0
    log: list[Transaction] = field(default_factory=list)  # everything the source ever committed

    def resend(self) -> list[Transaction]:
        return [t for t in self.log if t.position.value > self.acked]


def run_service(world: World, batches: list[int], crash: tuple[int, str] | None) -> None:
    """One service life: read the unacknowledged transactions in batches, step each as ``decide`` says."""
    at = Positions(world.engine_at, world.results_at)
    pending = world.resend()
    count = 0
    while pending:
        batch, pending = pending[:batches[count % len(batches)]], pending[batches[count % len(batches)]:]
        for step in plan_steps(batch, at, lambda t: bool(t.truncated)):
            ids = [t.position.value for t in step.transactions]
            here = (count, "before_results_commit")
            if crash == here:
                raise Crash
            if step.write:
                world.results, world.results_at = world.results + ids, step.position
            if crash == (count, "after_results_commit"):
                raise Crash
            world.engine, world.engine_at = world.engine + ids, step.position
            if crash == (count, "after_engine_commit"):
                raise Crash
            at = committed(at, step)
            if crash == (count, "before_ack"):
                raise Crash
            world.acked = step.position.value
            count += 1


@pytest.mark.parametrize("point", CRASH_POINTS)
@pytest.mark.parametrize("at_step", [0, 1, 3])
def test_a_crash_at_any_point_applies_every_transaction_once(point, at_step):
    world = World(log=[txn(i, ("public.t",) if i == 5 else ()) for i in range(1, 13)])
    with pytest.raises(Crash):
        run_service(world, [3, 2], (at_step, point))
    run_service(world, [4], None)  # restart: the source re-sends from the acknowledged position
    expected = list(range(1, 13))
    assert world.results == expected and world.engine == expected
    assert world.results_at == world.engine_at == Pos(12)


def test_random_crash_sequences_apply_every_transaction_once():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 30)
        world = World(log=[txn(i, ("public.t",) if rng.random() < 0.1 else ()) for i in range(1, n + 1)])
        for _ in range(rng.randint(0, 4)):  # several crashes in a row, each somewhere else
            try:
                run_service(world, [rng.randint(1, 5)], (rng.randint(0, 4), rng.choice(CRASH_POINTS)))
            except Crash:
                pass
            assert world.engine_at is None or world.results_at is not None and world.engine_at <= world.results_at
        run_service(world, [rng.randint(1, 5)], None)
        assert world.results == list(range(1, n + 1)) == world.engine


def test_the_model_catches_a_wrong_rule(monkeypatch):
    """A rule that forgets the stored results position (writes replayed transactions again) is caught."""
    world = World(log=[txn(i) for i in range(1, 6)])
    with pytest.raises(Crash):
        run_service(world, [2], (0, "after_results_commit"))

    def forgetful(batch, at, alone):
        return decide.plan_steps(batch, Positions(at.engine, at.engine), alone)

    monkeypatch.setattr(sys.modules[__name__], "plan_steps", forgetful)
    run_service(world, [2], None)
    assert world.results == [1, 2, 1, 2, 3, 4, 5]  # 1 and 2 written twice


def test_the_stream_restarts_after_the_engine_else_at_the_earliest_snapshot():
    assert decide.stream_start(Positions(Pos(7), Pos(9)), {"public.t": Pos(3)}) == Pos(7)
    assert decide.stream_start(Positions(None, Pos(9)), {"public.t": Pos(5), "public.u": Pos(4)}) == Pos(4)
    assert decide.stream_start(Positions(), {}) is None
