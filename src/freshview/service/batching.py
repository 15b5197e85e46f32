"""Micro-batching: when the service stops reading and runs an engine step.  No I/O.

The service reads the replication stream up to the next source commit, tells
the ``Batch`` what arrived, and asks ``next_action`` what to do next: read
again (waiting at most so long), run the step, or go idle.  The rule:

* A lone transaction is stepped at once: after its commit the stream is
  drained of what is already readable, without waiting, and nothing more is.
* Under a burst the batch is whatever arrived while the previous step ran
  (all of it is readable at once), so latency follows the step time.
* Catching up (the newest transaction read committed more than
  ``catchup_lag_s`` ago: the stream is still replaying history) a short pause
  in the stream does not end the batch, and collecting may go on longer:
  bigger steps, for throughput.  Judged by the newest transaction, not the
  oldest: after one slow step the batch's first transactions are old, but once
  the stream has reached the present, waiting for more would only add latency.
* A batch ends only between transactions (a source transaction is never
  split), at the first commit that reaches ``max_rows`` row changes, or once
  it has been collecting for its time bound.
* Time-based views: with nothing collected, once the earliest due time of a
  view's rows (``due``, Unix seconds: ``IncrementalFlow.next_due``) has
  passed, the service steps with no source change (the rows due enter or
  leave the view); until then it reads no longer than up to that time.  A
  batch being collected is stepped as usual: its step releases them too.

Following psycopg's generators, the decision is a pure function of the batch
and the clocks, so every case is a unit test without a database.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Rule:
    """The knobs (``ServiceOptions`` carries them; see there)."""

    max_rows: int = 100_000
    max_wait_s: float = 0.1
    catchup_lag_s: float = 2.0
    catchup_wait_s: float = 5.0
    catchup_pause_s: float = 0.02
    poll_s: float = 0.1


@dataclass(frozen=True)
class Batch:
    """What has been collected for the next step (times: ``time.monotonic()``, commits: Unix seconds)."""

    transactions: int = 0
    rows: int = 0
    started: float = 0.0  # when its first transaction arrived
    newest_commit: float = 0.0  # the latest commit time among its transactions (the source server's clock)
    last_message: float = 0.0  # when the stream last delivered anything (a commit or part of a transaction)
    drained: bool = False  # the last read ended because nothing more came, not at a commit

    def add(self, rows: int, commit_time: float, now: float) -> "Batch":
        """A whole transaction arrived."""
        if self.transactions == 0:
            return Batch(1, rows, now, commit_time, now, False)
        return Batch(self.transactions + 1, self.rows + rows, self.started, max(self.newest_commit, commit_time),
                     now, False)

    def nothing_more(self, now: float, partial: bool) -> "Batch":
        """A read ended without a commit; ``partial``: part of a transaction did arrive."""
        return replace(self, drained=True, last_message=now if partial else self.last_message)


@dataclass(frozen=True)
class Read:
    """Read the stream up to the next commit, waiting at most ``timeout`` s for data (0: only what is
    readable now), and for at most ``budget`` s in all even while data keeps coming (a long
    transaction streaming in does not hold up a batch, nor requests and heartbeats)."""

    timeout: float
    budget: float = float("inf")


@dataclass(frozen=True)
class Step:
    """Run the collected transactions as one engine step."""


@dataclass(frozen=True)
class Idle:
    """Nothing to step and nothing arrived: serve requests, record the position, come back."""


STEP = Step()
IDLE = Idle()


def catching_up(batch: Batch, rule: Rule, wall: float) -> bool:
    """Whether the batch's newest transaction committed more than ``catchup_lag_s`` before ``wall``."""
    return batch.transactions > 0 and wall - batch.newest_commit > rule.catchup_lag_s


def next_action(batch: Batch, rule: Rule, now: float, wall: float, due: float | None = None) -> Read | Step | Idle:
    """What to do next with ``batch`` at monotonic time ``now`` and Unix time ``wall``; ``due``: when a
    time-based view's rows next fall due (Unix seconds), if ever."""
    if batch.transactions == 0:
        if due is not None and wall >= due:
            return STEP  # a step of no transaction: the rows due
        wait = rule.poll_s if due is None else min(rule.poll_s, due - wall)
        return IDLE if batch.drained else Read(wait, wait)
    if batch.rows >= rule.max_rows:
        return STEP
    behind = catching_up(batch, rule, wall)
    left = (rule.catchup_wait_s if behind else rule.max_wait_s) - (now - batch.started)
    if left <= 0:
        return STEP
    if not batch.drained:
        return Read(0.0, left)  # more may be readable already: take it without waiting
    if behind:
        pause = now - batch.last_message
        if pause < rule.catchup_pause_s:
            return Read(min(rule.catchup_pause_s - pause, left), left)
    return STEP
