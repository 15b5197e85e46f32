"""SpineStateStore against a pure-Python model: random writes, reads, transactions, reopening, crashes.

Thresholds are shrunk so a few rows already take every path: large and small
merges, waiting for them, runs in their own files, indexes, checkpoints.  A
variant keeps only 3 bits of every hash, so nearly all keys and rows
collide and every exact comparison behind the hashes is exercised.
"""

from __future__ import annotations

import datetime as dt
import math
import tempfile
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshview.algebra import hashing, parallel
from freshview.runtime.state import SpineStateStore, policy, runs
from freshview.runtime.state.layout import Layout, NullKeys

UTC = dt.timezone.utc
SCHEMA = pa.schema([("k", pa.int32()), ("s", pa.string()), ("f", pa.float64()), ("d", pa.decimal128(38, 6)),
                    ("t", pa.timestamp("ms", tz="UTC"))])
NAMES = SCHEMA.names
DOMAINS = {
    "k": [None, 0, 1, -1, 2**31 - 1],
    "s": [None, "", "a", "é", "a\x00", "ü✓", "B"],
    "f": [None, 0.0, -0.0, 1.5, -1.5, math.nan, math.inf, -math.inf],
    "d": [None, Decimal(0), Decimal("1.5"), Decimal("-1e30"), Decimal("99999999999999999999999999999999.999999")],
    "t": [None, dt.datetime(1960, 1, 1, tzinfo=UTC), dt.datetime(2024, 2, 29, 12, tzinfo=UTC)],
}
NAN = ("NaN",)  # NaN as the model holds it: a value equal to itself
KEYS = [(), ("k",), ("k", "s"), ("f",), ("d", "t")]


def norm(value):
    if isinstance(value, float):
        return NAN if math.isnan(value) else value + 0.0
    return value


def sql_order(value):
    """SQL's order of a value: NaN above every number, strings by UTF-8 bytes."""
    if value is NAN:
        return (1, 0.0)
    if isinstance(value, float):
        return (0, value)
    return value.encode() if isinstance(value, str) else value


def rows_of(t: pa.Table) -> dict:
    out: dict = {}
    for r in t.to_pylist():
        w = r.pop("_weight")
        r.pop("_old_weight", None)
        out[tuple(norm(v) for v in r.values())] = w
    return out


def delta_table(rows: list[tuple], weights: list[int]) -> pa.Table:
    cols = [pa.array([r[i] for r in rows], f.type) for i, f in enumerate(SCHEMA)]
    return pa.Table.from_arrays(cols + [pa.array(weights, pa.int64())], names=NAMES + ["_weight"])


def key_table(layout: Layout, probes: list[tuple]) -> pa.Table:
    if not layout.key:
        return pa.table({"x": [1]}).drop(["x"])
    return pa.table({k: pa.array([p[i] for p in probes], SCHEMA.field(k).type) for i, k in enumerate(layout.key)})


