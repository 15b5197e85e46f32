"""WITH RECURSIVE against PostgreSQL on random change streams, and its refusals at step time.

Edges come from a keyless table over a few nodes, so the graph has cycles,
self-loops, duplicate edges and NULL ends, and inserts and deletes make and
break paths; the transitive closure (UNION) must follow.  The hierarchy walk
(UNION ALL) terminates by construction (a depth bound, or ids that grow
along the walk) and keeps PostgreSQL's duplicates.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from freshview.errors import ExecutionError
from freshview.runtime.operators import recursive
from tests.support.differential import run_differential

NODES = list(range(6))
EDGES = ("src INT, dst INT", [], {"src": NODES, "dst": NODES})
EMP = ("id INT, boss INT, dept TEXT", ["id"], {"boss": list(range(8)), "dept": ["a", "b"]})

CLOSURE = ("WITH RECURSIVE tc(a, b) AS (SELECT src, dst FROM edges "
           "UNION SELECT tc.a, e.dst FROM tc JOIN edges e ON tc.b = e.src) SELECT a, b FROM tc")


def _run(make_flow, oracle, sources, views, seed, steps=8):
    report = run_differential(make_flow, oracle, sources=sources, views=views, seed=seed, steps=steps,
                              changes_per_step=(1, 8), initial_rows=12, null_prob=0.1)
    empty = [name for name, counts in report.view_rows.items() if not any(counts)]
    assert not empty, f"views that never had a row: {empty}"


def test_transitive_closure_over_a_graph_with_cycles(make_flow, oracle):
    _run(make_flow, oracle, {"edges": EDGES}, [
        ("tc", CLOSURE),
        ("reach0", "WITH RECURSIVE r(n) AS (SELECT dst FROM edges WHERE src = 0 "
                   "UNION SELECT e.dst FROM r, edges e WHERE e.src = r.n) SELECT n FROM r"),
        ("paths", "WITH RECURSIVE p(a, b, len) AS (SELECT src, dst, 1 FROM edges "
                  "UNION SELECT p.a, e.dst, p.len + 1 FROM p JOIN edges e ON p.b = e.src WHERE p.len < 3) "
                  "SELECT a, len, COUNT(*) AS n FROM p GROUP BY a, len"),
    ], seed=51, steps=10)


def test_hierarchy_walks_union_all(make_flow, oracle):
    _run(make_flow, oracle, {"emp": EMP, "edges": EDGES}, [
        ("under", "WITH RECURSIVE w(id, root, depth) AS (SELECT id, id AS root, 0 FROM emp "
                  "UNION ALL SELECT e.id, w.root, w.depth + 1 FROM w JOIN emp e ON e.boss = w.id AND e.id > w.id) "
                  "SELECT root, depth, id FROM w"),
        ("bounded", "WITH RECURSIVE w(node, depth) AS (SELECT src, 0 FROM edges "
                    "UNION ALL SELECT e.dst, w.depth + 1 FROM w JOIN edges e ON e.src = w.node WHERE w.depth < 3) "
                    "SELECT node, depth, COUNT(*) AS n FROM w GROUP BY node, depth"),
        ("mixed", "WITH RECURSIVE chain(id, dept) AS (SELECT id, dept FROM emp WHERE boss IS NULL OR boss = 0 "
                  "UNION ALL SELECT e.id, c.dept FROM chain c JOIN emp e ON e.boss = c.id "
                  "JOIN (SELECT DISTINCT src FROM edges) s ON s.src = e.id % 6 WHERE e.id > c.id) "
                  "SELECT dept, COUNT(*) AS n FROM chain GROUP BY dept"),
    ], seed=52)


@pytest.mark.parametrize("execution", ["local", "spark"])
def test_union_all_recursion_that_never_ends_fails_its_step_naming_the_view(make_flow, execution, monkeypatch):
    monkeypatch.setattr(recursive, "MAX_ITERATIONS", 40)  # the bound, not its size, is under test
    flow = make_flow(execution=execution)
    flow.register_source("edges", "src INT, dst INT")
    flow.register_view("tc", CLOSURE)
    flow.register_view("walk", "WITH RECURSIVE w(a, b) AS (SELECT src, dst FROM edges "
                               "UNION ALL SELECT w.a, e.dst FROM w JOIN edges e ON w.b = e.src) SELECT a, b FROM w")
    flow.tick("edges", _edges([(1, 2), (2, 3)]))
    assert sorted(flow.snapshot("walk").to_pylist(), key=str) == [
        {"a": 1, "b": 2}, {"a": 1, "b": 3}, {"a": 2, "b": 3}]
    with pytest.raises(ExecutionError, match="view 'walk'.*did not reach a fixpoint") as info:
        flow.tick("edges", _edges([(3, 1)]))  # a cycle
    assert getattr(info.value, "view", None) == "walk"
    # The failed step was rolled back: both views as before it.
    assert flow.snapshot("tc").num_rows == 3 and flow.snapshot("walk").num_rows == 3


def _edges(pairs):
    return pa.table({"src": pa.array([a for a, _ in pairs], pa.int32()), "dst": pa.array([b for _, b in pairs], pa.int32()),
                     "_weight": pa.array([1] * len(pairs), pa.int64())})
