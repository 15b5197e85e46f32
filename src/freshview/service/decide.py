"""Which incoming transactions to skip, replay or step and write.  No I/O.

Two positions are stored, each committed with what it covers:

* ``results``: in the database, in the transaction holding the result changes
  (``ResultSink.commit_step``);
* ``engine``: in the engine's state, committed by the engine's step.

A step writes the database first, then lets the engine commit, then
acknowledges its position to the source.  So ``engine <= results`` always,
and after a crash at any point:

* before the result commit: neither moved; the source re-sends the step's
  transactions (it was not acknowledged) and they are stepped and written;
* between the result commit and the engine commit: the transactions up to
  ``results`` are re-sent; the engine replays them WITHOUT writing (the
  tables already hold them), then new ones are written;
* after the engine commit, before the acknowledgement: the re-sent
  transactions are at or below ``engine``: skipped.

Replayed and written transactions never share a step, since a step either
writes its result changes or does not; a transaction that TRUNCATEs a
followed table is a step of its own (its delta is "everything goes", which
must not be netted with other transactions' changes to the same rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from freshview.connectors.base import Transaction, after


@dataclass(frozen=True)
class Positions:
    engine: Any = None  # Position | None: the last transaction in the engine's state
    results: Any = None  # Position | None: the last transaction in the result tables


@dataclass(frozen=True)
class Step:
    transactions: tuple[Transaction, ...]
    write: bool  # False: the result tables already hold these (replay into the engine only)

    @property
    def position(self) -> Any:
        """Where the step ends: stored with it, acknowledged after it."""
        return self.transactions[-1].position


def plan_steps(batch: Sequence[Transaction], at: Positions, alone: Callable[[Transaction], bool]) -> list[Step]:
    """The engine steps for a batch of transactions read in commit order (see the module docstring)."""
    steps: list[Step] = []
    group: list[Transaction] = []
    write = False
    for txn in batch:
        if not after(txn.position, at.engine):
            continue  # in the engine's state already
        writes = after(txn.position, at.results)
        if group and (alone(txn) or alone(group[-1]) or writes != write):
            steps.append(Step(tuple(group), write))
            group = []
        group.append(txn)
        write = writes
    if group:
        steps.append(Step(tuple(group), write))
    return steps


def committed(at: Positions, step: Step) -> Positions:
    """The positions once ``step`` has committed (result tables, if it wrote, then the engine)."""
    return Positions(step.position, step.position if step.write else at.results)


def position_to_record(pending: Any, at: Positions) -> Any:
    """A position reached by transactions that touched no followed table is recorded (so the source
    may free what precedes it) unless the engine is already there; None: nothing to record."""
    return pending if after(pending, at.engine) else None


def stream_start(at: Positions, follow_from: Mapping[str, Any]) -> Any:
    """Where the stream must (re)start: after the engine's position; with none yet (first start, or
    just rebuilt), at the earliest snapshot a followed table was loaded from; None: from now."""
    if at.engine is not None:
        return at.engine
    return min(follow_from.values(), default=None)
