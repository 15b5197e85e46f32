"""What a population (``population``) may do next, and which changes it must catch up on.  No I/O.

A population computes a new view beside the service's loop over *pinned* inputs: each table it reads
has a pin, the position whose transactions its copy holds (a table the engine follows already: its
copy in the engine's state when the population started, i.e. the last transaction the loop had
processed; a table followed anew: the snapshot it is read from).  The loop offers the population every
transaction it processes; the population applies, of each, the changes to its tables committed after
that table's pin (``to_apply``), so when it joins at the loop's position its state is exactly the
state the engine would have computed there.  The loop may re-offer transactions after a fault (the
stream resends from the engine's position): ``offered`` drops those already taken.

Several populations run at once (``must_wait`` says which must wait for which).  Phases
(``freshview.views.phase``): ``waiting`` (for another population), ``reading`` (the pinned copies and
the snapshot), ``computing`` (the first result), ``catching up`` (the changes committed since the
pins); then ``ready``: caught up but for a few changes, waiting for the loop, which applies the rest
itself between two steps and joins the view (``may_join``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Collection, Mapping, Sequence

from freshview.connectors.base import Transaction, after
from freshview.service.following import relevant


class Phase(str, Enum):
    WAITING = "waiting"  # for another population (``must_wait``)
    READING = "reading"
    COMPUTING = "computing"
    CATCHING_UP = "catching up"
    READY = "ready"  # caught up (a few changes may remain): the loop joins it between two steps
    FAILED = "failed"


JOIN_ROWS = 10_000  # the loop joins a population with at most this many row changes left to apply


def followed_pin(processed: Any, snapshot: Any) -> Any:
    """The pin of a table the engine follows: its copy holds its snapshot and every transaction the loop
    has processed (``processed``, None: none yet)."""
    return processed if processed is not None and after(processed, snapshot) else snapshot


def offered(transactions: Sequence[Transaction], tables: frozenset[str], seen: Any) -> tuple[list[Transaction], Any]:
    """Of transactions the loop processed, in order: those not offered before (after ``seen``, the
    last position offered), restricted to the population's ``tables``; and the new ``seen``."""
    taken = []
    for txn in transactions:
        if seen is not None and not after(txn.position, seen):
            continue
        seen = txn.position
        mine = txn.restricted({t for t in (*txn.rows, *txn.truncated) if t in tables})
        if mine.rows or mine.truncated:
            taken.append(mine)
    return taken, seen


def to_apply(transactions: Sequence[Transaction], pins: Mapping[str, Any]) -> list[Transaction]:
    """The changes the population must apply: of each transaction, those to a table committed after
    its pin (a table not pinned yet, whose snapshot is not taken, is not applied: see ``pending``)."""
    out = []
    for txn in transactions:
        mine = relevant(txn, pins)
        if mine.rows or mine.truncated:
            out.append(mine)
    return out


def truncating(txn: Transaction) -> bool:
    """A TRUNCATE is applied in a step of its own (its delta is 'everything goes': ``decide.plan_steps``)."""
    return bool(txn.truncated)


def batches(transactions: Sequence[Transaction], max_rows: int) -> list[list[Transaction]]:
    """Catch-up steps: whole transactions, up to about ``max_rows`` row changes each, a TRUNCATE alone."""
    out: list[list[Transaction]] = []
    rows = 0
    for txn in transactions:
        if not out or truncating(txn) or truncating(out[-1][-1]) or rows >= max_rows:
            out.append([])
            rows = 0
        out[-1].append(txn)
        rows += txn.size
    return out


class MustWait(Exception):
    """A create that must wait for running populations (``must_wait`` says why); tried again once one ends."""


def must_wait(new: Collection[str], in_loop: bool, running: Mapping[str, Collection[str]],
              tables: Collection[str] = (), unfinished: Collection[str] = (),
              widening: Mapping[str, Collection[str]] | None = None) -> str | None:
    """Why a view may not start now, or None.  ``new``: the tables it would follow anew; ``in_loop``: it
    is created inside the loop instead (it reads another freshview view, or columns a followed table's
    copy lacks, which follows that table anew and recomputes its views); ``running``: each running
    population's view -> the tables it follows anew; ``tables``: what it reads as tables, and
    ``unfinished``: views being populated or waiting to be rebuilt (not in the engine yet: read now, one
    would be taken for a table).  Two populations never follow the same table anew (the second would
    join reading the first's copy, whose columns may differ, so it waits and then reads that copy
    pinned), and an in-loop creation waits for every population (it may follow anew a table a
    population reads pinned).  Any number of populations over disjoint new tables run at once.
    ``widening``: each running population's view -> the followed tables it reads again, wider
    (``widening``): a view reading one waits (joining first, it would be a view over the narrower copy
    that population did not compute again)."""
    early = sorted(set(tables) & set(unfinished))
    if early:
        return f"it reads {', '.join(early)}, not created yet"
    for view, theirs in sorted((widening or {}).items()):
        shared = sorted(set(tables) & set(theirs))
        if shared:
            return f"the population of {view} is reading {', '.join(shared)} again"
    if in_loop and running:
        return f"it is created inside the loop, after the populations of {', '.join(sorted(running))}"
    for view, theirs in sorted(running.items()):
        shared = sorted(set(new) & set(theirs))
        if shared:
            return f"the population of {view} is following {', '.join(shared)} anew"
    return None


def stale(since: Mapping[str, Any], follow_from: Mapping[str, Any]) -> list[str]:
    """Of the tables a population reads pinned (table -> the snapshot the engine's copy was loaded from
    when it started), those the engine no longer follows from that snapshot: followed anew meanwhile
    (DDL, a widening), so the population's copy may not be what the engine now holds.  Such a population
    starts again."""
    return sorted(t for t, s in since.items() if follow_from.get(t) != s)


def may_join(phase: Phase, queued_rows: int, join_rows: int = JOIN_ROWS) -> bool:
    """Whether the loop joins the population now (it applies the ``queued_rows`` left itself)."""
    return phase is Phase.READY and queued_rows <= join_rows


@dataclass(frozen=True)
class Progress:
    """How far a population got: what ``freshview.views``, ``freshview status`` and the metrics show."""

    phase: Phase
    rows_read: int = 0
    rows_total: int | None = None  # the tables' estimated rows (None: no estimate)
    elapsed_s: float = 0.0
    behind: int = 0  # row changes committed since the pins, not applied yet

    def text(self) -> str:
        """One line, e.g. for a CALL that timed out or a log line."""
        of = f" of ~{self.rows_total}" if self.rows_total else ""
        extra = f", {self.behind} changes to catch up" if self.phase is Phase.CATCHING_UP and self.behind else ""
        return f"{self.phase.value}: {self.rows_read} rows read{of}, {self.elapsed_s:.1f} s{extra}"
