"""Adopting arrangements built in another store: a population's scratch state joins the main store.

A view populated beside the stream (``service.population``) is computed in a store of its own; when it
joins, its arrangements (the view's operators and output, the copies of the tables it followed anew)
enter the main store inside the caller's transaction, so they appear with the catalog entry that uses
them, in one commit, or not at all.  Runs are immutable, so nothing is copied row by row: each
arrangement's committed runs are taken as they are (``SpineStateStore.committed_runs``), their run
files hard-linked into the main store's ``runs/`` under new names (``StateFiles.link_run``; a copy of
the file where the two directories are on different file systems) and appended to the new spine
(``SpineStateStore.adopt_runs``); the commit's one log record names the linked files.  The join costs
O(run files), whatever the state's size, once ``settle`` has put the scratch store's runs in files
(the worker does it, before the view is ready to join; runs committed after it, a few changes caught
up by the loop, travel inline in the log record like any step's).

Crash safety: the write-ahead log decides.  A kill after the links and before the commit's record
leaves files no manifest or record names: the next open deletes them (``StateFiles.recover``) and
the main store is as before; a kill after the record replays it, the links included.  A link is
another name for the same inode, so deleting the scratch directory afterwards (``shutil.rmtree``) or
a checkpoint of either store collecting its garbage never touches the other's file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from freshview.errors import StateError
from freshview.runtime.state.store import SpineStateStore


@dataclass(frozen=True)
class Adopted:
    arrangements: int
    files: int  # run files linked
    memory_runs: int  # runs held only in memory, logged inline


def settle(store: SpineStateStore) -> None:
    """Every committed run of ``store`` in a file (merges finished, a checkpoint): so its adoption links
    files.  Outside a transaction, in the thread that uses the store (a population's worker)."""
    store.export()


def adopt_arrangements(source: SpineStateStore, target: SpineStateStore, names: Iterable[str]) -> Adopted:
    """Each arrangement ``names`` of ``source`` enters ``target`` (created there with the same layout; one
    that exists in ``target`` must be empty), its runs linked (module docstring).  Inside ``target``'s
    transaction; ``source`` is not changed."""
    count = files = memory = 0
    for name in names:
        layout, runs = source.committed_runs(name)
        if target.has_arrangement(name) and target.count(name):
            raise StateError(f"state {name!r} already holds rows: it cannot be adopted")
        target.ensure_arrangement(name, layout)
        linked = target.adopt_runs(name, runs, source.directory)
        count, files, memory = count + 1, files + linked, memory + len(runs) - linked
    return Adopted(count, files, memory)
