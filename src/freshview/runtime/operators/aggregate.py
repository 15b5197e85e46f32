"""Incremental GROUP BY with COUNT, SUM, AVG, MIN, MAX (and DISTINCT).

Delta rule: for a group g touched by the change,

    Δout(g) = −finalize(acc_old(g)) + finalize(acc_old(g) + Σ_Δ(g))

where acc is the group's linear accumulators (row count, per-aggregate sums
of ``x·w`` and non-NULL counts).  Σ_Δ is computed on Spark from the change
alone; acc_old is looked up by group key.  MIN and MAX are not linear: each
keeps a multiset of (group, value) in an ordered arrangement, so deleting
the current minimum finds the next one by an index probe, not a group scan.

Groups are keyed null-safely (a NULL group is a group): each key column is
stored as (value with NULL replaced, is-NULL flag).  An aggregate without
GROUP BY always has exactly one row, also over an empty input, as in
PostgreSQL.  DISTINCT is an aggregate with no aggregate functions.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from freshview.plan import nodes as pn
from freshview.plan.expr import AggCall
from freshview.runtime.delta import Delta, arrow_schema, col_name, column
from freshview.runtime.expressions import lower
from freshview.schema import WEIGHT, SqlType


@dataclass(frozen=True)
class AggState:
    acc: str
    extremes: tuple[str, ...]  # one per MIN/MAX aggregate, in aggregate order


def _acc_types(agg: AggCall) -> list[tuple[str, pa.DataType]]:
    """Accumulator columns of one aggregate (name suffix, Arrow type)."""
    if agg.func == "count_star":
        return []
    if agg.func == "count":
        return [("n", pa.int64())]
    if agg.func in ("sum", "avg"):
        return [("s", _sum_acc_type(agg.arg.type)), ("n", pa.int64())]  # type: ignore[union-attr]
    return [("m", agg.type.arrow)]  # min / max: current extreme


def _sum_acc_type(t: SqlType) -> pa.DataType:
    if t.is_integer and t.kind != "int8":
        return pa.int64()
    if t.is_float:
        return pa.float64()
    scale = t.decimal_precision_scale[1] if t.kind == "numeric" else 0
    return pa.decimal128(38, scale)


def _null_default(t: pa.DataType):
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
    return pa.scalar(0, t)


class Aggregation:
    """Compiled form of one Aggregate node: schemas of its change and state."""

    def __init__(self, node: pn.Aggregate, state: AggState) -> None:
        self.node = node
        self.state = state
        self.ngroups = len(node.group)
        self.group_types = [g.type.arrow for g in node.group]
        self.key_fields = [pa.field(f"k{i}", t) for i, t in enumerate(self.group_types)] + [
            pa.field(f"z{i}", pa.bool_()) for i in range(self.ngroups)
        ]
        self.key_names = [f.name for f in self.key_fields]
        acc_fields = [pa.field("cnt", pa.int64())]
        for j, a in enumerate(node.aggs):
            acc_fields += [pa.field(f"{suffix}{j}", t) for suffix, t in _acc_types(a)]
        self.acc_schema = pa.schema(self.key_fields + acc_fields)
        self.extreme_aggs = [j for j, a in enumerate(node.aggs) if a.func in ("min", "max")]
        self.out_schema = arrow_schema(node.columns)
        self._partial_cols = None
        self._extreme_cols = None

    # ------------------------------------------------------------------ state
    def ensure_state(self, store) -> None:
        store.ensure_arrangement(self.state.acc, self.acc_schema, self.key_names)
        for j, name in zip(self.extreme_aggs, self.state.extremes):
            fields = self.key_fields + [pa.field("v", self.node.aggs[j].arg.type.arrow)]  # type: ignore[union-attr]
            store.ensure_arrangement(name, pa.schema(fields), self.key_names)

    def encode_keys(self, table: pa.Table) -> list[pa.Array]:
        """Null-safe key columns (value with NULL replaced, is-NULL flag) for group columns g0..."""
        values, flags = [], []
        for i, t in enumerate(self.group_types):
            col = table.column(f"g{i}")
            flags.append(pc.is_null(col))
            values.append(pc.fill_null(col, _null_default(t)) if col.null_count else col)
        return values + flags

    # ------------------------------------------------------------------ step
    def step(self, store, d: Delta | None, spark, force: bool) -> Delta | None:
        self.ensure_state(store)
        partial = self._partials(d) if d is not None else None
        if partial is not None and partial.num_rows == 0:
            partial = None
        is_global = self.ngroups == 0
        if partial is None and not (force and is_global):
            return None

        keys = self._keys_table(partial)
        old_rows = store.lookup(self.state.acc, keys) if keys.num_rows or is_global else keys
        old_by_key = {self._key_of(r): r for r in old_rows.to_pylist()}
        part_by_key = {self._key_of(r): r for r in (partial.to_pylist() if partial is not None else [])}
        if is_global and () not in part_by_key:
            part_by_key[()] = None  # the one group of a global aggregate always exists

        # MIN/MAX: apply (group, value) changes, then probe the new extremes.
        extremes: list[dict] = []
        if self.extreme_aggs and d is not None:
            extremes = self._update_extremes(store, d, keys)

        acc_delta, out_rows = [], []
        for key, part in part_by_key.items():
            old = old_by_key.get(key)
            new = self._merge(old, part, key, extremes)
            if old is not None:
                acc_delta.append({**{n: old[n] for n in self.acc_schema.names}, WEIGHT: -1})
                if old["cnt"] > 0 or is_global:
                    out_rows.append(self._finalize(old, -1))
            if new["cnt"] > 0 or is_global:
                acc_delta.append({**new, WEIGHT: 1})
                out_rows.append(self._finalize(new, 1))
        if acc_delta:
            store.apply(self.state.acc, pa.Table.from_pylist(
                acc_delta, schema=pa.schema(list(self.acc_schema) + [pa.field(WEIGHT, pa.int64())])))
        if not out_rows:
            return None
        from freshview.algebra.batch import consolidate

        out = consolidate(pa.Table.from_pylist(out_rows, schema=self.out_schema))
        if out.num_rows == 0:
            return None
        return Delta.of_arrow(out, spark)

    def _partials(self, d: Delta) -> pa.Table:
        """Σ_Δ per group, computed on Spark: count, Σ x·w, Σ w over non-NULL x."""
        if self._partial_cols is None:
            self._partial_cols = self._build_partial_cols()
        groups, aggs = self._partial_cols
        df = d.frame()
        frame = df.groupBy(*groups).agg(*aggs) if groups else df.agg(*aggs)
        table = frame.toArrow()
        if self.ngroups == 0 and table.num_rows and table.column("cnt")[0].as_py() is None:
            return table.slice(0, 0)  # a global aggregate over an empty change
        return table

    def _build_partial_cols(self):
        groups = [lower(g, column).cast(g.type.spark()).alias(f"g{i}") for i, g in enumerate(self.node.group)]
        w = F.col(WEIGHT)
        aggs = [F.sum(w).cast("long").alias("cnt")]
        for j, a in enumerate(self.node.aggs):
            if a.func in ("count_star", "min", "max"):
                continue
            x = lower(a.arg, column)  # type: ignore[arg-type]
            nonnull = F.sum(F.when(x.isNotNull(), w).otherwise(F.lit(0))).cast("long").alias(f"n{j}")
            if a.func == "count":
                aggs.append(nonnull)
                continue
            acc_type = SqlType.from_arrow(_sum_acc_type(a.arg.type)).spark()  # type: ignore[union-attr]
            aggs += [F.sum(x.cast(acc_type) * w).cast(acc_type).alias(f"s{j}"), nonnull]
        return groups, aggs

    def _keys_table(self, partial: pa.Table | None) -> pa.Table:
        if partial is None or self.ngroups == 0:
            return pa.table({f.name: pa.array([], f.type) for f in self.key_fields}) if self.key_fields \
                else pa.table({})
        arrays = self.encode_keys(partial)
        return pa.Table.from_arrays(arrays, schema=pa.schema(self.key_fields))

    def _key_of(self, row: dict) -> tuple:
        if "g0" in row or self.ngroups == 0:
            return tuple(row.get(f"g{i}") for i in range(self.ngroups))
        return tuple(None if row[f"z{i}"] else row[f"k{i}"] for i in range(self.ngroups))

    def _update_extremes(self, store, d: Delta, keys: pa.Table) -> list[dict]:
        if self._extreme_cols is None:
            groups = [lower(g, column).cast(g.type.spark()).alias(f"g{i}") for i, g in enumerate(self.node.group)]
            vals = [lower(self.node.aggs[j].arg, column).alias(f"v{j}") for j in self.extreme_aggs]  # type: ignore[arg-type]
            self._extreme_cols = groups + vals + [F.col(WEIGHT)]
        table = d.frame().select(*self._extreme_cols).toArrow()
        results = []
        for j, name in zip(self.extreme_aggs, self.state.extremes):
            agg = self.node.aggs[j]
            vcol = table.column(f"v{j}").cast(agg.arg.type.arrow)  # type: ignore[union-attr]
            sub = pa.Table.from_arrays(
                self.encode_keys(table) + [vcol, table.column(WEIGHT)],
                names=self.key_names + ["v", WEIGHT],
            ).filter(pc.is_valid(vcol))
            if sub.num_rows:
                from freshview.algebra.batch import consolidate

                store.apply(name, consolidate(sub))
            probe = keys if self.ngroups else pa.table({})
            found = store.extreme(name, probe, "v", agg.func)
            results.append({self._key_of(r): r["v"] for r in found.to_pylist()})
        return results

    def _merge(self, old: dict | None, part: dict | None, key: tuple, extremes: list[dict]) -> dict:
        new: dict = {}
        for i, t in enumerate(self.group_types):
            new[f"k{i}"] = key[i] if key[i] is not None else _null_default(t).as_py()
            new[f"z{i}"] = key[i] is None
        base = old or {}
        p = part or {}
        new["cnt"] = (base.get("cnt") or 0) + (p.get("cnt") or 0)
        ext_iter = iter(extremes)
        for j, a in enumerate(self.node.aggs):
            for suffix, _t in _acc_types(a):
                name = f"{suffix}{j}"
                if suffix == "m":
                    continue
                ov, pv = base.get(name), p.get(name)
                if ov is None:
                    new[name] = pv if pv is not None else 0
                elif pv is None:
                    new[name] = ov
                else:
                    new[name] = ov + pv
            if a.func in ("min", "max"):
                found = next(ext_iter) if extremes else {}
                new[f"m{j}"] = found.get(key) if extremes else base.get(f"m{j}")
        return new

    def _finalize(self, acc: dict, weight: int) -> dict:
        row: dict = {}
        for i in range(self.ngroups):
            row[col_name(i)] = None if acc[f"z{i}"] else acc[f"k{i}"]
        for j, a in enumerate(self.node.aggs):
            out = col_name(self.ngroups + j)
            if a.func == "count_star":
                row[out] = acc["cnt"]
            elif a.func == "count":
                row[out] = acc[f"n{j}"]
            elif a.func == "sum":
                row[out] = acc[f"s{j}"] if acc[f"n{j}"] else None
                if row[out] is not None and a.type.kind == "numeric":
                    row[out] = _quantize(row[out], a.type)
            elif a.func == "avg":
                n, s = acc[f"n{j}"], acc[f"s{j}"]
                if not n:
                    row[out] = None
                elif a.type.is_float:
                    row[out] = float(s) / n
                else:
                    with decimal.localcontext() as ctx:
                        ctx.prec = 60
                        row[out] = _quantize(decimal.Decimal(s) / n, a.type)
            else:
                row[out] = acc.get(f"m{j}")
        row[WEIGHT] = weight
        return row


def _quantize(value, t: SqlType):
    scale = t.decimal_precision_scale[1]
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        return decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP)
