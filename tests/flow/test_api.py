"""IncrementalFlow's contract: registration, tick forms and validation, atomicity, resume, watch, explain."""

from __future__ import annotations

import decimal

import pandas as pd
import pyarrow as pa
import pytest

from freshview import (
    CatalogError, DeltaError, ExecutionError, IncrementalFlow, UnknownColumnError, UnsupportedSqlError,
)

D = decimal.Decimal
ORDERS = "o_id INT, o_customer INT, amount NUMERIC(10,2)"


def orders(rows, weight=1):
    return pa.table({
        "o_id": pa.array([r[0] for r in rows], pa.int32()),
        "o_customer": pa.array([r[1] for r in rows], pa.int32()),
        "amount": pa.array([D(str(r[2])) if r[2] is not None else None for r in rows], pa.decimal128(10, 2)),
        "_weight": pa.array([weight] * len(rows), pa.int64()),
    })


def rows(table):
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.fixture
def flow(make_flow):
    f = make_flow()
    f.register_source("orders", ORDERS, primary_key=["o_id"])
    f.register_view("totals", "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer")
    return f


def test_tick_consolidates_and_reports(flow):
    s = flow.tick("orders", orders([(1, 10, 5), (2, 10, 7), (3, 11, 1)]))
    assert s.rows_in == 3 and s.rows_out == 2 and s.duration_ms > 0
    assert s.views["totals"].rows_out == 2 and not s.views["totals"].skipped
    assert rows(flow.snapshot("totals")) == [(10, D("12.00"), 2), (11, D("1.00"), 1)]
    # an update: old row at -1, new row at +1
    delta = pa.concat_tables([orders([(1, 10, 5)], -1), orders([(1, 11, 6)])])
    flow.tick("orders", delta)
    assert rows(flow.snapshot("totals")) == [(10, D("7.00"), 1), (11, D("7.00"), 2)]


def test_pandas_delta_and_multi_source_tick(make_flow):
    f = make_flow()
    f.register_source("a", "k INT, v INT", primary_key=["k"])
    f.register_source("b", "k INT, w TEXT")  # no key: a bag
    f.register_view("j", "SELECT a.k, v, w FROM a JOIN b ON a.k = b.k")
    f.tick({"a": pd.DataFrame({"k": [1, 2], "v": [10, 20], "_weight": [1, 1]}),
            "b": pd.DataFrame({"k": [1, 1], "w": ["x", "x"], "_weight": [1, 1]})})
    assert rows(f.snapshot("j")) == [(1, 10, "x"), (1, 10, "x")]  # a row present twice appears twice
    assert rows(f.snapshot("b")) == [(1, "x"), (1, "x")]


def test_views_whose_inputs_did_not_change_are_skipped(make_flow):
    f = make_flow()
    f.register_source("a", "k INT", primary_key=["k"])
    f.register_source("b", "k INT", primary_key=["k"])
    f.register_view("va", "SELECT COUNT(*) AS n FROM a")
    f.register_view("vb", "SELECT COUNT(*) AS n FROM b")
    s = f.tick("a", pa.table({"k": [1], "_weight": [1]}))
    assert not s.views["va"].skipped and s.views["vb"].skipped
    assert f.snapshot("vb").to_pylist() == [{"n": 0}]  # aggregate of an empty input: one row


@pytest.mark.parametrize("delta, message", [
    (pa.table({"o_id": [1], "_weight": [1]}), "lacks column(s) o_customer, amount"),
    (pa.table({"o_id": [1], "o_customer": [1], "amount": [1.0], "extra": [1], "_weight": [1]}), "unknown column(s) extra"),
    (pa.table({"o_id": [1], "o_customer": [1], "amount": [1.0]}), "lacks column(s) _weight"),
    (pa.table({"o_id": ["x"], "o_customer": [1], "amount": [1.0], "_weight": [1]}), "column 'o_id'"),
    ("not a table", "must be a pyarrow Table"),
])
def test_malformed_deltas_are_refused_by_name(flow, delta, message):
    with pytest.raises(DeltaError, match=message.replace("(", r"\(").replace(")", r"\)")):
        flow.tick("orders", delta)


