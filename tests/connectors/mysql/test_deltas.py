"""Binlog transactions to deltas, against the table's state recomputed before and after (no server)."""

from __future__ import annotations

import collections
import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshview.connectors.mysql.catalog import TableName, source_table
from freshview.connectors.mysql.deltas import ChangeError, to_deltas
from freshview.connectors.mysql.transactions import BinlogPosition, MySqlTransaction, RowChanges
from freshview.schema import WEIGHT

T = TableName("app", "t")
# No primary key: duplicate rows allowed, as a keyless MySQL table has them.
SOURCE = source_table(T, [
    ("k", "int", "int(11)", 10, 0, None, None, "YES"),
    ("s", "set", "set('a','b')", None, None, "utf8mb4", "utf8mb4_general_ci", "YES"),
    ("d", "decimal", "decimal(6,2)", 6, 2, None, None, "YES"),
], ())
POS = BinlogPosition("0-1-1", "binlog.000001", 4)
WHEN = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)

rows = st.tuples(st.sampled_from([None, 1, 2]), st.sampled_from([None, "", "a", "a,b"]),
                 st.sampled_from([None, 0, 3]))


def image(row):
    """A row as mysql-replication gives it: SET as a Python set, the empty set as None (+ none_sources)."""
    k, s, d = row
    values = {"k": k, "s": None if s in (None, "") else set(s.split(",")), "d": d}
    nones = {name: "null" for name, v in values.items() if v is None}
    if s == "":
        nones["s"] = "empty set"
    return values, nones


def run(kind, pairs):
    if kind == "update":
        out = []
        for before, after in pairs:
            (bv, bn), (av, an) = image(before), image(after)
            out.append({"before_values": bv, "before_none_sources": bn,
                        "after_values": av, "after_none_sources": an})
        return RowChanges.from_library(kind, out)
    return RowChanges.from_library(kind, [{"values": v, "none_sources": n} for v, n in map(image, pairs)])


@st.composite
def histories(draw):
    """A start state and transactions of inserts, deletes and updates of rows that exist."""
    state = collections.Counter(draw(st.lists(rows, max_size=6)))
    start = state.copy()
    txns = []
    for _ in range(draw(st.integers(1, 4))):
        runs = []
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["insert", "delete", "update"]))
            present = sorted(state.elements(), key=repr)
            if kind == "insert" or not present:
                new = draw(st.lists(rows, min_size=1, max_size=4))
                state.update(new)
                runs.append(run("insert", new))
                continue
            old = draw(st.lists(st.sampled_from(present), min_size=1, max_size=3, unique=True))
            state.subtract(old)
            if kind == "delete":
                runs.append(run("delete", old))
            else:
                new = [draw(rows) for _ in old]
                state.update(new)
                runs.append(run("update", list(zip(old, new))))
        txns.append(MySqlTransaction(POS, "0-1-1", WHEN, {T: runs}))
    return start, +state, txns


def multiset(table: pa.Table) -> collections.Counter:
    out = collections.Counter()
    for r in table.to_pylist():
        d = r.pop("d")
        out[(r["k"], r["s"], None if d is None else int(d))] += r.pop(WEIGHT)
    return out


@settings(max_examples=150, deadline=None)
@given(histories())
def test_delta_is_the_state_after_minus_the_state_before(history):
    start, end, txns = history
    deltas = to_deltas(txns, {T: SOURCE})
    expected = collections.Counter(end)
    expected.subtract(start)
    expected = {k: w for k, w in expected.items() if w}
    got = multiset(deltas[T]) if T in deltas else {}
    assert dict(got) == expected
    if T in deltas:  # consolidated: each row once, no zero weights
        assert len(got) == deltas[T].num_rows and 0 not in deltas[T].column(WEIGHT).to_pylist()


def test_a_row_inserted_and_deleted_in_one_batch_vanishes():
    txn = MySqlTransaction(POS, "0-1-1", WHEN, {T: [run("insert", [(1, "a", 3)]), run("delete", [(1, "a", 3)])]})
    assert to_deltas(txn, {T: SOURCE})[T].num_rows == 0


def test_a_missing_column_names_the_table_and_column():
    txn = MySqlTransaction(POS, "0-1-1", WHEN, {T: [RowChanges.from_library("insert", [{"values": {"k": 1, "s": None}}])]})
    with pytest.raises(ChangeError, match="app.t have no column 'd': the table was altered"):
        to_deltas(txn, {T: SOURCE})


def test_an_unconvertible_value_names_the_column():
    txn = MySqlTransaction(POS, "0-1-1", WHEN, {T: [RowChanges.from_library("insert", [{"values": {"k": 1, "s": None,
                                                                                   "d": "x"}}])]})
    with pytest.raises(ChangeError, match=r"app.t.d: cannot convert a binlog value to numeric\(6,2\)"):
        to_deltas(txn, {T: SOURCE})


def test_changes_of_tables_no_view_reads_are_refused():
    txn = MySqlTransaction(POS, "0-1-1", WHEN, {TableName("app", "x"): [run("insert", [(1, "a", 3)])]})
    with pytest.raises(ChangeError, match="app.x, which no view reads"):
        to_deltas(txn, {T: SOURCE})


def test_a_delta_has_no_empty_chunk():
    """An empty chunk between two others made the engine drop rows of large steps: never hand one over."""
    txn = MySqlTransaction(POS, "0-1-1", WHEN, {T: [run("insert", [(1, "a", 3)])]})
    delta = to_deltas(txn, {T: SOURCE})[T]
    assert all(len(chunk) for column in delta.columns for chunk in column.chunks)
    txn = MySqlTransaction(POS, "0-1-1", WHEN, {T: [run("update", [((1, "a", 3), (2, "a", 3))])]})
    delta = to_deltas(txn, {T: SOURCE})[T]
    assert delta.num_rows == 2 and all(len(chunk) for column in delta.columns for chunk in column.chunks)
