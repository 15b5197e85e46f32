"""service.outage: which faults are ridden out and how, the back-off, and one notice per change of state."""

from __future__ import annotations

import logging
import random

import pytest

from freshview.connectors.base import PositionLost, StreamError
from freshview.errors import ConnectionLost, DiskFull, FreshviewError, Permanent, StateError, StateTooNew
from freshview.service import outage
from freshview.service.outage import Backoff, Health, Kind, State, clock, failed, kind_of, recovered

T0 = 1_800_000_000.0


@pytest.mark.parametrize("exc, kind", [
    (ConnectionLost("server closed the connection unexpectedly"), Kind.LOST),
    (StreamError("replication stream ended"), Kind.LOST),
    (PositionLost("replication slot freshview_db is gone"), Kind.POSITION_LOST),
    (DiskFull("No space left on device"), Kind.DISK_FULL),
    (Permanent("password authentication failed"), None),
    (StateTooNew("state of a newer freshview"), None),
    (StateError("cannot read state"), None),
    (FreshviewError("a bug"), None),
    (RuntimeError("a bug"), None),
])
def test_faults_sort_into_what_the_service_does(exc, kind):
    assert kind_of(exc) is kind


def test_the_backoff_retries_at_once_then_doubles_up_to_its_cap():
    assert [Backoff(0.25, 2.0).delay(n) for n in range(1, 9)] == [0, 0.25, 0.5, 1, 2, 2, 2, 2]
    assert Backoff(0.1, 0.3).delay(50) == 0.3


def test_a_lost_connection_says_so_once_then_once_more_when_the_database_is_really_unreachable():
    h, notice = failed(Health(State.RUNNING), Kind.LOST, "terminating connection", T0)
    assert h.state is State.RECONNECTING and h.failures == 1 and notice.level == logging.WARNING
    assert "lost the connection" in notice.message and "terminating connection" in notice.message
    h, notice = failed(h, Kind.LOST, "Connection refused", T0 + 0.1)
    assert h.state is State.UNREACHABLE and h.failures == 2 and h.since == T0
    assert notice.message == f"database unreachable since {clock(T0)}, retrying (Connection refused)"
    for i in range(5):
        h, notice = failed(h, Kind.LOST, "Connection refused", T0 + 1 + i)
        assert notice is None and h.failures == 3 + i and h.since == T0
    h, notice = recovered(h, T0 + 23.4)
    assert h == Health(State.RUNNING) and notice.level == logging.INFO
    assert notice.message == f"database reachable again after 23.4 s (unreachable since {clock(T0)}); resuming"
    assert recovered(h, T0 + 30) == (h, None)


def test_a_connection_back_at_the_first_retry_is_a_reconnect():
    h, _ = failed(Health(State.RUNNING), Kind.LOST, "killed", T0)
    h, notice = recovered(h, T0 + 0.2)
    assert h.state is State.RUNNING and notice.message == "reconnected after 0.2 s"


def test_a_database_unreachable_at_start_is_unreachable_from_the_first_failure():
    h, notice = failed(Health(), Kind.LOST, "Connection refused", T0)
    assert h.state is State.UNREACHABLE and h.since == T0 and clock(T0) in notice.message
    assert recovered(Health(), T0)[1] is None  # starting normally says nothing
    assert "reachable again" in recovered(h, T0 + 3)[1].message


def test_a_full_disk_pauses_once_and_resumes_once():
    h, notice = failed(Health(State.RUNNING), Kind.DISK_FULL, "No space left on device", T0)
    assert h.state is State.DISK_FULL and h.connected and "stepping paused" in notice.message
    assert clock(T0) in notice.message
    h2, again = failed(h, Kind.DISK_FULL, "No space left on device", T0 + 2)
    assert again is None and h2.failures == 2 and h2.since == T0
    h3, notice = recovered(h2, T0 + 60)
    assert h3.state is State.RUNNING and "room again after 60.0 s" in notice.message
    # the database going away meanwhile is a new trouble, said as such
    h4, notice = failed(h2, Kind.LOST, "server closed the connection", T0 + 3)
    assert h4.state is State.RECONNECTING and not h4.connected and "lost the connection" in notice.message


def test_a_lost_position_is_said_each_time_and_changes_no_state():
    for state in State:
        h = Health(state, T0, 3)
        after, notice = failed(h, Kind.POSITION_LOST, "slot gone", T0 + 1)
        assert after == h and "lost the stream's position (slot gone)" in notice.message


def test_a_notice_comes_exactly_with_each_change_of_state():
    rng = random.Random(5)
    h, now = Health(), T0
    for _ in range(2000):
        now += rng.uniform(0, 3)
        if rng.random() < 0.3:
            after, notice = recovered(h, now)
        else:
            after, notice = failed(h, rng.choice([Kind.LOST, Kind.DISK_FULL]), "x", now)
        starting = h.state is State.STARTING and after.state is State.RUNNING
        assert (notice is not None) == (after.state is not h.state and not starting), (h, after, notice)
        if after.state is not State.RUNNING:
            assert after.failures >= 1 and after.since is not None and after.since <= now
        h = after


def test_reasons_are_one_short_line():
    assert outage.reason(ConnectionLost("server closed\n\tthe connection")) == "server closed the connection"
    assert outage.reason(RuntimeError()) == "RuntimeError"
    assert len(outage.reason(RuntimeError("x" * 1000))) == 300
