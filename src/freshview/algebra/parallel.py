"""Large vectorised work split over a few threads: numpy's and Arrow's kernels release the GIL.

Hashing, sorting by hash and reordering rows are the cost of writing a run
(a bulk load's, a first computation's join and aggregate state).  Each is a
function of one row (hashes), of one column (``take``) or of a hash range
(a sort), so its pieces are independent and the result is exactly the
serial one: ``hashing.hash_rows`` hashes row slices in parallel,
``hashing.argsort`` sorts the two halves of the hash space apart (every key
falls in one half, so the halves' sorted orders just follow each other and a
stable sort stays stable), ``take`` reorders the columns of a table in
parallel.

The work is done by *leaf* tasks on one shared pool of ``WORKERS`` threads:
a leaf never waits on the pool (a call made from a pool thread runs
serially), so callers on any thread can share it without deadlock.  Inputs
below ``MIN_ROWS`` rows stay serial (a thread hand-off costs more than it
saves).  ``FRESHVIEW_THREADS`` sets the worker count (1: everything serial);
the default is the machine's cores, at most 4.  A forked child makes its own
pool (a parent's threads do not survive ``fork``).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

import pyarrow as pa

MIN_ROWS = 1 << 18  # below this many rows work stays on the caller's thread

_PREFIX = "freshview-leaf"
_T = TypeVar("_T")
_R = TypeVar("_R")

__all__ = ["MIN_ROWS", "WORKERS", "map_leaves", "slices", "take", "workers"]


def _configured() -> int:
    raw = os.environ.get("FRESHVIEW_THREADS", "")
    if raw.strip():
        try:
            return max(1, int(raw))
        except ValueError:
            raise ValueError(f"FRESHVIEW_THREADS must be a whole number of threads, not {raw!r}") from None
    return max(1, min(4, os.cpu_count() or 1))


WORKERS = _configured()

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0


def workers(rows: int) -> int:
    """How many pieces work over ``rows`` rows is split into on this thread (1: serial)."""
    if WORKERS < 2 or rows < MIN_ROWS or threading.current_thread().name.startswith(_PREFIX):
        return 1
    return min(WORKERS, max(1, rows // (MIN_ROWS // 2)))


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix=_PREFIX)
            _pool_pid = os.getpid()
        return _pool


def map_leaves(fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``[fn(x) for x in items]``, the items on the pool's threads (the last on the caller's); ``fn``
    must not wait on the pool.  The first exception is raised after every item has finished."""
    if len(items) < 2 or threading.current_thread().name.startswith(_PREFIX):
        return [fn(x) for x in items]
    futures = [_executor().submit(fn, x) for x in items[:-1]]
    try:
        last = fn(items[-1])
    finally:
        done = [f.exception() for f in futures]  # (waits for each)
    for exc in done:
        if exc is not None:
            raise exc
    return [f.result() for f in futures] + [last]


def slices(rows: int, pieces: int) -> list[tuple[int, int]]:
    """``pieces`` contiguous (offset, length) slices covering ``rows`` rows."""
    bounds = [rows * i // pieces for i in range(pieces + 1)]
    return [(a, b - a) for a, b in zip(bounds[:-1], bounds[1:])]


def take(table: pa.Table, indices: pa.Array | Sequence[int]) -> pa.Table:
    """``table.take(indices)``, its columns taken in parallel when the result is large."""
    indices = indices if isinstance(indices, pa.Array) else pa.array(indices)
    if table.num_columns < 2 or workers(len(indices)) < 2:
        return table.take(indices)
    columns = map_leaves(lambda col: col.take(indices), table.columns)
    return pa.Table.from_arrays(columns, schema=table.schema)
