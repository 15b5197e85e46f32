"""The Recursive operator against PostgreSQL's iteration run naively in Python, under each executor.

The recursion: n from the left input's keys; each iteration n + 1 for every
right row with key n while n < 4 (a join with an external input, so changes
to either input move the fixpoint; duplicates multiply under UNION ALL).
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, ColumnRef, Literal
from freshview.schema import SqlType
from tests.runtime.test_operators import EXECUTORS, INT, LEFT, RIGHT, SEEDS, examples, run

BOOL = SqlType("bool")


def recursion(distinct: bool) -> pn.Recursive:
    anchor = pn.Project(LEFT, (ColumnRef(INT, 0),), ("n",))
    ext = pn.Project(RIGHT, (ColumnRef(INT, 0),), ("k",))
    n = ColumnRef(INT, 0, "n")
    joined = pn.Join(pn.RecursiveRef("r", anchor.columns), pn.ExternalRef(0, ext.columns), (n,), (ColumnRef(INT, 0),))
    step = pn.Project(pn.Filter(joined, Call(BOOL, "<", (n, Literal(INT, 4)))),
                      (Call(INT, "+", (n, Literal(INT, 1))),), ("n",))
    return pn.Recursive("r", anchor, (ext,), step, distinct)


def naive(l: Counter, r: Counter, distinct: bool) -> Counter:
    keys: Counter = Counter()
    for row, w in r.items():
        keys[row[0]] += w
    working: Counter = Counter()
    for row, w in l.items():
        working[(row[0],)] += w
    if distinct:
        working = Counter({row: 1 for row in working})
    result = Counter(working)
    while working:
        new: Counter = Counter()
        for (n,), w in working.items():
            if n is not None and n < 4 and keys[n]:
                new[(n + 1,)] += w * keys[n]
        if distinct:
            new = Counter({row: 1 for row in new if row not in result})
        result.update(new)
        working = new
    return result


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("distinct", [False, True], ids=["union_all", "union"])
def test_recursive_equals_its_naive_fixpoint(spark, tmp_path_factory, executor, distinct):
    plan = recursion(distinct)

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("rec"), plan, lambda l, r: naive(l, r, distinct), seed=seed,
            executor=executor)

    check()
