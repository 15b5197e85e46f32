"""The source operator's weighted rows, hashed once (``StateStore.prepare_rows``), against brute force.

``Source.apply`` puts a change's rows in the store's form once and reuses their key and row hashes for
the read of the copy, the consolidation, the checks and the write.  Random streams of weighted rows
(duplicates within a batch, NULLs, deletes of rows that are not there, repeated primary keys, several
runs in the store) are applied to a source with a primary key and to one without; after every batch
the copy, the change handed to the views and every refusal are compared with a Counter of rows.
"""

from __future__ import annotations

from collections import Counter
from contextlib import closing
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshview.algebra import hashing
from freshview.errors import DeltaError
from freshview.runtime.operators.source import Source, SourceChange
from freshview.runtime.state import SpineStateStore
from freshview.schema import WEIGHT, schema_from_ddl

KEYED = schema_from_ddl("id INT, tag TEXT, amount NUMERIC(10,2), x DOUBLE PRECISION", ["id"])
KEYLESS = schema_from_ddl("tag TEXT, n INT, x DOUBLE PRECISION")

# Small pools of rows, so that a batch often deletes or repeats a row (or a key) an earlier one inserted.
KEYED_POOL = [(i, tag, amount, x) for i, tag, amount, x in [
    (0, "a", Decimal("1.50"), 0.0), (0, "a", Decimal("1.50"), -0.0), (0, None, None, None), (1, "", Decimal("0.00"), 1.5),
    (1, "ünï", Decimal("-2.25"), float("nan")), (2, "bb", None, 1.5), (3, None, Decimal("1.50"), None),
    (4, "a", Decimal("0.00"), float("nan"))]]
KEYLESS_POOL = [("a", 1, 0.0), ("a", 1, -0.0), (None, None, None), ("", 0, float("nan")), ("bb", None, 1.5),
                ("ünï", 7, None), (None, 7, 1.5)]
weights = st.sampled_from([-2, -1, -1, 1, 1, 1, 2])
keyed_rows = st.lists(st.tuples(st.sampled_from(KEYED_POOL), weights), max_size=8)
keyless_rows = st.lists(st.tuples(st.sampled_from(KEYLESS_POOL), weights), max_size=8)

def _norm(value):
    """Rows as the store keeps them: -0.0 is 0.0, every NaN one NaN (a marker, since NaN != NaN)."""
    if isinstance(value, float):
        return "NaN" if value != value else value + 0.0
    return value


def _table(schema, batch) -> pa.Table:
    columns = {c.name: pa.array([row[i] for row, _ in batch], c.type.arrow) for i, c in enumerate(schema.columns)}
    return pa.table({**columns, WEIGHT: pa.array([w for _, w in batch], pa.int64())})


def _counter(table: pa.Table, names: list[str]) -> Counter:
    out: Counter = Counter()
    for row in table.to_pylist():
        out[tuple(_norm(row[n]) for n in names)] += row[WEIGHT]
    return Counter({row: w for row, w in out.items() if w})


def _run(tmp_path, schema, batches) -> None:
    source = Source("s", schema)
    names = [f"c{i}" for i in range(len(schema.columns))]
    model: Counter = Counter()
    with closing(SpineStateStore(tmp_path / "state")) as store:
        store.ensure_arrangement(source.arrangement, source.layout)
        for batch in batches:
            given: Counter = Counter()
            for row, w in batch:
                given[tuple(_norm(v) for v in row)] += w
            given = Counter({r: w for r, w in given.items() if w})
            after = Counter(model)
            after.update(given)
            absent = any(w < 0 for w in after.values())
            keys = Counter(r[0] for r, w in after.items() if w > 0) if schema.primary_key else Counter()
            repeated = any(n > 1 for n in keys.values()) or (schema.primary_key and any(
                w > 1 for w in after.values()))
            store.begin()
            try:
                delta, late = source.apply(store, source.to_engine(SourceChange(rows=_table(schema, batch))),
                                           None, None)
            except DeltaError as exc:
                store.rollback()
                assert absent or repeated, f"refused a valid change: {exc}"
                assert ("not present" in str(exc)) == absent  # (deletes are checked first)
                continue
            store.commit()
            assert not absent and not repeated, "accepted a change that must be refused"
            assert late == 0
            assert _counter(delta, names) == given and all(delta.column(WEIGHT).to_pylist())
            model = +after
            assert _counter(store.scan(source.arrangement), names) == model
            if schema.primary_key and model:  # the copy's rows found by key, as the next step reads them
                probe = pa.table({"c0": pa.array(sorted({r[0] for r in model}), pa.int32())})
                assert _counter(store.lookup(source.arrangement, probe), names) == model


