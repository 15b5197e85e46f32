"""A first computation over large inputs, taken in chunks (``Engine._in_chunks`` decides when).

Each input's stored runs are read in slices of at most ``rows`` rows (``SpineStateStore.scan_chunks``),
the smallest input first (a join's other side then probes it), and each slice is a step of the view's
circuit (the first with ``force``, as a one-step first computation is), its output change integrated
into the view's rows.  The delta rules make the steps' sum the whole computation, so the view and its
operators' state are those of one step over whole inputs (``tests/flow/test_first_in_chunks.py``), while
memory holds a slice and what its step builds instead of every input at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from freshview.runtime.executor import CircuitRunner
from freshview.runtime.kernels import Kernels

if TYPE_CHECKING:
    from freshview.runtime.state.store import SpineStateStore


def first_result(runner: CircuitRunner, store: SpineStateStore, output: str, inputs: Mapping[str, str],
                 kernels: Kernels, now: int, rows: int) -> None:
    """The view's first result into ``output`` from ``inputs`` (relation -> where its rows are kept), inside
    the store's transaction (module docstring)."""
    first = True
    for relation in sorted(inputs, key=lambda r: (store.stored_rows(inputs[r]), r)):
        for chunk in store.scan_chunks(inputs[relation], rows):
            out = runner.step(lambda r, c=chunk, at=relation: c if r == at else None, kernels,  # type: ignore[misc]
                              force=first, now=now)
            first = False
            if out is not None and out.num_rows:
                store.apply(output, out)
    if first:  # no input rows: the one step a first computation makes (a global aggregate's row)
        out = runner.step(lambda r: None, kernels, force=True, now=now)
        if out is not None and out.num_rows:
            store.apply(output, out)
