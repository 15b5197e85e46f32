"""Join order in a flow (issue 23): the FROM order does not change the state a view keeps, a 17-table join
in its worst FROM order keeps a few rows per join, and a resumed view keeps the plan its state was built for.

In-process (``execution="local"``, ``first_computation="local"``): no Spark.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from freshview import IncrementalFlow
from freshview.plan import nodes as pn
from freshview.sql import build_plan


def _rows(k, v, weight: int = 1) -> pa.Table:
    return pa.table({"k": pa.array(k, pa.int32()), "v": pa.array(v, pa.int32()),
                     "_weight": np.full(len(k), weight, np.int64)})


def _flow(path) -> IncrementalFlow:
    return IncrementalFlow(state_dir=path, execution="local", first_computation="local")


def join_state_rows(flow: IncrementalFlow, view: str) -> dict[str, int]:
    """Rows in each side of each of ``view``'s joins."""
    names = flow.store.list_arrangements(f"view/{view}/")
    return {n: flow.store.count(n) for n in names if n.endswith(("/left", "/right"))}


def _cross_products(plan: pn.Node) -> int:
    return sum(1 for n in pn.walk(plan) if isinstance(n, pn.Join) and not n.left_keys)


@pytest.mark.parametrize("order", ["a, b, c", "a, c, b", "c, b, a"])
def test_the_from_order_does_not_change_the_state_size(tmp_path, order):
    """``a.k = c.k AND b.k = c.v`` over three 40-row tables: a and b share no condition, so ``FROM a, b, c``
    used to keep a × b (1,600 rows); every order now keeps the four tables' rows: 160."""
    n = 40
    with _flow(tmp_path) as flow:
        for name in "abc":
            flow.register_source(name, "k INT, v INT", primary_key=["k"])
        keys = np.arange(n)
        flow.tick({"a": _rows(keys, keys % 7), "b": _rows(keys, keys % 5), "c": _rows(keys, keys[::-1])})
        flow.register_view("v", f"SELECT a.v AS av, b.v AS bv FROM {order} WHERE a.k = c.k AND b.k = c.v")
        for step in range(3):  # updates of a and b: old rows out, new in
            changed = np.arange(step, n, 9)
            flow.tick({"a": pa.concat_tables([_rows(changed, changed % 7, -1), _rows(changed, changed % 3)]),
                       "b": pa.concat_tables([_rows(changed, changed % 5, -1), _rows(changed, changed % 4)])})
        assert sum(join_state_rows(flow, "v").values()) == 4 * n
        assert flow.snapshot("v").num_rows == n


def test_seventeen_tables_in_the_worst_from_order_keep_a_few_rows_per_join(tmp_path):
    """A chain t1.v = t2.k, …, t16.v = t17.k of 10-row tables with a one-row result, written odd tables
    first (no two neighbours share a condition: the FROM order's plan is 10^9 rows): each join keeps at
    most ten rows a side, through steps that change every table."""
    names = [f"t{i}" for i in range(1, 18)]
    where = " AND ".join(f"{names[i]}.v = {names[i + 1]}.k" for i in range(16))
    sql = f"SELECT t1.k AS first, t17.v AS last FROM {', '.join(names[0::2] + names[1::2])} WHERE {where}"
    keys = np.arange(10)
    with _flow(tmp_path) as flow:
        for name in names:
            flow.register_source(name, "k INT, v INT", primary_key=["k"])
        # row 0 of every table continues the chain (v = 0); the others point nowhere (v >= 100)
        flow.tick({name: _rows(keys, np.where(keys == 0, 0, keys + 100)) for name in names})
        assert _cross_products(build_plan(sql, flow)) == 0
        flow.register_view("chain", sql)
        assert flow.snapshot("chain").to_pylist() == [{"first": 0, "last": 0}]
        for step in range(3):
            k = np.array([1 + step, 5 + step])
            flow.tick({name: pa.concat_tables([_rows(k, k + 100, -1), _rows(k, k + 200 + step)]) for name in names})
        states = join_state_rows(flow, "chain")
        assert len(states) == 32 and max(states.values()) <= 10, states
        # the chain broken in the middle and mended: the result follows
        flow.tick("t9", pa.concat_tables([_rows([0], [0], -1), _rows([0], [300])]))
        assert flow.snapshot("chain").num_rows == 0
        flow.tick("t9", pa.concat_tables([_rows([0], [300], -1), _rows([0], [0])]))
        assert flow.snapshot("chain").to_pylist() == [{"first": 0, "last": 0}]


def _first_join(plan: pn.Node) -> list[str]:
    """The relations of the lowest join."""
    joins = [n for n in pn.walk(plan) if isinstance(n, pn.Join)]
    return sorted(n.relation for n in pn.walk(joins[-1]) if isinstance(n, pn.Scan))


def test_a_resumed_view_keeps_the_plan_its_state_was_built_for(tmp_path):
    """``v1`` is planned while a is large and c small (b ⋈ c first); then the sizes swap, and ``v2``, the same
    SQL, is planned a ⋈ b first.  Reopened, each view has its own plan again and both stay right."""
    sql = "SELECT a.k AS ak, c.v AS cv FROM a JOIN b ON a.k = b.k JOIN c ON b.v = c.v"

    def table(n, offset=0):
        keys = np.arange(offset, offset + n)
        return _rows(keys % 40, keys % 30)

    with _flow(tmp_path) as flow:
        for name in "abc":
            flow.register_source(name, "k INT, v INT")  # keyless: duplicates allowed
        flow.tick({"a": table(300), "b": table(30), "c": table(3)})
        flow.register_view("v1", sql)
        flow.tick({"a": pa.concat_tables([table(300).set_column(2, "_weight", pa.array(np.full(300, -1))),
                                          table(3)]), "c": table(297, 3)})
        flow.register_view("v2", sql)
        plans = {v: flow.view_plan(v) for v in ("v1", "v2")}
        assert _first_join(plans["v1"]) == ["b", "c"] and _first_join(plans["v2"]) == ["a", "b"]
    with _flow(tmp_path) as flow:
        assert {v: flow.view_plan(v) for v in ("v1", "v2")} == plans
        flow.tick({"b": table(5, 7), "c": table(4, 11)})
        one, two = (sorted(flow.snapshot(v).to_pylist(), key=str) for v in ("v1", "v2"))
        assert one == two and len(one) > 0
