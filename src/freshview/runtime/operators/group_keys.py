"""Group keys compared as GROUP BY compares them (NULL equals NULL, NaN NaN, ``-0.0`` ``0.0``): NULL-safe
key columns (``encode_keys``) and the matching of probe rows to stored rows by hash (``match_keys``).
"""

from __future__ import annotations

import decimal
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import equal_pairs


def null_default(t: pa.DataType) -> pa.Scalar:
    """The value a NULL group key is stored as (its ``z`` flag says it was NULL)."""
    if pa.types.is_decimal(t):
        return pa.scalar(decimal.Decimal(0), t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.scalar("", t)
    if pa.types.is_boolean(t):
        return pa.scalar(False, t)
    if pa.types.is_timestamp(t):
        return pa.scalar(0, pa.int64()).cast(t)
    if pa.types.is_date32(t):
        return pa.scalar(0, pa.int32()).cast(t)
    if pa.types.is_list(t):
        return pa.scalar([], t)
    if pa.types.is_interval(t):
        return pa.scalar((0, 0, 0), t)
    return pa.scalar(0, t)


def encode_keys(groups: Sequence[pa.Array | pa.ChunkedArray],
                types: Sequence[pa.DataType]) -> list[pa.Array | pa.ChunkedArray]:
    """Null-safe key columns of group columns: the values with NULL replaced (``k*``), then is-NULL flags (``z*``)."""
    values, flags = [], []
    for col, t in zip(groups, types):
        flags.append(pc.is_null(col))
        values.append(pc.fill_null(col, null_default(t)) if col.null_count else col)
    return values + flags


def match_keys(probe: Sequence[pa.Array | pa.ChunkedArray], stored: Sequence[pa.Array | pa.ChunkedArray],
               probe_rows: int, stored_rows: int) -> np.ndarray:
    """For each probe row, the index of the stored row with equal key columns, or -1.

    Keys compare as in GROUP BY (NULL equals NULL, NaN NaN, ``-0.0`` ``0.0``);
    the columns of both sides must have the same types.  With no key columns
    every stored row matches.  If several stored rows match, the last wins.
    """
    found = np.full(probe_rows, -1, dtype=np.int64)
    which, candidates = equal_pairs(probe, stored, probe_rows, stored_rows)
    found[which] = candidates  # each probe's equal rows in stored order: the last one wins
    return found
