"""A step's view changes, netted per result-table key: the upserts and deletes every result sink writes.

A view delta is a consolidated Arrow table of the view's columns plus the
weight column.  A sink that stores the view keyed (see ``plan.shape``) needs,
per key, one action:

* a keyed view: its (last) new row if it has one (op 1, an upsert), else one
  of its old rows (op 0, a delete of the row with that key);
* a counted view (rows may repeat): each distinct row with its weight as op
  (the change of its multiplicity);
* a view without key (the single row of an aggregate without GROUP BY): the
  last new row (op 1) if any, else an old row (op 0, the row disappears).

NULL key values are equal to each other here (a NULL group is a group).
This module is database-neutral: the PostgreSQL and the MySQL sink both
write what ``net_changes`` (Arrow, a column at a time) or
``net_changes_small`` (Python, for a few rows, where Arrow's cost per call
dominates) decide.  Both give the same actions.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import consolidate, group_ids, negate
from freshview.schema import WEIGHT

_AT = "_fv_at"


def replacing(previous: pa.Table, new: pa.Table) -> pa.Table | None:
    """The delta that turns a result table holding the weighted rows ``previous`` into one holding ``new``
    (a view's columns and the weight, as ``snapshot(weighted=True)`` gives them), consolidated: only what
    differs; None when the two cannot be compared (other columns or types: the table is refilled)."""
    if previous.schema != new.schema:
        try:
            previous = previous.select(new.schema.names).cast(new.schema)
        except (KeyError, ValueError, pa.ArrowException):
            return None
    return consolidate(pa.concat_tables([negate(previous), new]))


def net_changes(delta: pa.Table, names: Sequence[str], key: Sequence[str],
                counted: bool) -> tuple[pa.Table, pa.Array]:
    """The rows to write (columns ``names``) and their ops (int64; see the module docstring)."""
    names = list(names)
    weight = delta.column(WEIGHT).combine_chunks()
    if counted:
        return delta.select(names), weight
    new, old = delta.filter(pc.greater(weight, 0)), delta.filter(pc.less(weight, 0))
    if not key:  # one row at most: the last new row, else a delete of whatever is there
        if new.num_rows:
            return new.slice(new.num_rows - 1).select(names), pa.array([1], pa.int64())
        if old.num_rows:
            return old.slice(0, 1).select(names), pa.array([0], pa.int64())
        return delta.select(names).slice(0, 0), pa.array([], pa.int64())
    if old.num_rows == 0:
        return new.select(names), pa.array(np.ones(new.num_rows, np.int64))
    # Old rows first, then new rows: per key, the highest position is its (last) new row if it
    # has one, else an old row (a delete).  group_by holds NULL keys equal.
    ordered = pa.concat_tables([old, new])
    ordered = ordered.append_column(_AT, pa.array(np.arange(ordered.num_rows, dtype=np.int64)))
    if any(pa.types.is_list(ordered.schema.field(k).type) for k in key):  # (not groupable by Arrow)
        ids, _ = group_ids([ordered.column(k) for k in key], ordered.num_rows)
        last_at = np.full(int(ids.max()) + 1, -1, np.int64)
        np.maximum.at(last_at, ids, np.arange(ordered.num_rows))
        chosen = ordered.take(pa.array(last_at, pa.int64()))
    else:
        last = ordered.group_by(list(key), use_threads=False).aggregate([(_AT, "max")])
        chosen = ordered.take(last.column(_AT + "_max"))
    return chosen.select(names), pc.cast(pc.greater(chosen.column(WEIGHT), 0), pa.int64())


def net_changes_small(delta: pa.Table, names: Sequence[str], key: Sequence[str],
                      counted: bool) -> tuple[list[list], list[int]]:
    """``net_changes`` in Python: the chosen rows as Python columns (one list per name) and their ops."""
    names = list(names)
    columns = [delta.column(n).to_pylist() for n in names]
    weights = delta.column(WEIGHT).to_pylist()
    if counted:
        return columns, weights
    at = [names.index(k) for k in key]
    chosen: dict[tuple, int] = {}  # key -> row: its (last) new row if any, else an old row
    for i, w in enumerate(weights):
        if w < 0:
            chosen.setdefault(tuple(_hashable(columns[j][i]) for j in at), i)
    for i, w in enumerate(weights):
        if w > 0:
            chosen[tuple(_hashable(columns[j][i]) for j in at)] = i
    rows = list(chosen.values())
    return [[col[i] for i in rows] for col in columns], [1 if weights[i] > 0 else 0 for i in rows]


def _hashable(value):
    """A key value usable in a dict: array values (Python lists) as tuples, all the way down."""
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


__all__ = ["net_changes", "net_changes_small"]
