"""What the service does while it cannot make progress: reconnect, pause, say so once.  No I/O.

Faults reach the core typed: the connectors and the state store map their
drivers' and the operating system's errors to ``errors``' classes (a
connection lost, a full disk, a permanent refusal).  ``kind_of`` sorts them
into what the core does with them (``Core._ride_out`` does the I/O):

* ``LOST`` (a connection lost, killed or timed out, the change stream broken,
  the database restarting or failing over, the network down): every
  connection is closed, the service waits ``Backoff.delay``, connects again
  and re-attaches.  Re-attaching reads both positions back (the database's,
  committed with the results, and the engine's) and ``decide.plan_steps``
  skips, replays or writes what the stream re-sends, so nothing is applied
  twice and no result moves backwards, whichever commit the fault cut off.
* ``DISK_FULL`` (the state directory has no room): the step that hit it was
  rolled back in the engine (its results may have committed: they are ahead,
  and replayed without writing); the stream is closed, so the source keeps
  everything after what the engine committed (only that was acknowledged);
  the database connection stays, with the service's status ``state disk
  full``; once the state directory has room (``files.probe_space``), the
  service re-attaches and steps again.
* ``POSITION_LOST`` (the slot or the binlog is gone): re-attach at once,
  which rebuilds every view from a new snapshot (``recovery``).
* anything else -- ``Permanent`` (bad credentials, the database dropped,
  state of a newer freshview) or an error of freshview's own -- is not a
  fault to ride out: ``run`` ends with it, and the CLI says why.

``Health`` is where the service stands; ``failed`` and ``recovered`` move it
and return the one line to log when the state changes (never at every retry):
``database unreachable since 12:03:41, retrying (…)``, ``… reachable again
after 23.4 s``.  The back-off is deterministic (no jitter: one service per
database): the first retry at once (a killed connection is back in
milliseconds), then ``first_s`` doubling up to ``cap_s``, so the service
is back at most ``cap_s`` after the database is.
"""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass, replace

from freshview.connectors.base import PositionLost, StreamError
from freshview.errors import ConnectionLost, DiskFull


class Kind(enum.Enum):
    LOST = "connection"
    DISK_FULL = "disk_full"
    POSITION_LOST = "position_lost"


def kind_of(exc: BaseException) -> Kind | None:
    """What the core does with ``exc`` (see the module docstring); None: not a fault to ride out."""
    if isinstance(exc, PositionLost):
        return Kind.POSITION_LOST
    if isinstance(exc, (ConnectionLost, StreamError)):
        return Kind.LOST
    if isinstance(exc, DiskFull):
        return Kind.DISK_FULL
    return None


@dataclass(frozen=True)
class Backoff:
    first_s: float = 0.25
    cap_s: float = 2.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row: 0 after the first, then ``first_s``
        doubling, never more than ``cap_s``."""
        if failures <= 1:
            return 0.0
        return min(self.cap_s, self.first_s * 2.0 ** (failures - 2))


class State(enum.Enum):
    STARTING = "starting"  # not connected yet since the process started
    RUNNING = "running"
    RECONNECTING = "reconnecting"  # a connection was just lost; the first retry is under way
    UNREACHABLE = "unreachable"  # retries failed: the database is down or out of reach
    DISK_FULL = "state disk full"  # stepping paused: the state directory has no room (the status shown)


@dataclass(frozen=True)
class Health:
    state: State = State.STARTING
    since: float | None = None  # Unix time the trouble began
    failures: int = 0  # failed attempts in a row (the back-off counts them)
    reason: str = ""  # the last fault, one line

    @property
    def connected(self) -> bool:
        return self.state in (State.RUNNING, State.DISK_FULL)


@dataclass(frozen=True)
class Notice:
    """One line for the log, at ``level``."""

    level: int
    message: str


def clock(t: float) -> str:
    """A Unix time as the log's wall clock (local time, seconds)."""
    return time.strftime("%H:%M:%S", time.localtime(t))


def failed(health: Health, kind: Kind, reason: str, now: float) -> tuple[Health, Notice | None]:
    """``health`` after a fault of ``kind``, and the notice if that changed the state."""
    if kind is Kind.POSITION_LOST:
        return health, Notice(logging.WARNING, f"the source lost the stream's position ({reason})")
    if kind is Kind.DISK_FULL:
        if health.state is State.DISK_FULL:
            return replace(health, failures=health.failures + 1, reason=reason), None
        return Health(State.DISK_FULL, now, 1, reason), Notice(
            logging.WARNING, f"state directory full since {clock(now)}: stepping paused, retrying ({reason})")
    if health.state in (State.RUNNING, State.DISK_FULL):
        return Health(State.RECONNECTING, now, 1, reason), Notice(
            logging.WARNING, f"lost the connection to the database ({reason}); reconnecting")
    if health.state is State.UNREACHABLE:
        return replace(health, failures=health.failures + 1, reason=reason), None
    since = health.since if health.since is not None else now  # STARTING or RECONNECTING: still out of reach
    return Health(State.UNREACHABLE, since, health.failures + 1, reason), Notice(
        logging.WARNING, f"database unreachable since {clock(since)}, retrying ({reason})")


def recovered(health: Health, now: float) -> tuple[Health, Notice | None]:
    """``health`` once the service follows the stream again (connected and attached, the state directory
    with room), and the notice if that ended a trouble."""
    if health.state is State.RUNNING:
        return health, None
    running = Health(State.RUNNING)
    if health.state is State.STARTING:
        return running, None
    took = now - (health.since if health.since is not None else now)
    if health.state is State.RECONNECTING:
        return running, Notice(logging.INFO, f"reconnected after {took:.1f} s")
    if health.state is State.UNREACHABLE:
        return running, Notice(logging.INFO, f"database reachable again after {took:.1f} s "
                                             f"(unreachable since {clock(health.since or now)}); resuming")
    return running, Notice(logging.INFO, f"state directory has room again after {took:.1f} s; stepping resumed")


def reason(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"
