"""``IncrementalFlow.load_source``: a source's copy filled in bulk equals the same chunks ticked one by one
(rows, weights, refusals), with NULLs and duplicates; the store's bulk side (runs, the duplicate check)."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshview import IncrementalFlow
from freshview.algebra import parallel
from freshview.errors import DeltaError, StateError
from freshview.runtime.state import bulk, runs
from freshview.runtime.state.layout import Layout
from freshview.runtime.state.store import SpineStateStore

SCHEMA = "k INT, j INT, v TEXT"
ROW = st.tuples(st.one_of(st.none(), st.integers(0, 12)), st.integers(0, 2),
                st.one_of(st.none(), st.sampled_from(["a", "b", "ß"])))
CHUNKS = st.lists(st.lists(ROW, max_size=8), max_size=5)


def table(rows, weights=None) -> pa.Table:
    k, j, v = zip(*rows) if rows else ((), (), ())
    t = pa.table({"k": pa.array(k, pa.int32()), "j": pa.array(j, pa.int32()), "v": pa.array(v, pa.string())})
    return t if weights is None else t.append_column("_weight", pa.array(weights, pa.int64()))


def state(flow: IncrementalFlow) -> list:
    rows = flow.snapshot("t", weighted=True).to_pylist()
    return sorted(rows, key=lambda r: tuple((x is None, str(x)) for x in r.values()))


def outcome(flow: IncrementalFlow, chunks, bulk_load: bool):
    """(the rows and weights, None) after loading ``chunks``, or (None, the refusal)."""
    try:
        if bulk_load:
            flow.load_source("t", [table(c) for c in chunks])
        else:
            for c in chunks:
                if c:
                    flow.tick("t", table(c, [1] * len(c)))
    except DeltaError as exc:
        return None, exc
    return state(flow), None


def true_refusal(error: DeltaError, chunks, key: list[str]) -> None:
    """The bulk load's refusal is true of the chunks: a NULL key column, or the key it names repeated."""
    text = str(error)
    rows = [r for c in chunks for r in c]
    assert text.startswith("source 't': ")
    if "is NULL" in text:
        column = text.split("'")[3]
        assert any(r[["k", "j", "v"].index(column)] is None for r in rows)
        return
    assert "duplicate primary key" in text, text
    named = text.split("(")[1].split(")")[0]
    counts: dict = {}
    for r in rows:
        kv = ", ".join(f"{n}={r[['k', 'j', 'v'].index(n)]!r}" for n in key)
        counts[kv] = counts.get(kv, 0) + 1
    assert counts.get(named, 0) > 1, (named, counts)


@pytest.mark.parametrize("key", [["k"], ["k", "j"], None])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=CHUNKS)
def test_bulk_load_equals_the_stepwise_load(tmp_path_factory, key, chunks):
    base = tmp_path_factory.mktemp("bulk")
    with IncrementalFlow(state_dir=base / "bulk", execution="local") as a, \
            IncrementalFlow(state_dir=base / "steps", execution="local") as b:
        for f in (a, b):
            f.register_source("t", SCHEMA, primary_key=key)
        got, refused = outcome(a, chunks, True)
        want, step_refused = outcome(b, chunks, False)
        assert (refused is None) == (step_refused is None), (refused, step_refused)
        if refused is None:
            assert got == want
            assert a.metrics()["rows_in_total"] == sum(len(c) for c in chunks)
        else:
            true_refusal(refused, chunks, key or [])
            assert a.snapshot("t").num_rows == 0  # a refused load leaves nothing
            assert a.step == 0


