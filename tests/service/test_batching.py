"""The micro-batching rule, as a pure function: when to read, how long to wait, when to step."""

from __future__ import annotations

import pytest

from freshview.service import batching as b
from freshview.service.service import ServiceOptions

RULE = b.Rule(max_rows=1_000, max_wait_s=0.1, catchup_lag_s=2.0, catchup_wait_s=5.0, catchup_pause_s=0.02,
              poll_s=0.1)
WALL = 1_000_000.0  # Unix time "now"; commit times are relative to it


def fresh(rows: int = 1, at: float = 10.0, age: float = 0.001) -> b.Batch:
    """A batch holding one transaction that arrived at ``at`` and committed ``age`` s before WALL."""
    return b.Batch().add(rows, WALL - age, at)


def test_an_empty_batch_waits_for_the_stream_then_goes_idle():
    assert b.next_action(b.Batch(), RULE, 10.0, WALL) == b.Read(RULE.poll_s, RULE.poll_s)
    nothing = b.Batch().nothing_more(10.1, partial=False)
    assert b.next_action(nothing, RULE, 10.1, WALL) == b.IDLE
    # part of a transaction arrived but not its commit: still nothing to step
    assert b.next_action(b.Batch().nothing_more(10.1, partial=True), RULE, 10.1, WALL) == b.IDLE


def test_a_lone_transaction_is_stepped_as_soon_as_nothing_more_is_readable():
    batch = fresh()
    assert b.next_action(batch, RULE, 10.0, WALL) == b.Read(0.0, pytest.approx(0.1))  # drain, no waiting
    assert b.next_action(batch.nothing_more(10.0, partial=False), RULE, 10.0, WALL) == b.STEP


def test_a_burst_is_drained_into_one_batch_without_waiting():
    batch = fresh(at=10.0)
    for i in range(50):  # transactions that queued up while the previous step ran
        assert b.next_action(batch, RULE, 10.0 + i * 1e-4, WALL).timeout == 0.0
        batch = batch.add(2, WALL - 0.05, 10.0 + i * 1e-4)
    assert batch.transactions == 51 and batch.rows == 101
    drained = batch.nothing_more(10.006, partial=True)  # the next transaction is only half here
    assert b.next_action(drained, RULE, 10.006, WALL) == b.STEP


def test_a_batch_ends_at_the_commit_that_reaches_max_rows():
    batch = fresh(rows=999)
    assert b.next_action(batch, RULE, 10.0, WALL) == b.Read(0.0, pytest.approx(0.1))
    batch = batch.add(1, WALL, 10.0)
    assert b.next_action(batch, RULE, 10.0, WALL) == b.STEP
    # a single transaction bigger than the limit is one step (never split)
    assert b.next_action(fresh(rows=50_000), RULE, 10.0, WALL) == b.STEP


def test_collecting_live_is_bounded_by_max_wait_even_if_more_is_readable():
    batch = fresh(at=10.0)
    # the read itself stops at the bound, even if a long transaction keeps streaming in
    assert b.next_action(batch, RULE, 10.09, WALL) == b.Read(0.0, pytest.approx(0.01))
    assert b.next_action(batch, RULE, 10.1001, WALL) == b.STEP


def test_catching_up_bridges_short_pauses_and_collects_longer():
    behind = fresh(at=10.0, age=30.0)
    assert b.catching_up(behind, RULE, WALL) and not b.catching_up(fresh(), RULE, WALL)
    # past max_wait_s, within catchup_wait_s
    assert b.next_action(behind, RULE, 10.5, WALL) == b.Read(0.0, pytest.approx(4.5))
    paused = behind.nothing_more(10.005, partial=False)  # nothing readable 5 ms after the last commit
    action = b.next_action(paused, RULE, 10.005, WALL)
    assert isinstance(action, b.Read) and action.timeout == pytest.approx(0.015)
    # part of the next transaction arrived meanwhile: the pause restarts from there
    partial = paused.nothing_more(10.015, partial=True)
    assert b.next_action(partial, RULE, 10.02, WALL) == b.Read(pytest.approx(0.015), pytest.approx(4.98))
    # a pause as long as catchup_pause_s ends the batch
    assert b.next_action(partial, RULE, 10.0351, WALL) == b.STEP
    # and the batch's time bound holds while catching up too
    assert b.next_action(behind, RULE, 15.0, WALL) == b.STEP
    late = behind.nothing_more(14.99, partial=True)
    assert b.next_action(late, RULE, 14.995, WALL) == b.Read(pytest.approx(0.005), pytest.approx(0.005))


def test_catching_up_is_judged_by_the_newest_transaction_of_the_batch():
    batch = fresh(age=30.0).add(1, WALL - 3.0, 10.0)  # still reading history
    assert b.catching_up(batch, RULE, WALL)
    # After one slow step the batch starts with old transactions, but the stream has reached the
    # present: step as soon as nothing more is readable, do not wait for live traffic.
    batch = fresh(age=3.0).add(1, WALL - 0.001, 10.0)
    assert not b.catching_up(batch, RULE, WALL)
    assert b.next_action(batch.nothing_more(10.0, partial=False), RULE, 10.0, WALL) == b.STEP
    assert b.next_action(batch, RULE, 10.2, WALL) == b.STEP  # and the live time bound holds


def test_service_options_carry_the_rule():
    opts = ServiceOptions(max_batch_rows=7, max_batch_wait_s=0.2, catchup_lag_s=3.0, catchup_batch_wait_s=4.0,
                          catchup_pause_s=0.05, poll_s=0.3)
    assert opts.batching() == b.Rule(7, 0.2, 3.0, 4.0, 0.05, 0.3)
    assert ServiceOptions().batching() == b.Rule()


def test_a_due_time_of_a_time_based_view_is_a_step_of_no_transaction_once_passed():
    assert b.next_action(b.Batch(), RULE, 10.0, WALL, due=WALL) == b.STEP
    assert b.next_action(b.Batch().nothing_more(10.1, partial=False), RULE, 10.1, WALL, due=WALL - 5) == b.STEP
    # not yet: read no longer than up to it (nor than the poll interval)
    assert b.next_action(b.Batch(), RULE, 10.0, WALL, due=WALL + 0.03) == b.Read(pytest.approx(0.03), pytest.approx(0.03))
    assert b.next_action(b.Batch(), RULE, 10.0, WALL, due=WALL + 60) == b.Read(RULE.poll_s, RULE.poll_s)
    # a batch being collected is stepped by the usual rule (its step releases the rows due too)
    assert b.next_action(fresh(), RULE, 10.0, WALL, due=WALL - 1) == b.Read(0.0, pytest.approx(0.1))
