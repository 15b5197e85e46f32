"""Differential tests of set-returning functions over columns (``sql.srf``, ``plan.flatmap``).

Each view runs through a random insert/update/delete stream (NULLs, duplicates, empty arrays and
documents) under every executor and is compared with PostgreSQL after every step: unnest (WITH
ORDINALITY, several arrays zipped, in the SELECT list), the json/jsonb element, member and key
functions, generate_series over columns, regexp_split_to_table and string_to_table, in FROM, as
CROSS/LEFT JOIN LATERAL, under joins, aggregates and DISTINCT.
"""

from __future__ import annotations

import pytest
from psycopg.types.json import set_json_loads

from freshview import IncrementalFlow
from freshview.errors import SqlError
from freshview.jsontext import jsonb
from tests.support.differential import run_differential

ARRAYS = [(1, 2, 3), (3, None, 1), (), (7,), (2, 2), None]
TEXTS = [("a", "b"), ("b", None), (), ("a",), None]
ARRS = ['[1, "two", null, {"a": 3}]', '[]', '[1, 1]', '["x", [1, 2]]', '[1.50, "1.50"]', None]
OBJS = ['{"a": 1, "b": "x"}', '{}', '{"b": null, "tags": ["p"]}', '{"a": {"n": 1}}', None]
STRS = ["a,b,,c", "", "x", ",lead", "a, b", None]

SRC = ("id INT, g INT, xs INT[], ts TEXT[], arr JSONB, arj JSON, obj JSONB, obj_j JSON, s TEXT, lo INT, hi INT",
       ["id"],
       {"xs": ARRAYS, "ts": TEXTS, "arr": [None if d is None else jsonb(d) for d in ARRS], "arj": ARRS,
        "obj": [None if d is None else jsonb(d) for d in OBJS], "obj_j": OBJS, "s": STRS,
        "g": [1, 2, None], "lo": [1, 2, 3, None], "hi": [0, 2, 4, None]})
KEYS = ("k_id INT, v INT", ["k_id"], {"v": [1, 2, 3, 7, None]})


@pytest.fixture
def oracle_json(oracle):
    """The oracle reads json and jsonb as PostgreSQL prints them (freshview holds that text)."""
    set_json_loads(lambda data: data.decode() if isinstance(data, (bytes, memoryview)) else data, oracle.conn)
    return oracle


def _run(make_flow, oracle, views, seed, sources=None, steps=4, executions=("local",)):
    report = run_differential(make_flow, oracle, sources=sources or {"t": SRC}, views=views, seed=seed,
                              steps=steps, executions=executions)
    assert report.steps >= steps


def test_unnest_in_from(make_flow, oracle_json):
    _run(make_flow, oracle_json, [
        ("u1", "SELECT t.id, u.x, u.n FROM t, unnest(t.xs) WITH ORDINALITY AS u(x, n)"),
        ("u2", "SELECT id, x FROM t CROSS JOIN LATERAL unnest(t.xs) AS x"),
        ("u3", "SELECT id, x, n FROM t LEFT JOIN LATERAL unnest(t.xs) WITH ORDINALITY AS u(x, n) ON TRUE"),
        ("u4", "SELECT id, a, b, o FROM t, unnest(t.xs, t.ts) WITH ORDINALITY AS z(a, b, o)"),
        ("u5", "SELECT x, COUNT(*) AS n, SUM(g) AS sg FROM t, unnest(xs) AS x GROUP BY x"),
        ("u6", "SELECT DISTINCT u FROM t, unnest(ts) AS u WHERE u IS NOT NULL"),
        ("u7", "SELECT t.id, k.k_id FROM t, unnest(t.xs) AS x JOIN keys k ON k.v = x WHERE t.g IS NOT NULL"),
    ], seed=231, sources={"t": SRC, "keys": KEYS})


