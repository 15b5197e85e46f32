"""Reweight against its non-incremental self, alone and as INTERSECT/EXCEPT [ALL], under each executor.

The circuit is stepped with random weighted changes (``test_operators.run``:
step 0 a first computation on Spark, later steps on the executor under
test); after every step the integral of its output must equal a plain Python
evaluation over the integrated inputs.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, ColumnRef, Literal
from freshview.schema import SqlType
from freshview.sql.setops import counted
from tests.runtime.test_operators import EXECUTORS, INT, LEFT, RIGHT, SEEDS, examples, run

INT8 = SqlType("int8")
TEXT = SqlType("text")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_reweight_equals_recomputed_reweight(spark, tmp_path_factory, executor):
    # weight × coalesce(k, 0) - 1: factors -1..2, so rows vanish, flip sign and multiply.
    k = ColumnRef(INT, 0)
    factor = Call(INT8, "-", (Call(INT8, "coalesce", (k, Literal(INT, 0))), Literal(INT8, 1)))
    plan = pn.Reweight(LEFT, factor)

    def reference(l, _r):
        out: Counter = Counter()
        for row, w in l.items():
            out[row] += w * ((row[0] or 0) - 1)
        return out

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("rw"), plan, reference, seed=seed, executor=executor)

    check()


def _multiplicity(keyword: str, c1: int, c2: int) -> int:
    return {"INTERSECT ALL": min(c1, c2), "EXCEPT ALL": max(c1 - c2, 0),
            "INTERSECT": int(c1 > 0 and c2 > 0), "EXCEPT": int(c1 > 0 and c2 == 0)}[keyword]


KEYWORDS = ("INTERSECT ALL", "EXCEPT ALL", "INTERSECT", "EXCEPT")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_intersect_and_except_equal_their_recomputed_selves(spark, tmp_path_factory, executor):
    # k of l against k of r: NULL keys must match each other (set operations compare "not distinct").
    # All four operations in one circuit, each row tagged with its operation.
    left = pn.Project(LEFT, (ColumnRef(INT, 0),), ("k",))
    right = pn.Project(RIGHT, (ColumnRef(INT, 0),), ("k",))
    plan = pn.UnionAll(tuple(
        pn.Project(counted(left, right, kw), (ColumnRef(INT, 0), Literal(TEXT, kw)), ("k", "op")) for kw in KEYWORDS))

    def reference(l, r):
        c1: Counter = Counter()
        c2: Counter = Counter()
        for row, w in l.items():
            c1[row[0]] += w
        for row, w in r.items():
            c2[row[0]] += w
        return Counter({(k, kw): _multiplicity(kw, c1[k], c2[k]) for k in set(c1) | set(c2) for kw in KEYWORDS})

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("so"), plan, reference, seed=seed, executor=executor)

    check()
