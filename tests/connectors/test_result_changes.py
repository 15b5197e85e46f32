"""The database-neutral netting of view changes per key: Arrow and Python paths agree, and applying
their actions to a keyed store gives the view's new contents."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from freshview.algebra.batch import consolidate
from freshview.connectors.result_changes import net_changes, net_changes_small, replacing
from freshview.schema import WEIGHT

NAMES = ["k", "v"]
values = st.one_of(st.none(), st.integers(0, 3))


def table(rows):
    cols = list(zip(*rows)) if rows else [[], [], []]
    return pa.table({"k": pa.array(list(cols[0]), pa.int64()), "v": pa.array(list(cols[1]), pa.int64()),
                     WEIGHT: pa.array(list(cols[2]), pa.int64())})


def apply_keyed(store: dict, rows, ops, key_at):
    for row, op in zip(rows, ops):
        k = tuple(row[i] for i in key_at)
        if op == 1:
            store[k] = row
        else:
            store.pop(k, None)


@st.composite
def keyed_steps(draw):
    """A keyed view (key k) over a few steps: each step's delta removes some current rows and adds new ones."""
    current: dict = {}
    steps = []
    for _ in range(draw(st.integers(1, 4))):
        delta = []
        for k in list(current):
            if draw(st.booleans()):
                delta.append(current.pop(k) + (-1,))
        for k in draw(st.lists(values, max_size=4, unique=True)):
            if (k,) in current:
                delta.append(current.pop((k,)) + (-1,))
            current[(k,)] = (k, draw(values))
            delta.append(current[(k,)] + (1,))
        steps.append((draw(st.permutations(delta)), dict(current)))
    return steps


@settings(max_examples=150, deadline=None)
@given(keyed_steps())
def test_keyed_netting_gives_the_new_contents(steps):
    arrow_store: dict = {}
    python_store: dict = {}
    for delta, expected in steps:
        rows, ops = net_changes(table(delta), NAMES, ["k"], counted=False)
        apply_keyed(arrow_store, [tuple(r.values()) for r in rows.to_pylist()],
                    ops.to_pylist(), [0])
        columns, small_ops = net_changes_small(table(delta), NAMES, ["k"], counted=False)
        apply_keyed(python_store, list(zip(*columns)), small_ops, [0])
        assert arrow_store == expected == python_store


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(values, values, st.integers(-3, 3).filter(bool)), max_size=8))
def test_counted_netting_passes_weights(rows):
    rows_out, ops = net_changes(table(rows), NAMES, NAMES, counted=True)
    columns, small_ops = net_changes_small(table(rows), NAMES, NAMES, counted=True)
    assert ops.to_pylist() == small_ops == [w for *_, w in rows]
    assert [tuple(r.values()) for r in rows_out.to_pylist()] == list(zip(*columns))


def test_the_single_row_without_key():
    for delta, want in [([(1, 1, -1), (2, 2, 1)], ([(2, 2)], [1])), ([(2, 2, 1), (1, 1, -1)], ([(2, 2)], [1])),
                        ([(1, 1, -1)], ([(1, 1)], [0]))]:
        rows, ops = net_changes(table(delta), NAMES, [], counted=False)
        assert ([tuple(r.values()) for r in rows.to_pylist()], ops.to_pylist()) == want
        columns, small_ops = net_changes_small(table(delta), NAMES, [], counted=False)
        assert (list(zip(*columns)), small_ops) == want


def _multiset(t: pa.Table) -> dict:
    out: dict = {}
    for row in t.to_pylist():
        w = row.pop(WEIGHT)
        out[tuple(row.values())] = out.get(tuple(row.values()), 0) + w
    return {k: w for k, w in out.items() if w}


weighted_rows = st.lists(st.tuples(values, values, st.integers(1, 3)), max_size=8)


@settings(max_examples=150, deadline=None)
@given(weighted_rows, weighted_rows)
def test_replacing_writes_the_difference_that_turns_the_old_rows_into_the_new(old, new):
    # (an alter's swap into a kept table: the rows it holds plus the difference are the new rows, NULLs and
    # repeated rows included; rows in both are not written)
    previous, wanted = consolidate(table(old)), consolidate(table(new))
    change = replacing(previous, wanted)
    assert _multiset(consolidate(pa.concat_tables([previous, change]))) == _multiset(wanted)
    both = set(_multiset(previous).items()) & set(_multiset(wanted).items())
    assert not {k for k, _ in both} & set(_multiset(change))


def test_replacing_other_columns_is_not_a_difference():
    other = pa.table({"k": pa.array([1]), "x": pa.array([1]), WEIGHT: pa.array([1])})
    assert replacing(other, table([(1, 1, 1)])) is None
    widened = table([(1, 1, 1)]).cast(pa.schema([("k", pa.int32()), ("v", pa.int64()), (WEIGHT, pa.int64())]))
    assert _multiset(replacing(widened, table([(1, 1, 1), (2, 2, 1)]))) == {(2, 2): 1}  # (cast to the new types)
