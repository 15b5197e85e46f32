"""string_agg and array_agg: order-dependent aggregates, recomputed per touched group from its stored values.

They are not linear (the result depends on the order of all the group's
values), so each keeps an arrangement of its group's values (string_agg:
the non-NULL ones; array_agg: all, NULL included) with their ORDER BY keys
— rows (``k*``, ``z*``, ``v``, ``o0..``) with multiplicities, keyed by the
group — and the rule is

    Δout(g) = −agg(V_old(g)) + agg(V_old(g) + ΔV(g))

for every group g the change touches: the change's (group, value, keys)
rows are applied to the arrangement, then the touched groups' slices are
read back by group key (``lookup``) and aggregated at once, with Arrow
compute and no Python per group: rows repeated by multiplicity, sorted by
(group, ORDER BY keys, value), cut into one list per group (array_agg's
result) and, for string_agg, joined with the delimiter.  The new result replaces the stored one (``m{j}``) exactly
like a MIN/MAX extreme, so ``accumulators.merge`` emits −old/+new.

Order: the ORDER BY keys as written (ASC/DESC, NULLS FIRST/LAST, NULLs
largest by default as in PostgreSQL; NaN above every number; strings by
bytes, the C collation);
rows that tie on every key — PostgreSQL leaves their order unspecified —
come in ascending value order, NULLs last, so the result is deterministic.
Without ORDER BY that is the values' ascending order (PostgreSQL's is the
order rows arrive in, unspecified).  A group without (non-NULL, for
string_agg) values gives NULL.  ``string_agg(DISTINCT x, d ORDER BY x)``
and ``array_agg(DISTINCT x ...)`` (PostgreSQL allows only the argument
itself as ORDER BY key with DISTINCT) take each stored value once, whatever
its multiplicity (array_agg: NULL once too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import consolidate
from freshview.plan.expr import AggCall
from freshview.runtime import ttl
from freshview.runtime.operators import accumulators
from freshview.schema import WEIGHT

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore


def layout_fields(agg: AggCall) -> list[pa.Field]:
    """The value and ORDER BY key columns stored per row (after the group key columns)."""
    return [pa.field("v", agg.arg.type.arrow)] + [  # type: ignore[union-attr]
        pa.field(f"o{m}", o.expr.type.arrow) for m, o in enumerate(agg.order)]


def apply_changes(store: StateStore, name: str, agg: AggCall, keys: list, value, order_cols: list, weight,
                  key_names: list[str], clamp: bool = False) -> None:
    """Apply the change's (group, value, ORDER BY keys) rows to the arrangement (string_agg: those with
    a non-NULL value); ``clamp`` (a state TTL): deletes of rows it no longer holds dropped."""
    names = key_names + ["v"] + [f"o{m}" for m in range(len(order_cols))] + [WEIGHT]
    sub = pa.Table.from_arrays(list(keys) + [value] + list(order_cols) + [weight], names=names)
    if agg.func == "string_agg":
        sub = sub.filter(pc.is_valid(value))
    if sub.num_rows and clamp:
        sub = ttl.clamp_deletes(store, name, sub)[0]
    if sub.num_rows:
        store.apply(name, consolidate(sub))


def recompute(store: StateStore, name: str, agg: AggCall, probe: pa.Table, key_names: list[str]) -> pa.Table:
    """Per probe group (``probe``: distinct encoded keys; no key columns: the one global group), its
    string_agg / array_agg over the stored values: the key columns then ``v`` (NULL where the group
    has no value)."""
    groups = probe.num_rows if key_names else 1
    rows = store.lookup(name, probe if key_names else pa.table({}))
    w = np.asarray(rows.column(WEIGHT), dtype=np.int64) if rows.num_rows else np.zeros(0, np.int64)
    keep = np.flatnonzero(w > 0)
    rows = rows.take(keep if agg.distinct else np.repeat(keep, w[keep]))  # DISTINCT: each stored value once
    if key_names:
        gid = accumulators.match_keys([rows.column(k) for k in key_names], [probe.column(k) for k in key_names],
                                      rows.num_rows, probe.num_rows)
    else:
        gid = np.zeros(rows.num_rows, np.int64)
    sort_cols: dict[str, pa.Array] = {"_g": pa.array(gid, pa.int64())}
    sort_keys: list[tuple[str, str]] = [("_g", "ascending")]
    for m, o in enumerate(agg.order):
        col = rows.column(f"o{m}")
        sort_cols[f"_n{m}"] = pc.is_null(col)
        sort_keys.append((f"_n{m}", "descending" if o.nulls_first else "ascending"))
        if pa.types.is_floating(col.type):  # NaN is above every number (Arrow puts it last either way)
            sort_cols[f"_nan{m}"] = pc.fill_null(pc.is_nan(col), False)
            sort_keys.append((f"_nan{m}", "descending" if o.desc else "ascending"))
        sort_cols[f"_o{m}"] = col
        sort_keys.append((f"_o{m}", "descending" if o.desc else "ascending"))
    sort_cols["_v"] = rows.column("v")
    sort_keys.append(("_v", "ascending"))
    order = pc.sort_indices(pa.table(sort_cols), sort_keys=sort_keys) if rows.num_rows else pa.array([], pa.uint64())
    value_type = agg.arg.type.arrow  # type: ignore[union-attr]
    values = rows.column("v").take(order).combine_chunks() if rows.num_rows else pa.array([], value_type)
    counts = np.bincount(gid, minlength=groups)[:groups] if len(gid) else np.zeros(groups, np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    if agg.func == "array_agg":
        mask = pa.array(counts == 0)
        result = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values.cast(value_type), mask=mask)
    else:
        lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values.cast(pa.string()))
        joined = pc.binary_join(lists, agg.separator or "")
        result = pc.if_else(pa.array(counts > 0), joined, pa.scalar(None, pa.string()))
    cols = [probe.column(k) for k in key_names] + [result]
    return pa.Table.from_arrays(cols, names=key_names + ["v"])


__all__ = ["layout_fields", "apply_changes", "recompute"]
