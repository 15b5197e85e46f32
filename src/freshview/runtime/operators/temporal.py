"""The temporal filter: rows scheduled on the step's time, released when time passes their next bound.

A ``TemporalFilter`` (``plan.temporal``) passes the input's rows r for which P(r, now) is true, where
``now`` is the step's time and P changes value for r only at r's bounds b₁(r), b₂(r) ... (instants).
next(r, t) = min{ bᵢ(r) : bᵢ(r) > t } (none: P(r, ·) is constant after t).

Delta rule, at a step of time t (times are µs since the epoch, UTC, and never go back), with
``pending`` the time-ordered arrangement of (next(r, t_s), r, w) for every row r of the input's
integral (t_s: the step that scheduled it) that has a next bound:

1. release: for each (d, r, w) in ``pending`` with d ≤ t: emit w·(P(r, t) − P(r, d − 1µs))
   (P(r, d − 1µs) = P(r, t_s): no bound of r lies in [t_s, d)), and move it to next(r, t);
2. the change: for each (r, w) of ΔR emit w·P(r, t) and schedule (next(r, t), r, w).

Step 2 is linear in ΔR: a delete schedules −w under the same next bound as its insert's (moved by
step 1 to the same time), so they cancel in ``pending``; rows whose interval holds t pass at once,
future ones wait, past ones (no bound after t, P false) are dropped.  The output's integral is then
σ_{P(·, t)}(R) after every step: the rows enter and leave the view as time crosses their bounds,
by retractions scheduled from the bound, with no rescan of R.

State: ``pending``, the rows with their due time, keyed by the minute of it (``BUCKET_US``), and
``dues``, the multiset of due times (weights summed per time), ordered, whose minimum is the operator's
next due time (the engine wakes at it, ``Engine.next_due``).  A step with nothing due costs one
``extreme``; one with rows due, one ``extreme``, one lookup of the minutes from the earliest due time to
the step's time (rows of the step's own minute not yet due are read and left), one write to each
arrangement.  The input's integral is a multiset (weights ≥ 0: a filter's input), so a due time's
summed weight is zero only when it holds no row.

Both executors run this rule the same way, in-process over Arrow (the change is collected from
Spark as it is for ``Recursion``): its work is the change's rows and the rows due, not the input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.errors import StateError
from freshview.plan.temporal import TemporalFilter
from freshview.runtime.expressions.arrow import evaluate, evaluate_filter
from freshview.runtime.relation import arrow_schema, col_name, conform
from freshview.runtime.state.layout import Layout
from freshview.schema import WEIGHT

if TYPE_CHECKING:
    from freshview.circuit.nodes import TemporalState
    from freshview.runtime.state.protocol import StateStore

DUE = "due"  # µs since the epoch (UTC)
BUCKET = "minute"  # DUE // BUCKET_US: what ``pending`` is keyed by
BUCKET_US = 60_000_000
MAX_BUCKETS = 100_000  # minutes looked up at once (a step after a long pause releases in rounds)


class TemporalSchedule:
    """One ``TemporalFilter``'s operator (module docstring)."""

    def __init__(self, node: TemporalFilter, state: "TemporalState") -> None:
        self.node = node
        self.state = state
        self.schema = arrow_schema(node.input.columns)  # c0 .. + _weight
        rows = [f for f in self.schema if f.name != WEIGHT]
        self.pending_layout = Layout(pa.schema(rows + [pa.field(DUE, pa.int64()), pa.field(BUCKET, pa.int64())]),
                                     (BUCKET,))
        self.dues_layout = Layout(pa.schema([pa.field(DUE, pa.int64())]), (), order=DUE)

    def ensure_state(self, store: StateStore) -> None:
        store.ensure_arrangement(self.state.pending, self.pending_layout)
        store.ensure_arrangement(self.state.dues, self.dues_layout)

    def next_due(self, store: StateStore) -> int | None:
        """The earliest due time (µs), or None when nothing is scheduled."""
        if not store.has_arrangement(self.state.dues):
            return None
        first = store.extreme(self.state.dues, pa.table({}), "min")
        return first.column(DUE)[0].as_py() if first.num_rows else None

    def step(self, store: StateStore, change: pa.Table | None, now: int) -> pa.Table | None:
        """The output's change at step time ``now`` (µs) given the input's consolidated ``change``."""
        self.ensure_state(store)
        out: list[pa.Table] = []
        due = self.next_due(store)
        while due is not None and due <= now:
            last = min(now // BUCKET_US, due // BUCKET_US + MAX_BUCKETS)
            out.append(self._release(store, due // BUCKET_US, last, now))
            due = self.next_due(store) if last < now // BUCKET_US else None  # (rounds after a long pause)
        if change is not None and change.num_rows:
            change = conform(change, self.schema)
            out.append(change.filter(self._truth(change, now)))
            self._schedule(store, change, now)
        out = [t for t in out if t.num_rows]
        return pa.concat_tables(out) if out else None

    def _release(self, store: StateStore, first: int, last: int, now: int) -> pa.Table:
        """Release the rows due at or before ``now`` of minutes ``first`` .. ``last``."""
        minutes = pa.table({BUCKET: pa.array(np.arange(first, last + 1), pa.int64())})
        found = store.lookup(self.state.pending, minutes)
        found = found.filter(pc.less_equal(found.column(DUE), now))
        if not found.num_rows:
            raise StateError(f"internal: {self.state.dues} holds a time before {now} that {self.state.pending} does not")
        rows = conform(found, self.schema)
        w = rows.column(WEIGHT)
        old = pc.cast(self._truth(rows, pc.subtract(found.column(DUE), 1)), pa.int64())
        new = pc.cast(self._truth(rows, now), pa.int64())
        weight = pc.multiply(w, pc.subtract(new, old))
        emitted = rows.set_column(rows.schema.get_field_index(WEIGHT), WEIGHT, weight)
        emitted = emitted.filter(pc.not_equal(weight, 0))
        gone = found.set_column(found.schema.get_field_index(WEIGHT), WEIGHT, pc.negate(w))
        self._schedule(store, rows, now, gone)
        return emitted

    def _schedule(self, store: StateStore, rows: pa.Table, now: int, gone: pa.Table | None = None) -> None:
        """Put each row under its next bound after ``now`` (rows without one are not kept), and take the
        ``gone`` entries (released: weights negated) out, in one write to each arrangement."""
        due = self._next(rows, now)
        kept = rows.append_column(DUE, due).filter(pc.is_valid(due))
        minutes = np.floor_divide(kept.column(DUE).to_numpy(), BUCKET_US)
        kept = kept.append_column(BUCKET, pa.array(minutes, pa.int64()))
        writes = [t for t in (kept, gone) if t is not None and t.num_rows]
        if not writes:
            return
        names = self.pending_layout.schema.names + [WEIGHT]
        change = pa.concat_tables([t.select(names) for t in writes])
        store.apply(self.state.pending, change)
        store.apply(self.state.dues, change.select([DUE, WEIGHT]))

    def _truth(self, rows: pa.Table, at: int | pa.Array) -> pa.Array:
        """P(r, at) per row (``at``: one instant, or one per row): WHERE semantics (NULL is false)."""
        if isinstance(at, int):
            moment = pa.repeat(pa.scalar(at, pa.timestamp("us")), rows.num_rows)
        else:
            moment = pc.cast(at, pa.timestamp("us"))
        return evaluate_filter(self.node.predicate, rows.append_column(col_name(self.node.now_column), moment))

    def _next(self, rows: pa.Table, now: int) -> pa.Array:
        """next(r, now) per row (µs), NULL when no bound of r lies after ``now``."""
        later = []
        for bound in self.node.bounds:
            b = pc.cast(evaluate(bound, rows), pa.int64())
            later.append(pc.if_else(pc.greater(b, now), b, pa.scalar(None, pa.int64())))
        if not later:
            return pa.nulls(rows.num_rows, pa.int64())
        return later[0] if len(later) == 1 else pc.min_element_wise(*later, skip_nulls=True)


__all__ = ["TemporalSchedule", "DUE"]
