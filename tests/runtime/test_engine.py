"""runtime.engine: the two-phase step (prepare → commit | abort) and the source operator's delta forms.

* ``prepare`` then ``abort`` leaves the store (every arrangement, every meta key) and the engine exactly as
  they were; ``prepare`` then ``commit`` equals the same change committed at once, and a step aborted
  first and prepared again ends where one never aborted does (under both executors);
* a failure inside ``prepare`` rolls back before it raises; one prepared step at a time;
* keyed changes (upserts, deletes, checks, truncate, late rows, copies of key-less rows) equal the
  weighted change they stand for, with one lookup of the source's copy per step.
"""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from freshview.errors import DeltaError, ExecutionError, StateError
from freshview.runtime.engine import Engine
from freshview.runtime.operators.source import ChangeRefused, SourceChange, checks
from freshview.runtime.state import SpineStateStore
from freshview.schema import WEIGHT, schema_from_ddl
from freshview.sql import build_plan

ORDERS = schema_from_ddl("id INT, customer INT, amount NUMERIC(10,2)", ["id"])
CUSTOMERS = schema_from_ddl("cid INT, name TEXT", ["cid"])
EVENTS = schema_from_ddl("kind TEXT, qty INT")  # no primary key
VIEWS = {
    "totals": "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer",
    "named": "SELECT c.name, o.amount FROM orders o JOIN customers c ON o.customer = c.cid",
    "big": "SELECT customer FROM totals WHERE total > 10",  # a view over a view
    "kinds": "SELECT kind, SUM(qty) AS q FROM events GROUP BY kind",
}


class Catalog:
    """The SQL front end's catalog over an engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def relation_columns(self, name: str):
        if name in self.engine.sources:
            return tuple((c.name, c.type) for c in self.engine.sources[name].schema.columns), False
        if name in self.engine.views:
            return self.engine.views[name].columns, True
        return None


def make_engine(path, spark=None, execution="local", views=VIEWS, **kwargs) -> Engine:
    engine = Engine(SpineStateStore(path), execution=execution, first_computation="local", spark=spark, **kwargs)
    with engine.transaction():
        for name, schema in (("orders", ORDERS), ("customers", CUSTOMERS), ("events", EVENTS)):
            engine.add_source(name, schema)
    for name, sql in views.items():
        view = engine.compile(name, build_plan(sql, Catalog(engine)))
        with engine.transaction():
            engine.add_views([view], engine.contents)
    return engine


def orders(rows, weight=1):
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int32()),
                     "customer": pa.array([r[1] for r in rows], pa.int32()),
                     "amount": pa.array([Decimal(r[2]) for r in rows], pa.decimal128(10, 2)),
                     WEIGHT: pa.array([weight] * len(rows), pa.int64())})


def customers(rows, weight=1):
    return pa.table({"cid": pa.array([r[0] for r in rows], pa.int32()), "name": [r[1] for r in rows],
                     WEIGHT: pa.array([weight] * len(rows), pa.int64())})


def events(rows, weight=1):
    return pa.table({"kind": [r[0] for r in rows], "qty": pa.array([r[1] for r in rows], pa.int32()),
                     WEIGHT: pa.array([weight] * len(rows), pa.int64())})


def contents(engine: Engine) -> dict:
    """Everything the store holds: every arrangement's rows and every meta value."""
    store = engine.store
    out = {name: sorted(map(repr, store.scan(name).to_pylist())) for name in store.list_arrangements()}
    out["(meta)"] = dict(store._meta)  # (the store's JSON text per key)
    return out


def step(engine: Engine, changes: dict) -> dict:
    prepared = engine.prepare(changes)
    outputs = prepared.outputs
    prepared.commit()
    return outputs


def rows(table: pa.Table) -> list:
    return sorted(map(repr, table.to_pylist()))


def history(engine: Engine) -> None:
    step(engine, {"orders": SourceChange(rows=orders([(1, 10, "5"), (2, 10, "7"), (3, 11, "1")])),
                  "customers": SourceChange(rows=customers([(10, "ann"), (11, "bob")])),
                  "events": SourceChange(rows=events([("a", 1), ("a", 1), ("b", 2)]))})
    step(engine, {"orders": SourceChange(upserts=orders([(3, 11, "20")]).drop_columns([WEIGHT]))})


# ---------------------------------------------------------------------- two phases
NEXT = {"orders": SourceChange(rows=orders([(4, 11, "3")]), upserts=orders([(1, 12, "9")]).drop_columns([WEIGHT]),
                               deletes=pa.table({"id": pa.array([2], pa.int32())})),
        "customers": SourceChange(rows=customers([(12, "cy")])),
        "events": SourceChange(deletes=events([("a", 1)], 2), rows=events([("c", 3)]))}


