"""MySQL/MariaDB collations over Arrow (the in-process executor), the ``collation`` family of
``plan.functions``: ``collkey`` (the key text compares by under a collation: weights, PAD SPACE) and
``collfold`` (the weights without PAD SPACE: what LIKE matches), the collation the call's parameter.
``freshview.collation`` holds the weights; ``spark_functions`` lowers the same two for Spark.
"""

from __future__ import annotations

from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from freshview.runtime.expressions import arrow_values as A
from freshview.collation import fold as collation_fold
from freshview.collation import key as collation_key

Datum = A.Datum


def op_collkey(ev, e, collation: str) -> Datum:
    """``collkey`` (param: the collation): the key text compares by under a MySQL collation (freshview.collation)."""
    return _each_distinct(ev, e, lambda v: collation_key(v, collation))


def op_collfold(ev, e, collation: str) -> Datum:
    """``collfold`` (param: the collation): the collation's weights without PAD SPACE (what LIKE matches)."""
    return _each_distinct(ev, e, collation_fold)


def _each_distinct(ev, e, fn: Callable[[str], str]) -> Datum:
    (s,) = ev.strict_args(e.args)
    s = A._text(s)
    if A._is_scalar(s):
        return A._per_row(fn, [s], ev.n, pa.string())
    encoded = pc.dictionary_encode(A._broadcast(s, ev.n))  # each distinct value once
    keys = pa.array([fn(v) for v in encoded.dictionary.to_pylist()], pa.string())
    return pc.take(keys, encoded.indices)


OPS: dict[str, Callable[..., Datum]] = {
    "collkey": op_collkey,
    "collfold": op_collfold,
}