def test_unnest_in_select_list(make_flow, oracle_json):
    _run(make_flow, oracle_json, [
        ("s1", "SELECT id, unnest(xs) AS x FROM t"),
        ("s2", "SELECT id, unnest(xs) + 1 AS x1, unnest(ts), g FROM t WHERE g IS NOT NULL"),
        ("s3", "SELECT DISTINCT unnest(ts) AS tag FROM t"),
        ("s4", "SELECT id, generate_series(lo, hi) AS gs, jsonb_array_elements(arr) AS e FROM t"),
    ], seed=232)


def test_json_functions(make_flow, oracle_json):
    _run(make_flow, oracle_json, [
        ("j1", "SELECT id, e.value, e.ordinality FROM t, jsonb_array_elements(t.arr) WITH ORDINALITY AS e"),
        ("j2", "SELECT id, v.value FROM t, json_array_elements_text(t.arj) AS v"),
        ("j3", "SELECT id, value FROM t, jsonb_array_elements_text(arr)"),
        ("j4", "SELECT id, key, value FROM t, jsonb_each(t.obj)"),
        ("j5", "SELECT id, e.key, e.value FROM t, json_each_text(t.obj_j) AS e"),
        ("j6", "SELECT k, COUNT(*) AS n FROM t, jsonb_object_keys(obj) AS k GROUP BY k"),
        ("j7", "SELECT id, k FROM t, json_object_keys(obj_j) AS k"),
        ("j8", "SELECT id, e.key, e.value FROM t, jsonb_each_text(obj) WITH ORDINALITY AS e WHERE e.value IS NOT NULL"),
    ], seed=233)


def test_series_and_splits(make_flow, oracle_json):
    _run(make_flow, oracle_json, [
        ("g1", "SELECT id, n FROM t, generate_series(t.lo, t.hi) AS n"),
        ("g2", "SELECT id, n FROM t, generate_series(t.hi, t.lo, -1) WITH ORDINALITY AS q(n, o) WHERE o < 3"),
        ("g3", "SELECT lo, SUM(n) AS s FROM t, generate_series(1, t.hi) n GROUP BY lo"),
        ("p1", "SELECT id, p FROM t, regexp_split_to_table(t.s, ',\\s*') AS p"),
        ("p2", "SELECT id, p FROM t, string_to_table(t.s, ',') AS p"),
        ("p3", "SELECT id, p, o FROM t, string_to_table(t.s, ',', '') WITH ORDINALITY AS x(p, o)"),
        ("r1", "SELECT id, a, b FROM t, ROWS FROM (unnest(t.xs), jsonb_array_elements(t.arr)) AS r(a, b)"),
    ], seed=234)


def test_under_spark(make_flow, oracle_json):
    """A few of the above under both executors (Spark collects a change and runs the same functions)."""
    _run(make_flow, oracle_json, [
        ("u1", "SELECT t.id, u.x, u.n FROM t, unnest(t.xs) WITH ORDINALITY AS u(x, n)"),
        ("s2", "SELECT id, unnest(xs) + 1 AS x1, unnest(ts) FROM t"),
        ("j4", "SELECT k, COUNT(*) AS n FROM t, jsonb_each(t.obj) AS e(k, v) GROUP BY k"),
        # over a join's output (a Spark result under Spark: posexplode there)
        ("u8", "SELECT t.id, k.k_id, x, n FROM t JOIN keys k ON k.v = t.g, unnest(t.xs) WITH ORDINALITY AS u(x, n)"),
        ("u9", "SELECT t.id, k.k_id, x FROM t JOIN keys k ON k.v = t.g LEFT JOIN LATERAL unnest(t.xs) AS x ON TRUE"),
    ], seed=235, steps=4, executions=("local", "spark"), sources={"t": SRC, "keys": KEYS})


