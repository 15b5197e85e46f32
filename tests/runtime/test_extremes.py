"""extremes.settle: a group's MIN/MAX after a change from its old extreme, against brute force."""

from __future__ import annotations

import collections
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from freshview.runtime.operators import extremes

FLOATS = st.sampled_from([-1.5, 0.0, 2.0, 7.25, math.inf, -math.inf, math.nan])
TEXTS = st.sampled_from(["", "a", "A", "ab", "b", "é", "z", "Z "])
INTS = st.integers(-3, 3)


def sql_key(v):
    """SQL order as a sort key: NaN above every number, strings by their UTF-8 bytes."""
    if isinstance(v, float):
        return (1, 0.0) if math.isnan(v) else (0, v)
    if isinstance(v, str):
        return v.encode()
    return v


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def best(values, kind):
    if not values:
        return None
    pick = min if kind == "min" else max
    return pick(values, key=sql_key)


@st.composite
def cases(draw):
    kind = draw(st.sampled_from(["min", "max"]))
    values, arrow_type = draw(st.sampled_from([(FLOATS, pa.float64()), (TEXTS, pa.string()), (INTS, pa.int64())]))
    groups = draw(st.integers(1, 5))
    held = [collections.Counter(draw(st.lists(values, max_size=5))) for _ in range(groups)]
    change = []  # (group, value, weight): deletes of held copies, inserts of anything
    for g in range(groups):
        for v, n in list(held[g].items()):
            if draw(st.booleans()):
                change.append((g, v, -draw(st.integers(1, n))))
        for v in draw(st.lists(values, max_size=3)):
            change.append((g, v, draw(st.integers(1, 2))))
    return kind, arrow_type, held, change


def consolidated(change):
    total: dict = {}
    for g, v, w in change:
        k = (g, ("nan",) if isinstance(v, float) and math.isnan(v) else v)
        total[k] = (v, total.get(k, (v, 0))[1] + w)
    return [(g, v, w) for (g, _), (v, w) in total.items() if w]


@settings(max_examples=300, deadline=None)
@given(cases())
def test_settled_groups_have_the_brute_force_extreme_and_only_a_lost_extreme_is_probed(case):
    kind, arrow_type, held, change = case
    change = consolidated(change)
    old = [best(list(h.elements()), kind) for h in held]
    after = [collections.Counter(h) for h in held]
    for g, v, w in change:
        key = next((x for x in after[g] if same(x, v) and type(x) is type(v)), v)
        after[g][key] += w
    new_brute = [best(list(h.elements()), kind) for h in after]

    settled, new = extremes.settle(
        kind, pa.array(old, arrow_type), np.array([g for g, _, _ in change], dtype=np.int64),
        pa.array([v for _, v, _ in change], arrow_type), np.array([w for _, _, w in change], dtype=np.int64))
    got = new.to_pylist()
    for g in range(len(held)):
        lost = any(w < 0 and (old[g] is None or same(v, old[g])) for gg, v, w in change if gg == g)
        assert settled[g] == (not lost), (g, old[g], change)
        if settled[g]:
            assert (got[g] is None and new_brute[g] is None) or same(got[g], new_brute[g]), (g, got[g], new_brute[g])
        else:
            assert got[g] is None


def test_an_update_of_another_column_settles_without_a_probe():
    """The common case: the change deletes and re-inserts the extreme's value: consolidated away."""
    settled, new = extremes.settle("min", pa.array(["ASIA", "EUROPE"]), np.zeros(0, np.int64),
                                   pa.array([], pa.string()), np.zeros(0, np.int64))
    assert settled.all() and new.to_pylist() == ["ASIA", "EUROPE"]


def test_a_new_group_takes_its_best_insert_and_refuses_a_bad_kind():
    settled, new = extremes.settle("max", pa.array([None], pa.int64()), np.zeros(3, np.int64),
                                   pa.array([4, 9, 1]), np.array([1, 1, 2]))
    assert settled.all() and new.to_pylist() == [9]
    with pytest.raises(ValueError, match="extreme kind"):
        extremes.settle("median", pa.array([1]), np.zeros(0, np.int64), pa.array([], pa.int64()), np.zeros(0))