@pytest.mark.parametrize("execution", ["local", "spark"])
def test_abort_leaves_everything_as_it_was_and_commit_equals_one_never_aborted(request, tmp_path, execution):
    spark = request.getfixturevalue("spark") if execution == "spark" else None
    engine, twin = make_engine(tmp_path / "a", spark, execution), make_engine(tmp_path / "b", spark, execution)
    try:
        history(engine)
        history(twin)
        before = contents(engine)
        prepared = engine.prepare(NEXT)
        assert set(prepared.outputs) == {"totals", "named", "big", "kinds"}
        assert prepared.outputs["totals"].column_names == ["customer", "total", "n", WEIGHT]  # the view's names
        assert engine.step == 3 and contents(engine) != before
        prepared.abort()
        assert contents(engine) == before and engine.step == 2
        again = engine.prepare(NEXT)
        outputs = {n: rows(t) for n, t in again.outputs.items()}
        assert again.commit().step == 3
        assert {n: rows(t) for n, t in step(twin, NEXT).items()} == outputs
        assert contents(engine) == contents(twin)
        assert rows(engine.rows("totals")) == rows(pa.table({
            "customer": pa.array([11, 12], pa.int32()), "total": pa.array([Decimal("23"), Decimal("9")]),
            "n": pa.array([2, 1], pa.int64())}).cast(engine.rows("totals").schema))
    finally:
        engine.store.close()
        twin.store.close()


def test_a_failure_inside_prepare_rolls_back_before_it_raises(tmp_path):
    engine = make_engine(tmp_path / "a", views={**VIEWS, "ratio": "SELECT 100 / (qty - 3) AS r FROM events"})
    try:
        history(engine)
        before = contents(engine)
        with pytest.raises(ExecutionError, match="division by zero") as caught:
            engine.prepare({"orders": SourceChange(rows=orders([(9, 10, "1")])),
                            "events": SourceChange(rows=events([("z", 3)]))})
        assert caught.value.view == "ratio"
        with pytest.raises(DeltaError, match="delete of a row that is not present") as caught:
            engine.prepare({"orders": SourceChange(rows=orders([(9, 10, "1")], -1))})
        assert caught.value.source == "orders"
        assert contents(engine) == before and engine.step == 2
        step(engine, {"orders": SourceChange(rows=orders([(9, 10, "1")]))})  # and it goes on
        assert engine.step == 3
    finally:
        engine.store.close()


def test_one_prepared_step_at_a_time(tmp_path):
    engine = make_engine(tmp_path / "a", views={})
    try:
        with engine.prepare({"orders": SourceChange(rows=orders([(1, 10, "5")]))}) as prepared:
            with pytest.raises(StateError, match="a prepared step is open"):
                engine.prepare({"orders": SourceChange(rows=orders([(2, 10, "5")]))})
            with pytest.raises(StateError, match="a prepared step is open"):
                with engine.transaction():
                    pass
            prepared.set_meta("app/position", "0/16")
        assert prepared.state == "aborted" and engine.store.count("source/orders") == 0  # left without commit
        assert engine.store.get_meta("app/position") is None
        prepared = engine.prepare({"orders": SourceChange(rows=orders([(2, 10, "5")]))})
        prepared.set_meta("app/position", "0/17")
        prepared.commit()
        with pytest.raises(StateError, match="committed already"):
            prepared.commit()
        assert engine.store.get_meta("app/position") == "0/17" and engine.step == 1
    finally:
        engine.store.close()


