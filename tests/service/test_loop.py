"""The service's reading loop against a scripted stream: what becomes one step, and that reads end."""

from __future__ import annotations

import itertools
import time

from freshview.connectors.postgres import protocol as p
from freshview.connectors.postgres.source import PostgresStream
from freshview.service.core import Core, ServiceOptions
from tests.support import pgoutput as w

REL = p.Relation(5, "public", "t", "d", (p.Column("id", 23, -1, True),))


class Stream:
    """Stands in for ReplicationConnection: ``ready`` holds what is readable now; nothing ever arrives later."""

    def __init__(self, payloads) -> None:
        self.ready = iter(payloads)
        self.waited_s = 0.0

    def payloads(self, timeout: float):
        for payload in self.ready:
            yield memoryview(payload)
        self.waited_s += timeout  # as if it had waited the whole timeout for more


def txn(i: int, rows: int = 1) -> list[bytes]:
    now = int((time.time() - 946_684_800) * 1e6)  # commit times on the server's clock: just now
    return [w.begin(i, ts=now)] + [w.insert(REL, [str(i * 1000 + r)]) for r in range(rows)] + \
        [w.commit(10 * i, 10 * i + 5, now)]


class Flow:
    """The flow as the loop reads it: when a time-based view's rows fall due (Unix seconds), if ever."""

    def __init__(self, due: float | None = None) -> None:
        self.due = due

    def next_due(self) -> float | None:
        return self.due


def service(payloads, **options) -> tuple[Core, list]:
    svc = Core(lambda: None, "/nonexistent", options=ServiceOptions(**options))  # type: ignore[arg-type,return-value]
    svc.stream = PostgresStream(Stream([w.relation(REL)] + payloads))  # type: ignore[arg-type]
    svc.flow = Flow()  # type: ignore[assignment]
    steps: list = []
    svc._process = steps.append  # type: ignore[method-assign]
    return svc, steps


def test_what_is_readable_at_once_is_one_step():
    svc, steps = service(txn(1) + txn(2, rows=3) + txn(3))
    svc._follow_stream()
    assert [[t.position.value for t in batch] for batch in steps] == [[15, 25, 35]]
    assert steps[0][1].size == 3


def test_a_half_read_transaction_waits_for_the_next_step():
    third = txn(3)
    svc, steps = service(txn(1) + txn(2) + third[:2])
    svc._follow_stream()
    assert [[t.position.value for t in batch] for batch in steps] == [[15, 25]]
    svc.stream.repl.ready = iter(third[2:])  # the rest of it arrives
    svc._follow_stream()
    assert [t.position.value for t in steps[1]] == [35] and steps[1][0].size == 1


def test_max_batch_rows_ends_a_batch_at_a_commit():
    svc, steps = service(txn(1, rows=3) + txn(2, rows=3) + txn(3, rows=3), max_batch_rows=5)
    svc._follow_stream()
    svc._follow_stream()
    assert [[t.position.value for t in batch] for batch in steps] == [[15, 25], [35]]


def test_a_quiet_stream_steps_nothing():
    svc, steps = service([])
    started = time.monotonic()
    svc._follow_stream()
    assert steps == [] and time.monotonic() - started < 1.0


def test_a_long_transaction_streaming_in_does_not_hold_the_loop():
    # a transaction of 2M rows (without a bound the loop would read them all, for many seconds)
    endless = itertools.chain([w.begin(9)], (w.insert(REL, [str(i)]) for i in range(2_000_000)))
    svc, steps = service([], poll_s=0.05)
    svc.stream.repl.ready = itertools.chain([w.relation(REL)], endless)
    started = time.monotonic()
    svc._follow_stream()  # returns (to serve requests and heartbeats) though no commit came
    assert steps == [] and time.monotonic() - started < 2.0
    assert svc.timings["read"] > 0


def test_a_due_time_passed_with_a_quiet_stream_is_a_step_of_no_transaction():
    svc, steps = service([])
    timed: list = []
    svc._time_step = lambda: timed.append(1)  # type: ignore[method-assign]
    svc.flow.due = time.time() + 3600  # not yet: nothing
    svc._follow_stream()
    assert steps == [] and timed == []
    svc.flow.due = time.time() - 1
    svc._follow_stream()
    assert steps == [] and timed == [1]
    svc.flow.due = time.time() + 0.05  # (the step moved it on) a transaction first: the usual step
    svc.stream.repl.ready = iter(txn(1))
    svc._follow_stream()
    assert [[t.position.value for t in batch] for batch in steps] == [[15]] and timed == [1]
