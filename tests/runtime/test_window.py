"""TopK and Window (the per-partition recompute operator) against plain Python recomputations.

The stream and harness are ``test_operators``'s: random weighted changes
(duplicates, NULLs, deletes emptying partitions), step 0 a first computation,
later steps under each executor; after every step the integral of the
operator's output must equal the reference below evaluated on the integrated
input.  The reference is written row by row in Python, independently of the
operator's numpy code, and applies the documented tie rule: rows equal in
every ORDER BY key are ordered by all their columns ascending, NULLs last.
"""

from __future__ import annotations

import functools
from collections import Counter
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given

from freshview.plan import nodes as pn
from freshview.runtime.operators.window import sort_codes, topk_rows, window_rows
from freshview.schema import SqlType
from tests.runtime.test_operators import EXECUTORS, LEFT, SEEDS, examples, run

INT8, INT4, NUM = SqlType("int8"), SqlType("int4"), SqlType.numeric(10, 2)
SUM_NUM = SqlType.numeric(None, 2)


# ---------------------------------------------------------------------- the Python reference


def _cmp_values(a, b, descending=False, nulls_first=None) -> int:
    nulls_first = descending if nulls_first is None else nulls_first
    if a is None or b is None:
        if a is None and b is None:
            return 0
        return (-1 if nulls_first else 1) * (1 if b is not None else -1)
    c = (a > b) - (a < b)
    return -c if descending else c


def sort_rows(rows: list[tuple], keys: tuple[pn.SortKey, ...]) -> list[tuple]:
    def cmp(x, y):
        for k in keys:
            c = _cmp_values(x[k.column], y[k.column], k.descending, k.nulls_first)
            if c:
                return c
        for a, b in zip(x, y):  # the tie rule
            c = _cmp_values(a, b)
            if c:
                return c
        return 0

    return sorted(rows, key=functools.cmp_to_key(cmp))


def expand(live: Counter) -> list[tuple]:
    return [r for r, w in live.items() for _ in range(w)]


def ref_topk(node: pn.TopK, live: Counter) -> Counter:
    rows = sort_rows(expand(live), node.order)
    end = None if node.limit is None else node.offset + node.limit
    return Counter(rows[node.offset:end])


def _frame(f: pn.WindowFunc, i: int, n: int, peers: list[int], keys: list | None = None,
           nulls_first: bool = False) -> range:
    def bound(b: pn.FrameBound, start: bool) -> int:
        if f.frame.mode == "range" and b.kind in ("preceding", "following"):  # keys: the ORDER BY key, ascending
            if keys[i] is None:  # its NULL peers
                same = [j for j in range(n) if keys[j] is None]
                return same[0] if start else same[-1]
            # PostgreSQL compares by sort position: a NULL key is below every value (NULLS FIRST) or above
            target = keys[i] - b.offset if b.kind == "preceding" else keys[i] + b.offset
            if start:
                return min([j for j in range(n) if (keys[j] >= target if keys[j] is not None else not nulls_first)],
                           default=n)
            return max([j for j in range(n) if (keys[j] <= target if keys[j] is not None else nulls_first)],
                       default=-1)
        if b.kind == "unbounded_preceding":
            return 0
        if b.kind == "unbounded_following":
            return n - 1
        if b.kind == "current_row":
            if f.frame.mode == "rows":
                return i
            same = [j for j in range(n) if peers[j] == peers[i]]
            return same[0] if start else same[-1]
        return i - b.offset if b.kind == "preceding" else i + b.offset

    return range(max(bound(f.frame.start, True), 0), min(bound(f.frame.end, False), n - 1) + 1)