class Model:
    """The arrangement as a dict of normalised rows to weights, and metadata."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.rows: dict = defaultdict(int)
        self.meta: dict = {}
        self.positions = [NAMES.index(k) for k in layout.key]

    def copy(self) -> "Model":
        other = Model(self.layout)
        other.rows, other.meta = defaultdict(int, self.rows), dict(self.meta)
        return other

    def live(self) -> dict:
        return {r: w for r, w in self.rows.items() if w}

    def apply(self, rows: list[tuple], weights: list[int]) -> dict:
        before = {}
        for r, w in zip(rows, weights):
            r = tuple(norm(v) for v in r)
            before.setdefault(r, self.rows[r])
            self.rows[r] += w
        return {r: (old, self.rows[r]) for r, old in before.items()}

    def matching(self, probes: list[tuple]) -> set:
        keys = {tuple(norm(v) for v in p) for p in probes}
        if self.layout.nulls is NullKeys.DISTINCT:
            keys = {k for k in keys if None not in k}
        return keys

    def key(self, row: tuple) -> tuple:
        return tuple(row[i] for i in self.positions)

    def lookup(self, probes: list[tuple]) -> dict:
        if not self.layout.key:
            return self.live()
        keys = self.matching(probes)
        return {r: w for r, w in self.live().items() if self.key(r) in keys}

    def extreme(self, probes: list[tuple], kind: str) -> dict:
        keys = self.matching(probes) if self.layout.key else {()}
        pos = NAMES.index(self.layout.order)
        best: dict = {}
        for r, w in self.rows.items():
            if w > 0 and r[pos] is not None and self.key(r) in keys:
                k = self.key(r)
                if k not in best or (sql_order(r[pos]) < sql_order(best[k])) == (kind == "min"):
                    best[k] = r[pos]
        return best


def rows_strategy():
    return st.lists(st.tuples(st.tuples(*[st.sampled_from(DOMAINS[n]) for n in NAMES]), st.integers(-2, 3)),
                    max_size=10)


def probes_strategy(layout: Layout):
    return st.lists(st.tuples(*[st.sampled_from(DOMAINS[k]) for k in layout.key]), max_size=6)


@pytest.fixture
def small_thresholds(monkeypatch):
    monkeypatch.setattr(policy, "LARGE_ROWS", 12)
    monkeypatch.setattr(policy, "MAX_RUNS", 6)
    monkeypatch.setattr(policy, "FILE_ROWS", 20)
    monkeypatch.setattr(parallel, "MIN_ROWS", 8)  # hashing, sorting, reordering split over threads too
    monkeypatch.setattr(parallel, "WORKERS", 2)
    monkeypatch.setattr(runs, "INDEX_MIN_ROWS", 8)


@pytest.fixture(params=["hashes", "3-bit hashes"])
def hash_quality(request, monkeypatch):
    if request.param == "3-bit hashes":
        full = hashing.hash_rows
        monkeypatch.setattr(hashing, "hash_rows", lambda *a, **kw: full(*a, **kw) & np.uint64(7))
    return request.param


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data(), nulls=st.sampled_from(list(NullKeys)), key=st.sampled_from(KEYS),
       order=st.sampled_from([None, "f", "d", "s", "t"]))
def test_store_matches_the_model(small_thresholds, hash_quality, data, nulls, key, order):
    if order in key:
        order = None
    layout = Layout(SCHEMA, key, nulls, order)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "st"
        store = SpineStateStore(directory, cache_mb=0.004)
        store.ensure_arrangement("a", layout)
        model = Model(layout)
        try:
            for _ in range(data.draw(st.integers(5, 25), label="steps")):
                store = run_step(data, store, model, directory)
        finally:
            store.close()


def run_step(data, store: SpineStateStore, model: Model, directory: Path) -> SpineStateStore:
    layout = model.layout
    op = data.draw(st.sampled_from(["apply", "apply", "retract", "report", "tx", "lookup", "extreme", "reopen",
                                    "crash"]), label="op")
    if op in ("apply", "retract", "report"):
        changes = data.draw(rows_strategy(), label="rows")
        if op == "retract" and model.live():  # take back some stored rows, often all of their weight
            live = sorted(model.live().items(), key=repr)
            picked = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=5), label="retract")
            changes = [(tuple(math.nan if v is NAN else v for v in r), -w) for r, w in picked]
        rows, weights = [r for r, _ in changes], [w for _, w in changes]
        if op == "report":
            got = store.apply_report("a", delta_table(rows, weights))
            want = model.apply(rows, weights)
            got_rows = {tuple(norm(v) for v in r[:len(NAMES)]): (r[-2], r[-1])
                        for r in (tuple(d.values()) for d in got.to_pylist())}
            assert got_rows == want
        else:
            store.apply("a", delta_table(rows, weights))
            model.apply(rows, weights)
    elif op == "tx":
        inner = model.copy()
        store.begin()
        for _ in range(data.draw(st.integers(1, 3), label="writes")):
            changes = data.draw(rows_strategy(), label="tx rows")
            store.apply("a", delta_table([r for r, _ in changes], [w for _, w in changes]))
            inner.apply([r for r, _ in changes], [w for _, w in changes])
        step = data.draw(st.integers(0, 9), label="meta")
        store.set_meta("step", step)
        inner.meta["step"] = step
        assert rows_of(store.scan("a")) == inner.live()  # the transaction reads its own writes
        if data.draw(st.booleans(), label="commit"):
            store.commit()
            model.rows, model.meta = inner.rows, inner.meta
        else:
            store.rollback()
    elif op == "lookup":
        probes = data.draw(probes_strategy(layout), label="probes")
        assert rows_of(store.lookup("a", key_table(layout, probes))) == model.lookup(probes)
    elif op == "extreme" and layout.order:
        probes = data.draw(probes_strategy(layout), label="probes")
        kind = data.draw(st.sampled_from(["min", "max"]), label="kind")
        got = store.extreme("a", key_table(layout, probes), kind).to_pylist()
        assert {tuple(norm(r[k]) for k in layout.key): norm(r[layout.order]) for r in got} == \
            model.extreme(probes, kind)
    elif op in ("reopen", "crash"):
        if op == "reopen":
            store.close()
        else:
            store._release()  # killed: no checkpoint, no merge results
        store = SpineStateStore(directory, cache_mb=0.004)
    assert rows_of(store.scan("a")) == model.live()
    assert store.count("a") == len(model.live())
    assert store.get_meta("step") == model.meta.get("step")
    return store
