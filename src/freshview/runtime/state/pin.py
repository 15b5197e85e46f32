"""A pinned version of an arrangement: its committed runs at one moment, readable from another thread.

Runs are immutable (``runs``): a step appends new ones and a merge swaps several for one, each by
replacing the spine's tuple, never by changing a run.  So the tuple taken between two steps
(``SpineStateStore.committed_runs``) stays the arrangement's content at that moment, whatever commits
or merges later, and a population (``service.population``) can read it in its own thread while the
loop keeps stepping, or take it into its own store without copying a row (``SpineStateStore.adopt_runs``
links the run files: ``Engine.adopt_source``).  (A run file a later checkpoint deletes stays readable:
it is memory-mapped; ``adopt_runs`` then takes its rows as an in-memory run.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from freshview.runtime.state import reads
from freshview.runtime.state.layout import Layout
from freshview.runtime.state.runs import Run
from freshview.runtime.state.store import SpineStateStore


@dataclass(frozen=True)
class Pinned:
    layout: Layout
    runs: tuple[Run, ...]
    directory: Path | None = None  # the store the runs belong to (their files' names are relative to it)

    @property
    def rows(self) -> int:
        """Rows stored, before the runs' weights are added up (an estimate of the rows ``scan`` returns)."""
        return sum(len(r) for r in self.runs)

    def scan(self) -> pa.Table:
        """The arrangement's weighted rows as pinned."""
        return reads.scan(self.runs, self.layout).select(self.layout.weighted_schema.names)


def pin(store: SpineStateStore, name: str) -> Pinned:
    """Arrangement ``name`` as committed now (call between steps, in the store's thread)."""
    return Pinned(*store.committed_runs(name), store.directory)