def ref_window(node: pn.Window, live: Counter) -> Counter:
    parts: dict = {}
    for r in expand(live):
        parts.setdefault(tuple(r[c] for c in node.partition), []).append(r)
    out: Counter = Counter()
    for rows in parts.values():
        rows = sort_rows(rows, node.order)
        n = len(rows)
        okey = [tuple(r[k.column] for k in node.order) for r in rows]
        peers = [0] * n
        for i in range(1, n):
            peers[i] = peers[i - 1] + (okey[i] != okey[i - 1])
        keys = None
        if node.order:  # the RANGE key, ascending in the sort direction
            k = node.order[0]
            keys = [None if r[k.column] is None else (-r[k.column] if k.descending else r[k.column]) for r in rows]
        for i, r in enumerate(rows):
            vals = []
            for f in node.functions:
                frame = [rows[j] for j in _frame(f, i, n, peers, keys, bool(node.order) and node.order[0].nulls_go_first)]
                arg = [x[f.arg] for x in frame] if f.arg is not None else []
                nn = [x for x in arg if x is not None]
                if f.func == "row_number":
                    v = i + 1
                elif f.func == "rank":
                    v = peers.index(peers[i]) + 1
                elif f.func == "dense_rank":
                    v = peers[i] + 1
                elif f.func == "ntile":
                    q, rem = divmod(n, f.n)
                    sizes = [q + 1] * rem + [q] * (f.n - rem)
                    v, acc = 0, 0
                    while acc <= i:
                        acc += sizes[v]
                        v += 1
                elif f.func in ("lag", "lead"):
                    j = i - f.n if f.func == "lag" else i + f.n
                    v = rows[j][f.arg] if 0 <= j < n else (None if f.default is None else r[f.default])
                elif f.func == "first_value":
                    v = arg[0] if frame else None
                elif f.func == "last_value":
                    v = arg[-1] if frame else None
                elif f.func == "count_star":
                    v = len(frame)
                elif f.func == "count":
                    v = len(nn)
                elif f.func == "sum":
                    v = sum(nn) if nn else None
                elif f.func == "min":
                    v = min(nn) if nn else None
                else:
                    v = max(nn) if nn else None
                vals.append(v)
            out[r + tuple(vals)] += 1
    return out


# ---------------------------------------------------------------------- operator vs reference

TOPKS = [
    pn.TopK(LEFT, (pn.SortKey(1, descending=True, nulls_first=False),), 3, 1),
    pn.TopK(LEFT, (pn.SortKey(0),), None, 2),  # OFFSET only
    pn.TopK(LEFT, (pn.SortKey(1, nulls_first=True), pn.SortKey(0, descending=True)), 2, 0),
    pn.TopK(LEFT, (), 4, 0),  # LIMIT without ORDER BY: the tie rule alone
]

ROWS = "rows"
WINDOW_FUNCS = (
    pn.WindowFunc("row_number", None, INT8), pn.WindowFunc("rank", None, INT8),
    pn.WindowFunc("dense_rank", None, INT8), pn.WindowFunc("ntile", None, INT4, n=3),
    pn.WindowFunc("lag", 1, NUM), pn.WindowFunc("lead", 1, NUM, n=2, default=1),
    pn.WindowFunc("first_value", 1, NUM),
    pn.WindowFunc("last_value", 1, NUM, frame=pn.Frame(ROWS, pn.FrameBound("preceding", 1),
                                                       pn.FrameBound("following", 1))),
    pn.WindowFunc("count_star", None, INT8), pn.WindowFunc("count", 1, INT8),
    pn.WindowFunc("sum", 1, SUM_NUM, frame=pn.Frame(ROWS, pn.FrameBound("preceding", 2), pn.FrameBound("current_row"))),
    pn.WindowFunc("min", 1, NUM, frame=pn.Frame(ROWS, pn.FrameBound("following", 1),
                                                pn.FrameBound("unbounded_following"))),
    pn.WindowFunc("max", 1, NUM, frame=pn.Frame("range", pn.FrameBound("current_row"),
                                                pn.FrameBound("unbounded_following"))),
    pn.WindowFunc("sum", 1, SUM_NUM), pn.WindowFunc("min", 1, NUM), pn.WindowFunc("max", 1, NUM),
    pn.WindowFunc("max", 1, NUM, frame=pn.Frame(ROWS, pn.FrameBound("preceding", 1), pn.FrameBound("following", 2))),
)
RANGE_FUNCS = (
    pn.WindowFunc("sum", 1, SUM_NUM, frame=pn.Frame("range", pn.FrameBound("preceding", Decimal("2")),
                                                    pn.FrameBound("following", Decimal("0.5")))),
    pn.WindowFunc("count_star", None, INT8, frame=pn.Frame("range", pn.FrameBound("following", Decimal("1")),
                                                          pn.FrameBound("unbounded_following"))),
    pn.WindowFunc("max", 1, NUM, frame=pn.Frame("range", pn.FrameBound("unbounded_preceding"),
                                                pn.FrameBound("preceding", Decimal("3.5")))),
)
WINDOWS = [
    pn.Window(LEFT, (0,), (pn.SortKey(1, descending=True),), WINDOW_FUNCS + RANGE_FUNCS),
    pn.Window(LEFT, (), (pn.SortKey(1),), RANGE_FUNCS),
    pn.Window(LEFT, (), (), WINDOW_FUNCS),  # one partition, every row a peer
]


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("which", range(len(TOPKS)))
def test_topk_equals_recomputed_topk(spark, tmp_path_factory, executor, which):
    plan = TOPKS[which]

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("k"), plan, lambda l, _r: ref_topk(plan, l), steps=10, seed=seed,
            executor=executor)

    check()


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("which", range(len(WINDOWS)))
def test_window_equals_recomputed_window(spark, tmp_path_factory, executor, which):
    plan = WINDOWS[which]

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("w"), plan, lambda l, _r: ref_window(plan, l), steps=10, seed=seed,
            executor=executor)

    check()


