"""The set-returning functions' operator (``plan.flatmap.FlatMap``): each row to the rows its functions return.

Delta rule: FlatMap is linear.  Write f(r) for the bag of rows the node makes of
one input row r (r followed by each zipped row of its functions; r itself
padded with NULLs when ``outer`` and no function returns a row).  Then
FlatMap(R) = Σ_{r ∈ R} w(r)·f(r), a sum over R's rows, so

    ΔFlatMap(R) = FlatMap(ΔR)

row by row: an inserted row adds its rows, a deleted row (weight −1) takes the
same rows away, an update does both; equal output rows add their weights on
consolidation (``unnest('{1,1}')`` is one row of weight 2).  No state.  f
depends on r alone (its functions are deterministic), which is what makes the
deletion exact.  Each executor runs ``Kernels.flat_map``.
"""

from __future__ import annotations

from freshview.plan.flatmap import FlatMap
from freshview.runtime.kernels import Kernels, Rel


def flatmap_delta(k: Kernels, node: FlatMap, d: Rel, memo: dict) -> Rel:
    """ΔFlatMap(R) = FlatMap(ΔR)."""
    return k.flat_map(d, node, memo)


__all__ = ["flatmap_delta"]
