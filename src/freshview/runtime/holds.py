"""The flush interval: a view's emitted changes held back and released consolidated, at most every so often.

With ``flush_interval`` set, a step's view changes do not go out at once: each is added to what the
view holds (the arrangement ``view/<name>/pending``, written inside the step's transaction, so it
commits and rolls back with the step), and a view's held change goes out, consolidated (an insert
and its delete cancel), when ``flush_due`` (pure) says so: never emitted yet, or ``interval`` seconds
since it last went out, or forced (``flush()``).  The view's own state (its integrate) is never held:
only what callers see of its changes.  ``held`` and ``last`` are the in-memory part: which views hold
something (read back from the store on opening) and when each last emitted (monotonic time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

import pyarrow as pa

from freshview.algebra.batch import consolidate, negate
from freshview.circuit import arrangements
from freshview.runtime.state.layout import Layout

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore

__all__ = ["Holds", "flush_due"]


def flush_due(now: float, last: float | None, interval: float, force: bool) -> bool:
    """Whether a view's held-back change goes out now: forced, never emitted yet, or ``interval`` passed."""
    return force or last is None or now - last >= interval


@dataclass
class Holds:
    """What the views hold back between flushes (module docstring)."""

    interval: float
    held: set[str] = field(default_factory=set)  # views with a held-back change
    last: dict[str, float] = field(default_factory=dict)  # view -> when it last emitted (monotonic)

    def load(self, store: StateStore, views: Iterable[str]) -> None:
        """On opening: the views whose pending arrangement holds rows."""
        self.held = {v for v in views if store.has_arrangement(arrangements.view_pending(v))
                     and store.count(arrangements.view_pending(v))}

    def saved(self) -> tuple[set[str], dict[str, float]]:
        return set(self.held), dict(self.last)

    def restore(self, saved: tuple[set[str], dict[str, float]]) -> None:
        self.held, self.last = saved

    def hold(self, store: StateStore, outputs: dict[str, pa.Table], views: dict[str, pa.Schema], now: float,
             force: bool) -> dict[str, pa.Table]:
        """Inside a step's transaction: add ``outputs`` (per view, the copy's columns + ``_weight``) to
        what is held, and take out (consolidated) what is due.  ``views``: every view, in order, with
        its rows' schema (without ``_weight``)."""
        emitted: dict[str, pa.Table] = {}
        for name, schema in views.items():
            out = outputs.get(name)
            if out is None and name not in self.held:
                continue
            pending = arrangements.view_pending(name)
            if not store.has_arrangement(pending):
                store.ensure_arrangement(pending, Layout(schema))
            if not flush_due(now, self.last.get(name), self.interval, force):
                if out is not None:
                    store.apply(pending, out)
                    self.held.add(name)
                continue
            self.held.discard(name)
            parts = [store.scan(pending)] + ([out] if out is not None else [])
            change = consolidate(pa.concat_tables([p.select(parts[0].column_names) for p in parts]))
            if parts[0].num_rows:
                store.apply(pending, negate(parts[0]))
            if change.num_rows:
                emitted[name] = change
                self.last[name] = now
        return emitted