def test_invalid_changes_roll_the_whole_step_back(make_flow):
    f = make_flow()
    f.register_source("orders", ORDERS, primary_key=["o_id"])
    f.register_source("other", "k INT", primary_key=["k"])
    f.register_view("totals", "SELECT COUNT(*) AS n FROM orders")
    f.tick("orders", orders([(1, 10, 5)]))
    with pytest.raises(DeltaError, match="not present"):
        f.tick({"other": pa.table({"k": [7], "_weight": [1]}), "orders": orders([(2, 10, 5)], -1)})
    with pytest.raises(DeltaError, match="duplicate primary key"):
        f.tick("orders", orders([(1, 11, 6)]))
    with pytest.raises(DeltaError, match="NULL"):
        f.tick("orders", pa.table({"o_id": pa.array([None], pa.int32()), "o_customer": [1], "amount": [D("1")],
                                   "_weight": [1]}))
    assert f.snapshot("other").num_rows == 0  # the good half of the failed step was not applied
    assert f.snapshot("totals").to_pylist() == [{"n": 1}]
    assert f.step == 1


def test_runtime_errors_are_clear_and_atomic(make_flow):
    f = make_flow()
    f.register_source("t", "k INT, d INT", primary_key=["k"])
    f.register_view("q", "SELECT k, 100 / d AS r FROM t")
    f.tick("t", pa.table({"k": [1], "d": [4], "_weight": [1]}))
    with pytest.raises(ExecutionError) as info:
        f.tick("t", pa.table({"k": [2], "d": [0], "_weight": [1]}))
    assert "DIVIDE_BY_ZERO" in str(info.value) or "zero" in str(info.value).lower()
    assert "\n\tat " not in str(info.value)  # no JVM stack trace
    assert rows(f.snapshot("q")) == [(1, 25)]
    assert rows(f.snapshot("t")) == [(1, 4)]


def test_register_view_errors(flow):
    with pytest.raises(UnknownColumnError):
        flow.register_view("bad", "SELECT nope FROM orders")
    with pytest.raises(UnsupportedSqlError, match="LATERAL"):
        flow.register_view("bad", "SELECT * FROM orders, LATERAL (SELECT o.o_id FROM orders AS o "
                                  "WHERE o.o_id > orders.o_id LIMIT 1) AS t")
    with pytest.raises(CatalogError, match="different definition"):
        flow.register_view("totals", "SELECT 1 AS x FROM orders")
    with pytest.raises(CatalogError, match="already a source"):
        flow.register_view("orders", "SELECT o_id FROM orders")
    with pytest.raises(CatalogError, match="invalid view name"):
        flow.register_view("a.b.c", "SELECT o_id FROM orders")
    with pytest.raises(CatalogError, match="different schema"):
        flow.register_source("orders", "o_id BIGINT", primary_key=["o_id"])
    assert flow.views == ["totals"]


def test_view_registered_after_data_starts_from_current_contents(flow):
    flow.tick("orders", orders([(1, 10, 5), (2, 11, 6)]))
    flow.register_view("big", "SELECT o_id FROM orders WHERE amount > 5")
    assert rows(flow.snapshot("big")) == [(2,)]
    flow.register_view("per_total", "SELECT n, COUNT(*) AS c FROM totals GROUP BY n")
    assert rows(flow.snapshot("per_total")) == [(1, 2)]


def test_watch_output_yields_one_consolidated_batch_per_changed_step(flow):
    watch = flow.watch_output("totals", timeout=0)
    flow.tick("orders", orders([(1, 10, 5), (2, 10, 5), (3, 10, 5), (4, 10, 5), (5, 10, 5)]))
    flow.tick("orders", orders([(6, 10, 5)]))
    batches = list(watch)
    assert [b.step for b in batches] == [1, 2]
    assert rows(batches[0].table) == [(10, D("25.00"), 5, 1)]  # five +1 rows: one row, one +1
    assert rows(batches[1].table) == [(10, D("25.00"), 5, -1), (10, D("30.00"), 6, 1)]


