"""Watches: subscribers to a view's changes from the next committed step on.

``Watches`` is one flow's registry (``IncrementalFlow`` and ``PartitionedIncrementalFlow`` alike): a
committed step's outputs are ``publish``ed to every watch of their view, in step order.  A ``Watch``
iterates ``DeltaBatch``es (a ``DebeziumWatch``, in ``flow.debezium``, Debezium messages).
"""

from __future__ import annotations

import threading
from typing import Iterator, Mapping

import pyarrow as pa

from freshview.algebra.batch import DeltaBatch

__all__ = ["Watch", "Watches"]


class Watch:
    """An iterator over a view's changes: one DeltaBatch per step in which it changed.

    Iteration blocks until the next change; it ends when the flow closes or
    ``timeout`` seconds pass without a change.  ``poll()`` returns what is
    pending without waiting.
    """

    def __init__(self, watches: "Watches", view: str, timeout: float | None) -> None:
        self._watches = watches
        self.view = view
        self.timeout = timeout
        self._pending: list = []
        self._cond = threading.Condition()
        self.closed = False

    def _push(self, batch: DeltaBatch) -> None:
        with self._cond:
            self._pending.append(batch)
            self._cond.notify_all()

    def _close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def poll(self) -> list:
        with self._cond:
            out, self._pending = self._pending, []
            return out

    def __iter__(self) -> Iterator:
        return self

    def __next__(self):
        with self._cond:
            if not self._pending and not self.closed:
                self._cond.wait_for(lambda: self._pending or self.closed, timeout=self.timeout)
            if self._pending:
                return self._pending.pop(0)
            raise StopIteration

    def close(self) -> None:
        """Stop receiving changes."""
        self._watches.remove(self)
        self._close()


class Watches:
    """The watches of one flow, by view."""

    def __init__(self) -> None:
        self._by_view: dict[str, list[Watch]] = {}

    def add(self, watch: Watch) -> Watch:
        self._by_view.setdefault(watch.view, []).append(watch)
        return watch

    def remove(self, watch: Watch) -> None:
        watches = self._by_view.get(watch.view, [])
        if watch in watches:
            watches.remove(watch)

    def publish(self, outputs: Mapping[str, pa.Table], step: int) -> None:
        """A committed step's changes (per view, named columns + ``_weight``) to the views' watches."""
        for name, out in outputs.items():
            batch = None
            for w in list(self._by_view.get(name, [])):
                batch = batch or DeltaBatch(out, step)
                w._push(batch)

    def close(self, view: str | None = None) -> None:
        """End the watches of ``view`` (every view's if None)."""
        names = [view] if view is not None else list(self._by_view)
        for name in names:
            for w in self._by_view.pop(name, []):
                w._close()
