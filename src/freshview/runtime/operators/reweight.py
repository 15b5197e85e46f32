"""Reweight: every row's weight multiplied by an integer expression over the row.

The set operations INTERSECT and EXCEPT [ALL] are an aggregate over both
sides (group = all columns, one count per side: c1, c2) followed by a
Reweight whose factor f(c1, c2) is the multiplicity PostgreSQL gives the row
(INTERSECT ALL least(c1, c2), EXCEPT ALL greatest(c1 − c2, 0), INTERSECT
c1 > 0 ∧ c2 > 0, EXCEPT c1 > 0 ∧ c2 = 0).

Delta rule: the factor depends only on the row itself, so the operator is
linear: Reweight(R + ΔR) = Reweight(R) + Reweight(ΔR), i.e.

    Δout = { (row, w · f(row)) : (row, w) ∈ Δin },

applied to the change alone, no state.  Rows whose weight becomes 0 are
dropped.  Over the aggregate's change (−old row, +new row per touched group)
this emits −f(old counts) + f(new counts) copies of the group's values.
"""

from __future__ import annotations

from freshview.plan import nodes as pn
from freshview.runtime.kernels import Kernels, Rel


def reweight_delta(k: Kernels, node: pn.Reweight, d: Rel, memo: dict) -> Rel:
    return k.reweight(d, node.weight, memo)
