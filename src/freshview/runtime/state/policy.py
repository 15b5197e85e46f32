"""The store's decisions, as pure functions: which runs to merge, where, and when to checkpoint.

Merging follows differential dataflow's spine: runs are kept oldest first,
and the newest run is merged into the one before it while it holds at least
``1 / RATIO`` as many rows; the merged run goes on with the run before it.
Run sizes then grow geometrically from newest to oldest, so an arrangement of
``N`` rows written ``b`` rows at a time has ``O(log(N / b))`` runs to search,
and each row is rewritten ``O(log(N / b))`` times over its life.  A cascade is
one multi-way merge, not a sequence of pairwise ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

RATIO = 2.0  # merge the newest run while it is at least 1/RATIO the size of the one before
LARGE_ROWS = 1 << 17  # merges of at least this many rows go to the thread for large merges
FILE_ROWS = 1 << 18  # runs of at least this many rows are written to their own file, not the log
MAX_RUNS = 24  # more runs than this in an arrangement: a commit waits for the merges under way

__all__ = ["FILE_ROWS", "LARGE_ROWS", "MAX_RUNS", "Merge", "RATIO", "plan_merge", "should_checkpoint"]


@dataclass(frozen=True)
class Merge:
    """Merge ``runs[start:stop]`` into one run; ``large``: by the thread for large merges."""

    start: int
    stop: int
    large: bool


def plan_merge(sizes: Sequence[int], first: int = 0, ratio: float | None = None,
               large_rows: int | None = None) -> Merge | None:
    """The merge the spine rule asks for among runs of ``sizes`` (oldest first), or None.

    Only runs from index ``first`` on may take part (older ones are being
    merged already, or are committed while the candidates are not).
    """
    ratio = RATIO if ratio is None else ratio
    large_rows = LARGE_ROWS if large_rows is None else large_rows
    n = len(sizes)
    if n - first < 2:
        return None
    start, total = n - 1, sizes[-1]
    while start > first and total * ratio >= sizes[start - 1]:
        start -= 1
        total += sizes[start]
    if start == n - 1:
        return None
    return Merge(start, n, total >= large_rows)


def should_checkpoint(log_bytes: int, memory_bytes: int, budget_bytes: int) -> bool:
    """Checkpoint when the log or the state held only in memory outgrows the cache budget."""
    return log_bytes > budget_bytes or memory_bytes > budget_bytes