def test_a_refused_load_names_the_source_and_key_and_the_flow_goes_on(tmp_path):
    with IncrementalFlow(state_dir=tmp_path / "f", execution="local", first_computation="local") as f:
        f.register_source("t", SCHEMA, primary_key=["k"])
        with pytest.raises(DeltaError, match=r"source 't': duplicate primary key \(k=7\)"):
            f.load_source("t", [table([(1, 0, "a"), (7, 0, "a")]), table([(3, 0, None)]), table([(7, 1, "b")])])
        with pytest.raises(DeltaError, match=r"source 't': primary key column 'k' is NULL"):
            f.load_source("t", [table([(1, 0, "a")]), table([(None, 0, "a")])])
        with pytest.raises(DeltaError, match=r"source 't': a bulk load inserts rows, but \(k=2, j=0, v='x'\) "
                                             r"has weight -1"):
            f.load_source("t", [table([(2, 0, "x")], [-1])])
        assert f.load_source("t", [table([(1, 0, "a"), (2, 0, None)])]) == 2
        f.register_view("s", "SELECT j, COUNT(*) AS n FROM t GROUP BY j")
        assert f.snapshot("s").to_pylist() == [{"j": 0, "n": 2}]
        # a view reads it now: the chunks are steps (the same checks, the view follows)
        assert f.load_source("t", [table([(3, 1, "c")]), table([(4, 1, "d")])]) == 2
        assert sorted(f.snapshot("s").to_pylist(), key=lambda r: r["j"]) == [{"j": 0, "n": 2}, {"j": 1, "n": 2}]
        with pytest.raises(DeltaError, match="duplicate primary key"):
            f.load_source("t", [table([(3, 0, "again")])])


def test_a_bulk_load_survives_a_restart_and_spills_to_run_files(tmp_path, monkeypatch):
    monkeypatch.setattr(bulk, "RUN_ROWS", 1000)  # several runs of a few chunks each
    n = 300_000
    keys = np.arange(n, dtype=np.int32)[::-1]
    chunks = [pa.table({"k": keys[i:i + 50_000], "j": keys[i:i + 50_000] % 3, "v": pa.nulls(50_000, pa.string())})
              for i in range(0, n, 50_000)]
    with IncrementalFlow(state_dir=tmp_path / "f", execution="local") as f:
        f.register_source("t", SCHEMA, primary_key=["k"])
        assert f.load_source("t", iter(chunks)) == n
        assert list((tmp_path / "f" / "runs").iterdir())  # large runs went to their own files
    with IncrementalFlow(state_dir=tmp_path / "f", execution="local") as f:
        assert f.step == 1 and f.snapshot("t").num_rows == n
        f.register_view("s", "SELECT j, COUNT(*) AS n FROM t GROUP BY j")
        assert sorted(r["n"] for r in f.snapshot("s").to_pylist()) == [100_000] * 3
        assert "first computation: local (auto: 300000 input rows" in f.explain("s")


# ---------------------------------------------------------------------- the store's bulk side
LAYOUT = Layout(pa.schema([("c0", pa.int64()), ("c1", pa.string())]), ("c0",))


def weighted(keys, values, weights=None) -> pa.Table:
    return pa.table({"c0": pa.array(keys, pa.int64()), "c1": pa.array(values, pa.string()),
                     "_weight": pa.array(weights or [1] * len(keys), pa.int64())})


@pytest.mark.parametrize("merge_rows", [0, bulk.MERGE_ROWS])  # left as several runs / merged into one
def test_load_runs_adds_weights_across_batches_and_repeated_finds_every_key_held_twice(tmp_path, monkeypatch,
                                                                                    merge_rows):
    monkeypatch.setattr(bulk, "MERGE_ROWS", merge_rows)
    store = SpineStateStore(tmp_path / "s")
    try:
        store.ensure_arrangement("a", LAYOUT)
        batches = [weighted([1, 2, 3], ["x", "y", "z"]), weighted([4, 2], ["w", "y2"]),
                   weighted([5, None, None], ["v", "n1", "n2"]), weighted([6, 6], ["u", "u"])]
        store.begin()
        assert store.load_runs("a", iter(batches)) == 10
        assert len(store._catalog["a"].runs) == (1 if merge_rows else 4)  # (before the background merges)
        store.commit()
        assert store.count("a") == 9  # (6, 'u') twice is one row of weight 2
        twice = sorted(store.repeated("a").to_pylist(), key=lambda r: (r["c0"] is None, r["c0"] or 0))
        assert twice == [{"c0": 2, "_weight": 2}, {"c0": 6, "_weight": 2}, {"c0": None, "_weight": 2}]
        with pytest.raises(StateError, match="not empty"):
            store.load_runs("a", [weighted([9], ["q"])])
    finally:
        store.close()


