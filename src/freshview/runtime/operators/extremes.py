"""MIN/MAX of a group after a change, decided from its old extreme and the change alone where it can be.

An aggregate's MIN/MAX keeps each group's (value, multiplicity) multiset in
an ordered arrangement and its current extreme in the group's accumulators
(``m{j}``).  Probing the arrangement for every touched group costs a state
read per step even when the change cannot have moved the extreme (an UPDATE
of another column deletes and re-inserts the same value; an insert above the
minimum).  The rule, per touched group ``g``, with the change consolidated
into ``(g, v, w)`` rows (``v`` not NULL, ``w`` ≠ 0) and ``old(g)`` the
extreme before it (none: a new group, or one without non-NULL values):

* if the change deletes (``w < 0``) no value equal to ``old(g)``, and deletes
  nothing at all when there is no ``old(g)``::

      new(g) = best(old(g), {v : w > 0})

  (only deleted values lose multiplicity, so ``old(g)`` is still held, and
  nothing better than it was held before; what is held now and better can
  only be an added value);
* otherwise (the extreme's value lost a copy, perhaps its last) the group is
  left to the arrangement's probe.

"best" and "equal" are SQL's order and equality (``reads.ranks``: numbers by
value with NaN above them, strings by their bytes), as the arrangement's
own probe orders values.  Pure: Arrow and NumPy in, out.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from freshview.runtime.state.reads import ranks

__all__ = ["settle"]


def settle(kind: str, old: pa.Array | pa.ChunkedArray, group_of: np.ndarray, values: pa.Array | pa.ChunkedArray,
           weights: np.ndarray) -> tuple[np.ndarray, pa.Array]:
    """The extremes the rule decides: ``(settled, new)``, both per group.

    ``old``: each touched group's extreme before the change (NULL: none).
    ``group_of``, ``values``, ``weights``: the consolidated change, one entry
    per (group, value) with the group's index into ``old``; ``values`` not
    NULL, of ``old``'s type.  ``settled[g]``: the rule decides ``g``; then
    ``new[g]`` is its extreme (NULL: none), else ``new[g]`` is NULL and the
    group needs a probe.
    """
    if kind not in ("min", "max"):
        raise ValueError(f"extreme kind must be 'min' or 'max', not {kind!r}")
    old, values = _array(old), _array(values)
    groups = len(old)
    has_old = np.asarray(old.is_valid(), dtype=bool) if old.null_count else np.ones(groups, dtype=bool)
    present = np.flatnonzero(has_old)
    rank = ranks([old.filter(pa.array(has_old)) if old.null_count else old, values], kind)
    old_rank = np.full(groups, np.iinfo(np.int64).max, dtype=np.int64)
    old_rank[present] = rank[:len(present)]
    value_rank = rank[len(present):]

    deleted = weights < 0
    probe = np.zeros(groups, dtype=bool)
    probe[group_of[deleted & (value_rank == old_rank[group_of])]] = True  # the extreme lost a copy
    probe[group_of[deleted & ~has_old[group_of]]] = True  # deletes where nothing was known to be held

    # The best candidate per group: its old extreme (position -1 - g) or an added value (its position).
    added = np.flatnonzero(~deleted)
    cand_group = np.concatenate([present, group_of[added]])
    cand_rank = np.concatenate([old_rank[present], value_rank[added]])
    cand_at = np.concatenate([-1 - present, added])
    order = np.lexsort((cand_rank, cand_group))
    firsts = order[np.flatnonzero(np.concatenate([[True], cand_group[order][1:] != cand_group[order][:-1]]))] \
        if len(order) else order
    best = np.full(groups, np.iinfo(np.int64).min, dtype=np.int64)  # MIN: no candidate
    best[cand_group[firsts]] = cand_at[firsts]
    best[probe] = np.iinfo(np.int64).min

    from_old = (best < 0) & (best != np.iinfo(np.int64).min)
    from_new = best >= 0
    idx = np.zeros(groups, dtype=np.int64)
    idx[from_old] = -1 - best[from_old]
    idx[from_new] = len(old) + best[from_new]
    both = pa.concat_arrays([old, values]) if len(values) else old
    new = both.take(pa.array(idx, pa.int64(), mask=~(from_old | from_new)))
    return ~probe, new


def _array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