@pytest.mark.parametrize("sql, message", [
    ("SELECT x FROM t RIGHT JOIN LATERAL unnest(t.xs) AS x ON TRUE", "RIGHT JOIN to a set-returning function"),
    ("SELECT x FROM t LEFT JOIN LATERAL unnest(t.xs) AS x ON x > 1", "ON condition other than TRUE"),
    ("SELECT g, unnest(xs) FROM t GROUP BY g, xs", "query that aggregates"),
    ("SELECT json_each(obj) FROM t", "returns a record"),
    ("SELECT unnest(string_to_array(s, ',')) FROM t", None),
    ("SELECT * FROM t, regexp_split_to_table(t.s, 'x*') AS p", "matches the empty string"),
    ("SELECT * FROM t, regexp_split_to_table(t.s, t.s) AS p", "not constants"),
    ("SELECT * FROM t, unnest(t.g) AS p", "function unnest(integer) does not exist"),
    ("SELECT * FROM t, json_populate_record(NULL, t.obj_j) AS p", "in FROM is not supported"),
    ("SELECT CASE WHEN g > 1 THEN unnest(xs) END FROM t", "not allowed in CASE"),
    ("SELECT id FROM t WHERE EXISTS (SELECT 1 FROM unnest(t.xs) AS x WHERE x = 3)", "outer query"),
    # jsonb rows matched by their text would tell '1.0' from '1' (PostgreSQL holds them equal): refused
    ("SELECT obj FROM t UNION SELECT obj FROM t", "UNION of a jsonb column"),
    ("SELECT obj FROM t INTERSECT ALL SELECT obj FROM t", "INTERSECT ALL of a jsonb column"),
    ("SELECT obj FROM t EXCEPT SELECT obj FROM t", "EXCEPT of a jsonb column"),
])
def test_refusals_are_located(tmp_path, sql, message):
    flow = IncrementalFlow(state_dir=tmp_path, execution="local", first_computation="local")
    flow.register_source("t", SRC[0], primary_key=SRC[1])
    with pytest.raises(SqlError) as err:
        flow.register_view("v", sql)
    if message is not None:
        assert message in str(err.value)
    assert err.value.location is not None


# ---------------------------------------------------------------------- jsonb equality (numbers by value)
NUMS = ['1.0', '1', '{"a": 1.0, "b": [2.50]}', '{"b": [2.5], "a": 1}', '[0.0, 1]', '[0, 1.00]', '"1.0"', None]
NUM_T = ("n_id INT, g INT, j JSONB", ["n_id"], {"j": [None if d is None else jsonb(d) for d in NUMS],
                                                  "g": [1, 2, None]})
NUM_T2 = ("m_id INT, j2 JSONB", ["m_id"], {"j2": [None if d is None else jsonb(d) for d in NUMS]})


def _jsonb_keys(table):
    """Each jsonb group shows one of its spellings (PostgreSQL: whichever it met first): compared by key."""
    import pyarrow as pa

    from freshview.jsontext import equality_key

    cols = [pa.array([None if v is None or not isinstance(v, str) else equality_key(v) if v[:1] in '{["-0123456789'
                      else v for v in c.to_pylist()], pa.string()) if pa.types.is_string(c.type) else c
            for c in table.columns]
    return pa.Table.from_arrays(cols, names=table.column_names)


def test_jsonb_numbers_equal_by_value(make_flow, oracle_json):
    run_differential(make_flow, oracle_json, sources={"nums": NUM_T, "nums2": NUM_T2}, views=[
        ("q1", "SELECT j, COUNT(*) AS n, SUM(g) AS s FROM nums GROUP BY j"),
        ("q2", "SELECT DISTINCT j FROM nums"),
        ("q3", "SELECT n_id, m_id FROM nums JOIN nums2 ON j = j2"),
        ("q4", "SELECT n_id, j = '1' AS is_one, j = '{\"a\": 1, \"b\": [2.5]}' AS is_obj, j <> '[0, 1]' AS not01 "
               "FROM nums"),
        ("q5", "SELECT g, COUNT(DISTINCT j) AS nd FROM nums GROUP BY g"),
        ("q6", "SELECT n_id, m_id FROM nums JOIN (SELECT m_id, j2 AS j FROM nums2) AS s USING (j)"),
    ], seed=236, steps=6, executions=("local",), canon=_jsonb_keys)