# ---------------------------------------------------------------------- the tie rule, exactly


def _table(rows, weights=None) -> pa.Table:
    k, v = zip(*rows)
    return pa.table({"c0": pa.array(k, pa.int32()), "c1": pa.array(v, pa.decimal128(10, 2)),
                     "_weight": pa.array(weights or [1] * len(rows), pa.int64())})


def test_tie_rule_breaks_ties_by_all_columns_ascending_nulls_last():
    rows = [(3, Decimal(1)), (None, Decimal(1)), (1, Decimal(1)), (2, Decimal(5)), (2, None)]
    node = pn.TopK(LEFT, (pn.SortKey(1),), 3, 0)  # v ASC NULLS LAST; ties on v = 1 by k ASC NULLS LAST
    got = topk_rows(node, _table(rows)).to_pylist()
    assert [(r["c0"], r["c1"]) for r in got] == [(1, Decimal(1)), (3, Decimal(1)), (None, Decimal(1))]
    node = pn.TopK(LEFT, (pn.SortKey(1, descending=True),), 2, 0)  # DESC: NULLS FIRST by default
    got = topk_rows(node, _table(rows)).to_pylist()
    assert [(r["c0"], r["c1"]) for r in got] == [(2, None), (2, Decimal(5))]


def test_topk_keeps_part_of_a_duplicated_row():
    node = pn.TopK(LEFT, (pn.SortKey(0),), 2, 1)
    got = topk_rows(node, _table([(1, Decimal(1)), (2, Decimal(2))], [2, 5])).to_pylist()
    assert [(r["c0"], r["_weight"]) for r in got] == [(1, 1), (2, 1)]


def test_row_number_numbers_duplicates_and_ties_by_the_tie_rule():
    node = pn.Window(LEFT, (), (pn.SortKey(1),), (pn.WindowFunc("row_number", None, INT8),))
    got = window_rows(node, _table([(2, Decimal(1)), (1, Decimal(1))], [1, 2])).to_pylist()
    assert [(r["c0"], r["c2"]) for r in got] == [(1, 1), (1, 2), (2, 3)]


def test_sort_codes_follow_postgresql_order():
    col = pa.array([1.0, float("nan"), None, -0.0, 0.0, float("-inf")])
    asc = sort_codes(col)
    assert list(np.argsort(asc, kind="stable")) == [5, 3, 4, 0, 1, 2]  # -inf, ±0, 1, NaN, NULL last
    assert asc[3] == asc[4]
    desc = sort_codes(col, descending=True, nulls_first=True)
    assert list(np.argsort(desc, kind="stable")) == [2, 1, 0, 3, 4, 5]
    text = sort_codes(pa.array(["b", "B", None, "é", "a"]))
    assert list(np.argsort(text, kind="stable")) == [1, 4, 0, 3, 2]  # bytes (C collation), NULL last
