"""Vector stores attached to a flow's views and sources (``IncrementalFlow.attach_vector_sink``).

A sink (``freshview.vector``: pgvector, LanceDB, or anything with ``open``/``replace``/``apply``/
``close``) is filled with the current rows when attached, then receives each committed step's
change of its view or source, after the commit (as watches do; with a flush interval, a view's
changes when they are released).  A sink that fails is detached and keeps its error on its handle
(``VectorSinkHandle.error``); the flow's step stays committed.  Attachments are not part of the
flow's state: after a restart, attach again (the store is refilled, so it is exact again).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pyarrow as pa

from freshview.schema import SqlType

log = logging.getLogger("freshview.vector")


@dataclass(eq=False)
class VectorSinkHandle:
    """One attachment: the view or source, the sink, what it has done, and its error if it failed."""

    name: str
    sink: Any
    columns: tuple[tuple[str, SqlType], ...]
    key: tuple[str, ...]
    steps: int = 0
    rows: int = 0
    error: BaseException | None = None
    detached: bool = field(default=False)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.detached


class VectorSinks:
    def __init__(self) -> None:
        self.handles: dict[str, list[VectorSinkHandle]] = {}

    def attach(self, name: str, sink: Any, columns: Sequence[tuple[str, SqlType]], key: Sequence[str],
               rows: pa.Table) -> VectorSinkHandle:
        handle = VectorSinkHandle(name, sink, tuple(columns), tuple(key))
        sink.open(name, handle.columns, handle.key)
        try:
            sink.replace(rows)
        except BaseException:
            sink.close()
            raise
        handle.rows = rows.num_rows
        self.handles.setdefault(name, []).append(handle)
        return handle

    def publish(self, name: str, delta: pa.Table, step: int) -> None:
        """A committed change of ``name`` (named columns + ``_weight``) to each of its sinks."""
        for handle in list(self.handles.get(name, [])):
            try:
                handle.sink.apply(delta, step)
                handle.steps += 1
                handle.rows += delta.num_rows
            except Exception as exc:  # the step is committed: detach, keep the error
                log.error("vector sink of %s failed at step %s and is detached: %s", name, step, exc)
                handle.error = exc
                self.detach(handle)

    def detach(self, handle: VectorSinkHandle) -> None:
        sinks = self.handles.get(handle.name, [])
        if handle in sinks:
            sinks.remove(handle)
            if not sinks:
                del self.handles[handle.name]
        handle.detached = True
        try:
            handle.sink.close()
        except Exception as exc:  # pragma: no cover - closing a broken connection
            log.warning("closing the vector sink of %s: %s", handle.name, exc)

    def detach_all(self, name: str) -> None:
        for handle in list(self.handles.get(name, [])):
            self.detach(handle)

    def refill(self, rows_of: Callable[[str], pa.Table | None]) -> None:
        """After the flow's state was replaced (``restore``): refill every sink, detach those whose
        view or source is gone."""
        for handle in [h for hs in self.handles.values() for h in hs]:
            rows = rows_of(handle.name)
            try:
                if rows is None:
                    raise LookupError(f"{handle.name!r} is not in the restored flow")
                handle.sink.replace(rows)
            except Exception as exc:
                handle.error = exc
                self.detach(handle)

    def close(self) -> None:
        for handle in [h for hs in self.handles.values() for h in hs]:
            self.detach(handle)

    def __contains__(self, name: str) -> bool:
        return name in self.handles
