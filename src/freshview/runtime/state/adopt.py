"""Adopting arrangements built in another store: a population's scratch state joins the main store.

A view populated beside the stream (``service.population``) is computed in a store of its own; when it
joins, its arrangements (the view's operators and output, the copies of the tables it followed anew)
are copied into the main store inside the caller's transaction, so they appear with the catalog entry
that uses them, in one commit, or not at all.  Each arrangement is read whole from the scratch store's
committed runs (``scan``: weighted rows) and appended as one run with the same layout.  Linking the
scratch store's immutable run files instead of copying their rows would make this O(files); the copy
is O(state) but runs between steps, never inside one, and costs a fraction of computing the state.
"""

from __future__ import annotations

from typing import Iterable

from freshview.errors import StateError
from freshview.runtime.state.store import SpineStateStore


def copy_arrangements(source: SpineStateStore, target: SpineStateStore, names: Iterable[str]) -> int:
    """Copy each arrangement ``names`` of ``source`` into ``target`` (created there with the same layout;
    one that exists in ``target`` must be empty).  Inside ``target``'s transaction; returns the rows copied."""
    copied = 0
    for name in names:
        layout = source.layout(name)
        if target.has_arrangement(name) and target.count(name):
            raise StateError(f"state {name!r} already holds rows: it cannot be adopted")
        target.ensure_arrangement(name, layout)
        rows = source.scan(name)
        if rows.num_rows:
            target.apply(name, rows)
            copied += rows.num_rows
    return copied