def test_a_process_killed_between_prepare_and_commit_keeps_the_last_step(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = f"""
import os, sys
sys.path[:0] = [{str(root / 'src')!r}, {str(root)!r}]
import pyarrow as pa
from freshview import IncrementalFlow
flow = IncrementalFlow(state_dir={str(tmp_path / 'killed')!r}, execution="local", first_computation="local")
flow.register_source("t", "k INT, v INT", primary_key=["k"])
flow.register_view("s", "SELECT SUM(v) AS s FROM t")
flow.tick("t", pa.table({{"k": [1], "v": [5], "_weight": [1]}}))
step = flow.prepare("t", pa.table({{"k": [2], "v": [7], "_weight": [1]}}))
step.set_meta("position", "two")
assert step.outputs["s"].num_rows == 2
os._exit(0)  # killed before the commit
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    from freshview import IncrementalFlow

    with IncrementalFlow(state_dir=tmp_path / "killed", execution="local") as flow:
        assert flow.step == 1 and flow.get_meta("position") is None
        assert flow.snapshot("s").to_pylist() == [{"s": 5}]
        flow.tick("t", pa.table({"k": [2], "v": pa.array([7], pa.int32()), "_weight": [1]}))
        assert flow.snapshot("s").to_pylist() == [{"s": 12}]


# ---------------------------------------------------------------------- keyed changes
def test_keyed_changes_equal_their_weighted_change_with_one_lookup(tmp_path, monkeypatch):
    engine, twin = make_engine(tmp_path / "a"), make_engine(tmp_path / "b")
    try:
        history(engine)
        history(twin)
        lookups = []
        for method in ("lookup", "lookup_prepared"):  # the source operator reads with the prepared rows
            original = getattr(engine.store, method)
            monkeypatch.setattr(engine.store, method,
                                lambda name, keys, original=original: lookups.append(name) or original(name, keys))
        step(engine, NEXT)
        assert lookups.count("source/orders") == 1 and lookups.count("source/events") == 1
        weighted = pa.concat_tables([orders([(4, 11, "3"), (1, 12, "9")]), orders([(1, 10, "5"), (2, 10, "7")], -1)])
        step(twin, {"orders": SourceChange(rows=weighted),
                    "customers": SourceChange(rows=customers([(12, "cy")])),
                    "events": SourceChange(rows=pa.concat_tables([events([("a", 1)], -2), events([("c", 3)])]))})
        assert contents(engine) == contents(twin)
        # A key-less row's deletes remove the copies present, at most: one (b, 2) of the asked three.
        prepared = engine.prepare({"events": SourceChange(deletes=events([("b", 2)], 3))})
        assert rows(prepared.source_changes["events"]) == rows(events([("b", 2)], -1))
        prepared.abort()
    finally:
        engine.store.close()
        twin.store.close()


def test_checks_refuse_the_least_ordered_failure_and_nothing_is_applied(tmp_path):
    engine = make_engine(tmp_path / "a", views={})
    try:
        history(engine)
        before = contents(engine)
        keys = pa.table({"id": pa.array([1, 2, 7], pa.int32())})
        wanted = checks(keys, [1, 0, 1], pa.array([None, 0, None], pa.int64()), [5, 4, 3])
        with pytest.raises(ChangeRefused) as caught:
            engine.prepare({"orders": SourceChange(checks=wanted)})
        assert caught.value.order == 3 and caught.value.key == {"id": 7} and caught.value.found == 0
        assert "(id=7) is not present" in str(caught.value)
        with pytest.raises(ChangeRefused) as caught:  # id 2 is there: "absent" fails
            engine.prepare({"orders": SourceChange(checks=checks(keys.slice(1, 1), 0, 0, 0))})
        assert "(id=2) is not absent (found 1)" in str(caught.value)
        copies = checks(events([("a", 1)]).drop_columns([WEIGHT]), 3, None, 0)
        with pytest.raises(ChangeRefused, match=r"is not held at least 3 times \(found 2\)"):
            engine.prepare({"events": SourceChange(checks=copies)})
        with pytest.raises(DeltaError, match=r"key \(id=1\) is upserted or deleted twice"):
            engine.prepare({"orders": SourceChange(upserts=orders([(1, 10, "1")]).drop_columns([WEIGHT]),
                                                   deletes=pa.table({"id": pa.array([1], pa.int32())}))})
        with pytest.raises(DeltaError, match="primary key column 'id' is NULL"):
            engine.prepare({"orders": SourceChange(deletes=pa.table({"id": pa.array([None], pa.int32())}))})
        with pytest.raises(DeltaError, match="duplicate primary key"):  # an upsert meeting a weighted insert
            engine.prepare({"orders": SourceChange(rows=orders([(8, 1, "1")]),
                                                   upserts=orders([(8, 1, "2")]).drop_columns([WEIGHT]))})
        assert contents(engine) == before
        step(engine, {"orders": SourceChange(checks=wanted.slice(0, 1))})  # a check alone, kept: nothing changes
        assert engine.rows("orders").num_rows == 3
    finally:
        engine.store.close()


def test_truncate_and_late_rows(tmp_path):
    clock = [1000.0]
    engine = make_engine(tmp_path / "a", state_ttl=100.0, clock=lambda: clock[0])
    try:
        engine.sync_ttl()
        history(engine)
        step(engine, {"orders": SourceChange(truncate=True, upserts=orders([(2, 10, "1")]).drop_columns([WEIGHT]))})
        assert rows(engine.rows("orders")) == rows(orders([(2, 10, "1")]).drop_columns([WEIGHT]))
        clock[0] += 500  # every key is evicted at the next step
        step(engine, {"customers": SourceChange(rows=customers([(13, "dee")]))})
        assert engine.rows("orders").num_rows == 0
        # A key the copy lost: its late row reaches the views (the join still holds it), not the copy.
        late = orders([(2, 10, "1")]).drop_columns([WEIGHT])
        prepared = engine.prepare({"orders": SourceChange(deletes=pa.table({"id": pa.array([2], pa.int32())}),
                                                          late=late)})
        assert prepared.summary.late_deletes == 1
        assert rows(prepared.source_changes["orders"]) == rows(orders([(2, 10, "1")], -1))
        prepared.commit()
    finally:
        engine.store.close()