def test_a_load_that_fails_midway_leaves_the_arrangement_empty(tmp_path):
    store = SpineStateStore(tmp_path / "s")
    try:
        store.ensure_arrangement("a", LAYOUT)

        def batches():
            yield weighted([1], ["x"])
            raise RuntimeError("the snapshot broke")
        with pytest.raises(RuntimeError):
            store.load_runs("a", batches())
        assert store.count("a") == 0
        assert store.load_runs("a", [weighted([1], ["x"])]) == 1
    finally:
        store.close()


def test_repeated_is_empty_for_distinct_keys_even_when_hashes_collide():
    run = runs.build_run(weighted(list(range(1000)), ["x"] * 1000), LAYOUT)
    collided = runs.Run(run.table.set_column(run.table.schema.get_field_index(runs.KEY_HASH), runs.KEY_HASH,
                                             pa.array(np.full(1000, 7, np.uint64))))
    assert bulk.repeated([collided], LAYOUT).num_rows == 0  # every key proposes itself: the comparison decides
    assert bulk.repeated([collided, collided], LAYOUT).num_rows == 1000


def test_ahead_computes_on_a_helper_in_order_and_raises_either_sides_error():
    pulled: list[int] = []

    def items():
        for i in range(5):
            pulled.append(i)
            yield i

    def fn(x: int) -> tuple[int, str, int]:
        return x * 10, threading.current_thread().name, len(pulled)

    got = list(bulk.ahead(fn, items()))
    assert [g[0] for g in got] == [0, 10, 20, 30, 40]
    assert all(g[1].startswith("freshview-bulk") for g in got)
    assert list(bulk.ahead(fn, iter([]))) == []

    def broken():
        yield 1
        raise RuntimeError("the snapshot broke")
    with pytest.raises(RuntimeError, match="the snapshot broke"):
        list(bulk.ahead(fn, broken()))

    def refuse(x: int) -> int:
        if x == 3:
            raise StateError("run 3 does not fit")
        return x
    with pytest.raises(StateError, match="run 3 does not fit"):
        list(bulk.ahead(refuse, items()))


@pytest.mark.parametrize("merge_rows", [0, bulk.MERGE_ROWS])
def test_a_load_built_on_threads_equals_the_same_rows_applied(tmp_path, monkeypatch, merge_rows):
    # Hashing, sorting and reordering split over threads (every piece of 8+ rows), runs of ~300 rows
    # built on the helper: the arrangement holds exactly what one apply of all the rows holds.
    monkeypatch.setattr(parallel, "MIN_ROWS", 8)
    monkeypatch.setattr(parallel, "WORKERS", 3)
    monkeypatch.setattr(bulk, "MERGE_ROWS", merge_rows)
    rng = np.random.default_rng(7)
    batches = [weighted([None if k == 0 else int(k) for k in rng.integers(0, 400, 120)],
                        [None if v == 0 else "v" * int(v) for v in rng.integers(0, 4, 120)]) for _ in range(10)]
    store = SpineStateStore(tmp_path / "s")
    try:
        store.ensure_arrangement("a", LAYOUT)
        store.ensure_arrangement("b", LAYOUT)
        assert store.load_runs("a", bulk.regroup(iter(batches), 300)) == 1200
        store.apply("b", pa.concat_tables(batches))
        assert len(store._catalog["a"].runs) == (1 if merge_rows else 4)
        for name in ("a", "b"):
            assert store.committed_runs(name)[1]
        key = (lambda r: (r["c0"] is None, r["c0"] or 0, r["c1"] is None, r["c1"] or ""))
        assert sorted(store.scan("a").to_pylist(), key=key) == sorted(store.scan("b").to_pylist(), key=key)
        probe = pa.table({"c0": pa.array([None, 1, 5, 399, 7], pa.int64())})
        assert sorted(store.lookup("a", probe).to_pylist(), key=key) == \
            sorted(store.lookup("b", probe).to_pylist(), key=key)
        assert store.repeated("a").num_rows > 0
    finally:
        store.close()