def test_resume_from_state_dir(make_flow, spark, tmp_path):
    state = tmp_path / "resume"
    f = IncrementalFlow(spark=spark, state_dir=state)
    f.register_source("orders", ORDERS, primary_key=["o_id"])
    f.register_view("totals", "SELECT o_customer, MIN(amount) AS lo, COUNT(*) AS n FROM orders GROUP BY o_customer")
    f.tick("orders", orders([(1, 10, 5), (2, 10, 7)]))
    f.close()
    g = IncrementalFlow(spark=spark, state_dir=state)
    try:
        assert g.step == 1 and g.views == ["totals"] and g.sources == ["orders"]
        g.register_source("orders", ORDERS, primary_key=["o_id"])  # same declaration: a no-op
        g.tick("orders", orders([(1, 10, 5)], -1))  # delete the current minimum after the restart
        assert rows(g.snapshot("totals")) == [(10, D("7.00"), 1)]
    finally:
        g.close()


def test_explain_shows_operators_and_state(flow):
    flow.tick("orders", orders([(1, 10, 5)]))
    text = flow.explain("totals")
    assert "Aggregate" in text and "state view/totals/" in text and "Scan source orders" in text


def test_drop_view(flow):
    flow.register_view("over", "SELECT COUNT(*) AS c FROM totals")
    with pytest.raises(CatalogError, match="read it"):
        flow.drop_view("totals")
    flow.drop_view("over")
    flow.drop_view("totals")
    assert flow.views == []
    with pytest.raises(CatalogError):
        flow.snapshot("totals")


def test_pyarrow_schema_source_and_record_batch_delta(make_flow):
    f = make_flow()
    schema = pa.schema([("id", pa.int64()), ("price", pa.decimal128(12, 2)), ("at", pa.timestamp("us", tz="UTC")),
                        ("tag", pa.string())])
    f.register_source("items", schema, primary_key=["id"])
    assert f.source_schema("items").column("price").type.pg == "numeric(12,2)"
    f.register_view("per_tag", "SELECT tag, SUM(price) AS total, MAX(at) AS last FROM items GROUP BY tag")
    batch = pa.RecordBatch.from_pydict({
        "id": [1, 2], "price": pa.array([D("1.25"), D("2.00")], pa.decimal128(12, 2)),
        "at": pa.array([0, 10**6], pa.timestamp("us", tz="UTC")), "tag": ["a", "a"], "_weight": [1, 1]})
    f.tick("items", batch)
    (row,) = f.snapshot("per_tag").to_pylist()
    assert row["tag"] == "a" and row["total"] == D("3.25") and row["last"].timestamp() == 1.0


def test_source_rows_by_primary_key(flow):
    flow.tick("orders", orders([(1, 10, 5), (2, 11, 6), (3, 12, None)]))
    got = flow.source_rows("orders", pa.table({"o_id": pa.array([3, 1, 99], pa.int32())}))
    assert rows(got) == [(1, 10, D("5.00")), (3, 12, None)]


def test_nan_is_one_group_and_wide_sums_are_exact(make_flow):
    """A NaN group finds its accumulators again (NaN equals NaN in GROUP BY), and a numeric SUM wider
    than 28 digits is not rounded."""
    f = make_flow()
    f.register_source("t", "x DOUBLE PRECISION, v NUMERIC(38,0)")
    f.register_view("g", "SELECT x, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY x")
    for v in (10**30, 1):
        f.tick("t", pa.table({"x": pa.array([float("nan"), None], pa.float64()),
                              "v": pa.array([D(v), D(v)], pa.decimal128(38, 0)),
                              "_weight": pa.array([1, 1], pa.int64())}))
    got = sorted(("NULL" if r["x"] is None else "NaN", r["n"], r["s"]) for r in f.snapshot("g").to_pylist())
    assert got == [("NULL", 2, D(10**30 + 1)), ("NaN", 2, D(10**30 + 1))]
