"""Incremental GROUP BY with COUNT, SUM, AVG, MIN, MAX (and DISTINCT).

Delta rule: for a group g touched by the change,

    Δout(g) = −finalize(acc_old(g)) + finalize(acc_old(g) + Σ_Δ(g))

where acc is the group's linear accumulators (row count, per-aggregate sums
of ``x·w`` and non-NULL counts).  Σ_Δ is computed by the step's kernels from
the change alone; acc_old is looked up by group key.  The sum and ``finalize`` run as
Arrow compute over all touched groups at once, with no Python per group
(``accumulators``).  MIN and MAX are not linear: each keeps a multiset of
(group, value) in an ordered arrangement, so deleting the current minimum
finds the next one by an index probe, not a group scan.  A collation group's
shown spelling (``spelling``: MIN of its members' spellings) keeps that
multiset only for groups that hold more than one spelling; a group of one
spelling is decided from its accumulators and the change's least and
greatest spellings (``accumulators``, ``_update_spellings``).

bool_and/bool_or, var/stddev and COUNT/SUM/AVG(DISTINCT) are linear in
accumulators too (``linear_aggs`` states what they sum and how they
finalise; a DISTINCT aggregate sums the presence transitions of its
(group, value) multiset).  string_agg is recomputed for each touched group
from its stored values (``ordered_aggs``), and so is array_agg; the result then
replaces the old one like a MIN/MAX extreme.

Groups are keyed null-safely (a NULL group is a group): each key column is
stored as (value with NULL replaced, is-NULL flag).  An aggregate without
GROUP BY always has exactly one row, also over an empty input, as in
PostgreSQL.  DISTINCT is an aggregate with no aggregate functions.

State TTL (``runtime.ttl``): a view's top aggregate (under only filters and
projections that keep every GROUP BY column) is one owner keyed by the group
key.  A step touches the groups of its change; a group untouched for the
TTL is evicted from every arrangement (accumulators, MIN/MAX and value
multisets) with no output, so the view keeps the group's last row.  A late
change then finds no accumulators and starts the group from its inserts
alone (``old = 0``, and Σ_Δ over the change's rows of positive weight: its
deletes have nothing left to delete); the groups a step so starts are
``created``, and the flow replaces the view's row of each (retracting the
row from before the eviction, see ``CircuitRunner.recreated``), so the view
never holds two rows for one group.  A late change of deletes only leaves an
evicted group alone.  Deletes of values a multiset no longer holds are
dropped likewise (``ttl.clamp_deletes``).  Aggregates elsewhere in a plan (under a join, another
aggregate, a set operation) are not evicted: their rows feed operators that
could not be told to replace them.

First computation on streaming kernels (``Kernels.streams``: Spark), empty
accumulators, GROUP BY, only linear aggregates and no TTL: the group sums come
in bounded batches (``Kernels.sums_batches``; each group in one), each merged
with nothing and its accumulators handed to the store's bulk load
(``StateStore.load_runs``) as they come; the output is the batches' rows.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import consolidate
from freshview.circuit import AggState
from freshview.plan import nodes as pn
from freshview.plan.aggregates import names as aggregate_names
from freshview.plan.expr import AggCall
from freshview.runtime.kernels import Kernels, Rel, Term
from freshview.runtime import ttl as ttl_rules
from freshview.runtime.operators import accumulators, linear_aggs, ordered_aggs
from freshview.runtime.relation import arrow_schema, conform
from freshview.runtime.state.layout import Layout
from freshview.schema import WEIGHT, SqlType

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore

EXTREME_FUNCS = aggregate_names("extreme")  # aggregates with a (group, value) multiset (plan.aggregates)


def _acc_types(agg: AggCall) -> list[tuple[str, pa.DataType]]:
    """Accumulator columns of one aggregate (name suffix, Arrow type)."""
    if linear_aggs.handles(agg):
        return linear_aggs.acc_types(agg, _sum_acc_type)
    if agg.func == "count_star":
        return []
    if agg.func == "count":
        return [("n", pa.int64())]
    if agg.func in ("sum", "avg"):
        return [("s", _sum_acc_type(agg.arg.type)), ("n", pa.int64())]  # type: ignore[union-attr]
    if agg.func == "spelling":
        return [("m", agg.type.arrow), ("mix", pa.bool_())]  # shown spelling, held by a multiset
    return [("m", agg.type.arrow)]  # min / max: current extreme


def _sum_acc_type(t: SqlType) -> pa.DataType:
    if t.is_integer and t.kind != "int8":
        return pa.int64()
    if t.is_float:
        return pa.float64()
    scale = t.decimal_precision_scale[1] if t.kind == "numeric" else 0
    return pa.decimal128(38, scale)


class Aggregation:
    """Compiled form of one Aggregate node: schemas of its change and state."""

    def __init__(self, node: pn.Aggregate, state: AggState) -> None:
        self.node = node
        self.state = state
        self.ngroups = len(node.group)
        self.group_types = [g.type.arrow for g in node.group]
        self.out_schema = arrow_schema(node.columns)
        self.spec = accumulators.GroupSpec(
            group_types=tuple(self.group_types),
            group_results=tuple(self.out_schema.field(i).type for i in range(self.ngroups)),
            aggs=tuple(accumulators.AggSpec(a.func, tuple(_acc_types(a)), self.out_schema.field(self.ngroups + j).type)
                       for j, a in enumerate(node.aggs)),
        )
        self.key_fields = list(self.spec.key_schema)  # k{i}: value (NULL replaced), z{i}: is NULL
        self.key_names = [f.name for f in self.key_fields]
        self.acc_schema = self.spec.acc_schema  # keys, cnt, then per aggregate its _acc_types columns
        self.extreme_aggs = [j for j, a in enumerate(node.aggs) if a.func in ("min", "max")]
        self.spelling_aggs = [j for j, a in enumerate(node.aggs) if a.func == "spelling"]
        # each MIN/MAX/spelling aggregate's (group, value) multiset, by aggregate
        self.multisets = dict(zip([j for j, a in enumerate(node.aggs) if a.func in EXTREME_FUNCS], state.extremes))
        self.m_aggs = [j for j, a in enumerate(node.aggs) if a.func in EXTREME_FUNCS or a.recomputed]
        self.value_aggs = [j for j, a in enumerate(node.aggs) if a.distinct or a.recomputed]
        self.terms = self._terms()
        self.memo: dict = {}  # per executor: what its kernels built once
        self.created: pa.Table | None = None  # under a TTL: the groups the last step started (no accumulators)
        self._clamp = False

    # ------------------------------------------------------------------ state
    def ensure_state(self, store: StateStore) -> None:
        for name, layout in self.layouts:
            store.ensure_arrangement(name, layout)

    @cached_property
    def layouts(self) -> list[tuple[str, Layout]]:
        """Its arrangements and their layouts: the accumulators, each MIN/MAX/spelling multiset, each
        DISTINCT/ordered aggregate's values (built once; every step ensures them)."""
        out = [(self.state.acc, Layout(self.acc_schema, tuple(self.key_names)))]
        for j, name in self.multisets.items():
            fields = self.key_fields + [pa.field("v", self.node.aggs[j].arg.type.arrow)]  # type: ignore[union-attr]
            out.append((name, Layout(pa.schema(fields), tuple(self.key_names), order="v")))
        for j, name in zip(self.value_aggs, self.state.values):
            fields = self.key_fields + ordered_aggs.layout_fields(self.node.aggs[j])
            out.append((name, Layout(pa.schema(fields), tuple(self.key_names))))
        return out

    def encode_keys(self, table: pa.Table) -> list[pa.Array]:
        """Null-safe key columns (value with NULL replaced, is-NULL flag) for group columns g0..."""
        return accumulators.encode_keys([table.column(f"g{i}") for i in range(self.ngroups)], self.group_types)

    # ------------------------------------------------------------------ step
    def step(self, k: Kernels, store: StateStore, d: Rel | None, force: bool,
             touch: Callable[..., None] | None = None) -> Rel | None:
        """The output change (module docstring); ``touch(keys)``: the state TTL's record of the groups
        this step touches (None: no TTL, the aggregate is exact)."""
        self.ensure_state(store)
        self.created = None
        self._clamp = touch is not None
        memo = self.memo.setdefault(k.name, {})
        if (d is not None and k.streams and touch is None and self.ngroups and not self.m_aggs
                and not self.value_aggs and store.is_empty(self.state.acc)):
            return self._first(k, store, d, memo)
        if d is not None and (self.extreme_aggs or self.spelling_aggs or self.value_aggs or touch is not None):
            d = k.shared(d)  # two readers (sums, extremes): run the input's lineage once
        partial = k.sums(d, self.node.group, self.terms, memo) if d is not None else None
        if partial is not None and partial.num_rows == 0:
            partial = None
        is_global = self.ngroups == 0
        if partial is None and not (force and is_global):
            return None

        keys = self._keys_table(partial)
        old_rows = store.lookup(self.state.acc, keys) if keys.num_rows or is_global else keys
        if touch is not None and keys.num_rows:
            touch(keys, distinct=True)  # one row per group
            new = self._new_groups(keys, old_rows)
            if new.any() and d is not None:
                partial = self._inserts_only(k, memo, k.arrow(d), partial, keys, new)
                if partial.num_rows == 0:
                    return None  # deletes only, of groups evicted: nothing to do
                keys = self._keys_table(partial)
                new = self._new_groups(keys, old_rows)
            self.created = keys.filter(pa.array(new))

        found: dict[int, pa.Table | accumulators.Spelled] = {}  # per aggregate with an m accumulator
        if self.extreme_aggs and d is not None:
            # MIN/MAX: apply (group, value) changes, then probe the new extremes.
            found.update(zip(self.extreme_aggs, self._update_extremes(k, memo, store, d, keys)))
        if self.value_aggs and d is not None:
            # DISTINCT: presence transitions into the partial sums; string_agg: touched groups recomputed.
            partial, recomputed = self._update_values(k, memo, store, d, partial, keys)
            found.update(recomputed)
        touched = accumulators.align(self.spec, partial, old_rows)
        if self.spelling_aggs and d is not None and touched is not None:
            found.update(self._update_spellings(k, memo, store, d, touched))
        extremes = [found[j] for j in self.m_aggs] if found else None

        # old + Σ_Δ per group, finalised: vectorised, no Python per group (see ``accumulators``).
        acc_delta, out = accumulators.merge(self.spec, partial, touched if touched is not None else old_rows,
                                            extremes)
        if acc_delta.num_rows:
            store.apply(self.state.acc, acc_delta)
        if out.num_rows == 0:
            return None
        return k.of_arrow(out)

    def _first(self, k: Kernels, store: StateStore, d: Rel, memo: dict) -> Rel | None:
        """Σ_Δ batch by batch into empty accumulators (module docstring); the output is every group's row."""
        nothing = self.layouts[0][1].weighted_schema.empty_table()
        outs: list[pa.Table] = []

        def deltas():
            for partial in k.sums_batches(d, self.node.group, self.terms, memo):
                if partial.num_rows:
                    acc_delta, out = accumulators.merge(self.spec, partial, nothing, None)
                    outs.append(out)
                    yield acc_delta

        store.load_runs(self.state.acc, deltas())
        outs = [o for o in outs if o.num_rows]
        if not outs:
            return None
        return k.of_arrow(outs[0] if len(outs) == 1 else pa.concat_tables(outs))

    def contents(self, k: Kernels, store: StateStore) -> Rel | None:
        """The aggregate's whole output from its accumulators (each live group's row, weight 1): its first
        output when its state was taken from another circuit's equal aggregate (``runtime.reuse``)."""
        self.ensure_state(store)
        acc = store.scan(self.state.acc)
        if self.ngroups:
            acc = acc.filter(pc.greater(acc.column("cnt"), 0))
        if not acc.num_rows:
            return None
        out = accumulators.finalize(self.spec, acc)
        return k.of_arrow(conform(out.append_column(WEIGHT, pa.array(np.ones(out.num_rows, np.int64))),
                                  self.out_schema))

    # ------------------------------------------------------------------ state TTL
    def ttl_owner(self, owner: str) -> ttl_rules.TtlOwner | None:
        """The aggregate as one TTL owner keyed by its groups (None for a global aggregate: its one row
        always exists)."""
        if not self.ngroups:
            return None
        names = self.state.names

        def evict(store: StateStore, keys: pa.Table) -> None:
            for name in names:
                ttl_rules.drop_keys(store, name, keys)

        def current_keys(store: StateStore) -> pa.Table:
            self.ensure_state(store)
            return ttl_rules.distinct_keys(store, [self.state.acc], self.key_names)

        return ttl_rules.TtlOwner(ttl_rules.TouchIndex(owner, pa.schema(self.key_fields)), evict, current_keys)

    def _new_groups(self, keys: pa.Table, old_rows: pa.Table) -> np.ndarray:
        """Which groups of ``keys`` have no accumulators (``old_rows``: the lookup of them)."""
        found = accumulators.match_keys([keys.column(n) for n in self.key_names],
                                        [old_rows.column(n) for n in self.key_names], keys.num_rows, old_rows.num_rows)
        return found < 0

    def _inserts_only(self, k: Kernels, memo: dict, d: pa.Table, partial: pa.Table, keys: pa.Table,
                      new: np.ndarray) -> pa.Table:
        """``partial`` with the rows of new groups (``new``, aligned with ``partial``) summed over the
        change's inserts only; a new group without inserts is left out."""
        w = np.asarray(d.column(WEIGHT), dtype=np.int64)
        if not (w < 0).any():
            return partial
        new_keys = [keys.filter(pa.array(new)).column(n) for n in self.key_names]

        def of_new_groups(rows: pa.Table) -> pa.Table:
            sums = k.sums(k.of_arrow(rows), self.node.group, self.terms, memo)
            at = accumulators.match_keys(self.encode_keys(sums), new_keys, sums.num_rows, int(new.sum()))
            return sums.filter(pa.array(at >= 0))

        if not of_new_groups(d.filter(pa.array(w < 0))).num_rows:
            return partial  # the deletes are all of groups it holds (the usual case): sums stand
        inserts = d.filter(pa.array(w > 0))
        sums = of_new_groups(inserts) if inserts.num_rows else partial.schema.empty_table()
        kept = partial.filter(pa.array(~new))
        return pa.concat_tables([kept, sums.select(partial.column_names).cast(partial.schema)])

    def group_values(self, keys: pa.Table) -> list[pa.ChunkedArray]:
        """The GROUP BY values (as output) of encoded group keys (``k*``, ``z*``)."""
        out = []
        for i in range(self.ngroups):
            k = keys.column(f"k{i}")
            value = pc.if_else(keys.column(f"z{i}"), pa.scalar(None, k.type), k)
            out.append(value.cast(self.out_schema.field(i).type))
        return out

    def _terms(self) -> list[Term]:
        """The partial sums Σ_Δ needs: per aggregate Σ x·w and Σ w over non-NULL x (count: the latter)."""
        terms = []
        for j, a in enumerate(self.node.aggs):
            if a.func == "spelling":  # the change's least and greatest spelling per group
                terms += [Term(f"lo{j}", a.arg, op="min"), Term(f"hi{j}", a.arg, op="max")]
                continue
            if a.func in ("count_star", "min", "max") or a.recomputed or a.distinct:
                continue  # DISTINCT: from its multiset's transitions (``_update_values``)
            if linear_aggs.handles(a):
                terms += linear_aggs.terms(j, a, _sum_acc_type)
                continue
            if a.func in ("sum", "avg"):
                terms.append(Term(f"s{j}", a.arg, _sum_acc_type(a.arg.type)))  # type: ignore[union-attr]
            terms.append(Term(f"n{j}", a.arg))
        return terms

    def _keys_table(self, partial: pa.Table | None) -> pa.Table:
        if partial is None or self.ngroups == 0:
            return pa.table({f.name: pa.array([], f.type) for f in self.key_fields}) if self.key_fields \
                else pa.table({})
        arrays = self.encode_keys(partial)
        return pa.Table.from_arrays(arrays, schema=pa.schema(self.key_fields))

    def _update_extremes(self, k: Kernels, memo: dict, store: StateStore, d: Rel, keys: pa.Table) -> list[pa.Table]:
        """Apply the change's (group, value) rows to each MIN/MAX multiset; per MIN/MAX aggregate, the
        touched groups' current extremes (key columns and ``v``; groups without a value absent)."""
        exprs = list(self.node.group) + [self.node.aggs[j].arg for j in self.extreme_aggs]
        schema = pa.schema([pa.field(f"g{i}", g.type.arrow) for i, g in enumerate(self.node.group)]
                           + [pa.field(f"v{j}", self.node.aggs[j].arg.type.arrow) for j in self.extreme_aggs]  # type: ignore[union-attr]
                           + [pa.field(WEIGHT, pa.int64())])
        table = k.evaluate(d, exprs, schema, memo.setdefault("extremes", {}))
        results = []
        for j in self.extreme_aggs:
            agg, name = self.node.aggs[j], self.multisets[j]
            vcol = table.column(f"v{j}")
            sub = pa.Table.from_arrays(
                self.encode_keys(table) + [vcol, table.column(WEIGHT)],
                names=self.key_names + ["v", WEIGHT],
            ).filter(pc.is_valid(vcol))
            if sub.num_rows and self._clamp:
                sub = ttl_rules.clamp_deletes(store, name, sub)[0]
            if sub.num_rows:
                store.apply(name, consolidate(sub))
            probe = keys if self.ngroups else pa.table({})
            results.append(store.extreme(name, probe, agg.func))  # k*, z*, v: a keyed Arrow table
        return results

    def _update_spellings(self, k: Kernels, memo: dict, store: StateStore, d: Rel,
                          touched: accumulators.Touched) -> dict[int, accumulators.Spelled]:
        """Per spelling aggregate, its groups outside the single-spelling rule (``accumulators``) and
        their new MIN spellings: each such group's multiset is seeded with ``(m, cnt)`` if it held one
        spelling until now, takes the change's rows of the group, and is probed."""
        out: dict[int, accumulators.Spelled] = {}
        rows = None
        for j in self.spelling_aggs:
            slow = accumulators.spelling_slow(touched, j)
            if not slow.any():
                out[j] = accumulators.Spelled(slow, None)
                continue
            if rows is None:
                args = [self.node.aggs[i].arg for i in self.spelling_aggs]
                schema = pa.schema([pa.field(f"g{i}", t) for i, t in enumerate(self.group_types)]
                                   + [pa.field(f"v{i}", a.type.arrow) for i, a in zip(self.spelling_aggs, args)]  # type: ignore[union-attr]
                                   + [pa.field(WEIGHT, pa.int64())])
                rows = k.evaluate(d, list(self.node.group) + args, schema, memo.setdefault("spellings", {}))
                enc = [accumulators._cast(c, f.type) for c, f in zip(self.encode_keys(rows), self.key_fields)]
            name = self.multisets[j]
            layout = pa.schema(self.key_fields + [pa.field("v", self.node.aggs[j].type.arrow),
                                                  pa.field(WEIGHT, pa.int64())])
            at = np.flatnonzero(slow)
            slow_keys = [c.take(at) for c in touched.keys]
            member = accumulators.match_keys(enc, slow_keys, rows.num_rows, len(at)) >= 0
            v = rows.column(f"v{j}")
            change = pa.Table.from_arrays(enc + [v, rows.column(WEIGHT)], schema=layout)
            change = change.filter(pa.array(member & np.asarray(pc.is_valid(v), dtype=bool)))
            mixed = accumulators._true(touched.old_at.column(f"mix{j}"))
            seeded = np.flatnonzero(slow & touched.has_old & ~mixed)  # one spelling so far: (m, cnt)
            seeds = pa.Table.from_arrays([c.take(seeded) for c in touched.keys]
                                         + [touched.old_at.column(f"m{j}").take(seeded),
                                            touched.old_at.column("cnt").take(seeded)], schema=layout)
            seeds = seeds.filter(pc.is_valid(seeds.column("v")))
            if self._clamp:  # a TTL: the change's deletes are checked against the seeded multiset
                if seeds.num_rows:
                    store.apply(name, consolidate(seeds))
                change = ttl_rules.clamp_deletes(store, name, change)[0] if change.num_rows else change
            else:
                change = pa.concat_tables([seeds, change])
            if change.num_rows:
                store.apply(name, consolidate(change))
            probe = pa.Table.from_arrays(slow_keys, schema=pa.schema(self.key_fields))
            out[j] = accumulators.Spelled(slow, store.extreme(name, probe, "min"))
        return out

    def _update_values(self, k: Kernels, memo: dict, store: StateStore, d: Rel, partial: pa.Table | None,
                       keys: pa.Table) -> tuple[pa.Table | None, dict[int, pa.Table]]:
        """Apply the change's (group, value[, ORDER BY keys]) rows to each DISTINCT aggregate's and
        string_agg's multiset: ``partial`` with the DISTINCT aggregates' ``n{j}``/``s{j}`` (Σ presence
        transitions, see ``linear_aggs``), and per string_agg ``j`` its touched groups' new results."""
        aggs = self.node.aggs
        exprs = list(self.node.group)
        fields = [pa.field(f"g{i}", g.type.arrow) for i, g in enumerate(self.node.group)]
        for j in self.value_aggs:
            exprs.append(aggs[j].arg)  # type: ignore[arg-type]
            fields.append(pa.field(f"a{j}", aggs[j].arg.type.arrow))  # type: ignore[union-attr]
            for m, o in enumerate(aggs[j].order):
                exprs.append(o.expr)
                fields.append(pa.field(f"o{j}_{m}", o.expr.type.arrow))
        table = k.evaluate(d, exprs, pa.schema(fields + [pa.field(WEIGHT, pa.int64())]), memo.setdefault("values", {}))
        enc = self.encode_keys(table)
        weight = table.column(WEIGHT)
        partial_keys = None
        if partial is not None:
            partial_keys = [accumulators._cast(c, f.type) for c, f in zip(
                accumulators.encode_keys([partial.column(f"g{i}") for i in range(self.ngroups)], self.group_types),
                self.key_fields)]
        recomputed: dict[int, pa.Table] = {}
        for j, name in zip(self.value_aggs, self.state.values):
            a = aggs[j]
            if a.recomputed:
                order_cols = [table.column(f"o{j}_{m}") for m in range(len(a.order))]
                ordered_aggs.apply_changes(store, name, a, enc, table.column(f"a{j}"), order_cols, weight, self.key_names,
                                           clamp=self._clamp)
                recomputed[j] = ordered_aggs.recompute(store, name, a, keys, self.key_names)
                continue
            parts = _acc_types(a)
            groups = linear_aggs.distinct_partials(store, name, enc, table.column(f"a{j}"), weight, parts,
                                                   self.key_names, clamp=self._clamp)
            if partial is not None:
                partial = linear_aggs.add_to_partial(partial, partial_keys, groups, self.key_names, j, parts)
        return partial, recomputed