@pytest.fixture(params=["hashes", "3-bit hashes"])
def hash_quality(request, monkeypatch):
    """With 3-bit hashes, different rows and keys share hashes all the time: the checks that decide on
    hashes first (``_plainly_valid``) must fall back to exact comparison, never pass a wrong change."""
    if request.param == "3-bit hashes":
        full = hashing.hash_rows
        monkeypatch.setattr(hashing, "hash_rows", lambda *a, **kw: full(*a, **kw) & np.uint64(7))
    return request.param


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(keyed_rows, min_size=1, max_size=6))
def test_keyed_source_rows_equal_brute_force(tmp_path_factory, hash_quality, batches):
    _run(tmp_path_factory.mktemp("keyed"), KEYED, batches)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(keyless_rows, min_size=1, max_size=6))
def test_keyless_source_rows_equal_brute_force(tmp_path_factory, hash_quality, batches):
    _run(tmp_path_factory.mktemp("keyless"), KEYLESS, batches)


@pytest.mark.parametrize("schema, batch, refused", [
    (KEYED, [((1, "a", Decimal("1.00"), 0.0), 1), ((1, "a", Decimal("1.00"), -0.0), 1)], "duplicate primary key"),
    (KEYED, [((1, "a", Decimal("1.00"), 0.0), 1), ((1, "b", Decimal("1.00"), 0.0), 1)], "duplicate primary key"),
    (KEYED, [((1, "a", Decimal("1.00"), float("nan")), -1)], "not present"),
    (KEYLESS, [(("a", None, None), 1), (("a", None, None), -2)], "not present"),
])
def test_refusals_name_the_problem(tmp_path, schema, batch, refused):
    source = Source("s", schema)
    with closing(SpineStateStore(tmp_path / "state")) as store:
        store.ensure_arrangement(source.arrangement, source.layout)
        store.begin()
        with pytest.raises(DeltaError, match=refused):
            source.apply(store, source.to_engine(SourceChange(rows=_table(schema, batch))), None, None)
        store.rollback()
        assert store.scan(source.arrangement).num_rows == 0


def test_a_row_inserted_twice_in_one_batch_and_deleted_once_nets_out(tmp_path):
    source = Source("s", KEYLESS)
    row = ("a", 1, -0.0)
    with closing(SpineStateStore(tmp_path / "state")) as store:
        store.ensure_arrangement(source.arrangement, source.layout)
        store.begin()
        delta, _ = source.apply(store, source.to_engine(SourceChange(rows=_table(
            KEYLESS, [(row, 1), (("a", 1, 0.0), 1), (row, -1)]))), None, None)
        store.commit()
        assert delta.to_pylist() == [{"c0": "a", "c1": 1, "c2": 0.0, WEIGHT: 1}]
        assert store.scan(source.arrangement).column(WEIGHT).to_pylist() == [1]


def test_a_valid_update_is_decided_on_hashes_without_the_exact_checks(tmp_path, monkeypatch):
    """The common step (an update, an insert, a delete of a held row) passes ``_plainly_valid``, so the
    exact checks (which build ``S + ΔS``) never run for it; a wrong step goes to them."""
    from freshview.runtime.operators import source as source_module

    source = Source("s", KEYED)
    old, new, other = (1, "a", Decimal("1.00"), 0.0), (1, "b", None, float("nan")), (2, None, None, -0.0)
    exact = []
    checked = source_module.Source._check_after
    monkeypatch.setattr(source_module.Source, "_check_after", lambda *a: exact.append(1) or checked(*a))
    with closing(SpineStateStore(tmp_path / "state")) as store:
        store.ensure_arrangement(source.arrangement, source.layout)
        for batch in ([(old, 1), (other, 1)], [(old, -1), (new, 1), (other, -1)]):
            store.begin()
            source.apply(store, source.to_engine(SourceChange(rows=_table(KEYED, batch))), None, None)
            store.commit()
        assert not exact
        store.begin()
        with pytest.raises(DeltaError, match="duplicate primary key"):
            source.apply(store, source.to_engine(SourceChange(rows=_table(KEYED, [(old, 1)]))), None, None)
        store.rollback()
        assert exact == [1]
