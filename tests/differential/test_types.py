"""Differential tests of json, jsonb, arrays, enums, uuid and inet columns: views over random change streams.

Each view runs under every executor against PostgreSQL on the same stream (inserts, deletes, updates,
NULLs, duplicates), compared after every step.  Values are drawn from small domains so groups collide:
jsonb documents whose keys come in several orders and spacings (equal once canonical), json texts kept as
written, arrays with NULL elements and empty arrays, enum labels whose declared order is not their
alphabetical one.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from psycopg.types.json import set_json_loads
from psycopg.types.string import TextLoader

from freshview.jsontext import jsonb
from tests.support.differential import run_differential

DOCS = ['{"a": 1, "b": "x"}', '{"b": "x", "a": 1}', '{"a":1,"b":"x"}', '{"a": 2, "tags": ["p", "q"]}',
        '{"a": {"n": [1, 2, {"k": null}]}, "z": true}', '[1, "two", null, {"a": 3}]', '"a"', '3.50', 'null',
        '{"tags": ["q"], "a": null}', '{}', '[]', None]
ARRAYS_INT = [(1, 2, 3), (3, None, 1), (), (7,), (2, 2), None]  # (tuples: the stream's rows are hashed)
ARRAYS_TEXT = [("a", "b"), ("b", None), (), ("a, b", 'q"uote'), None]
ARRAYS_NUM = [("1.50", "2"), (), ("-3.25", None), None]
MOODS = ["sad", "ok", "happy", "zen", None]  # declared order: zen < sad < ok < happy
UUIDS = ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "00000000-0000-0000-0000-000000000001",
         "ffffffff-0000-0000-0000-000000000000", None]
INETS = ["10.0.0.1", "10.0.0.0/8", "192.168.1.7/24", "::1", "2001:db8::1", None]

DOCS_T = ("d_id INT, g INT, j JSONB, js JSON, k TEXT", ["d_id"],
          {"j": [None if d is None else jsonb(d) for d in DOCS],  # (PostgreSQL sends jsonb canonical)
           "js": DOCS, "g": [1, 2, 3, None], "k": ["a", "b", "tags", "0", None]})
ARR_T = ("r_id INT, g INT, xs INT[], ts TEXT[], ns NUMERIC(10,2)[], i INT", ["r_id"],
         {"xs": ARRAYS_INT, "ts": ARRAYS_TEXT, "ns": [None if a is None else tuple(None if v is None else Decimal(v) for v in a)
                                                     for a in ARRAYS_NUM], "g": [1, 2, None], "i": [1, 2, 3, 0, -1, None]})
MISC_T = ("m_id INT, g INT, mood mood AS ENUM ('zen', 'sad', 'ok', 'happy'), u UUID, ip INET, n INT", ["m_id"],
          {"mood": MOODS, "u": UUIDS, "ip": INETS, "g": [1, 2, None]})


@pytest.fixture
def oracle_text_json(oracle):
    """The oracle reads json and jsonb as PostgreSQL prints them (freshview holds that text)."""
    set_json_loads(lambda data: data.decode() if isinstance(data, (bytes, memoryview)) else data, oracle.conn)
    for name in ("uuid", "inet"):
        oracle.conn.adapters.register_loader(name, TextLoader)
    oracle.execute("CREATE TYPE mood AS ENUM ('zen', 'sad', 'ok', 'happy')")
    return oracle


def _run(make_flow, oracle, sources, views, seed, steps=8):
    report = run_differential(make_flow, oracle, sources=sources, views=views, seed=seed, steps=steps)
    assert report.steps >= steps
    return report


def test_jsonb_and_json_operators(make_flow, oracle_text_json):
    _run(make_flow, oracle_text_json, {"docs": DOCS_T}, [
        ("j1", "SELECT d_id, j, js, j -> 'a' AS ja, j ->> 'a' AS jat, js -> 'a' AS jsa, js ->> 'b' AS jsb, "
               "j -> 1 AS j1, j ->> -1 AS jlast, j #> '{a,n,2}' AS jp, j #>> '{tags,0}' AS jpt, "
               "js #>> '{a,n}' AS jsp, j -> k AS jk, jsonb_extract_path_text(j, 'a', 'n', '1') AS ep, "
               "json_extract_path_text(js, 'tags', '0') AS jep FROM docs"),
        ("j2", "SELECT d_id, j @> '{\"a\": 1}' AS c1, j @> '{\"tags\": [\"q\"]}' AS c2, j ? 'tags' AS has, "
               "j ? k AS hask, j = '{\"b\": \"x\", \"a\": 1}' AS eq, j::text AS jt, js::jsonb AS canon, "
               "(k || '1')::text AS kt FROM docs WHERE j IS NOT NULL"),
        ("j3", "SELECT j, COUNT(*) AS n, SUM(g) AS s FROM docs GROUP BY j"),
        ("j4", "SELECT j ->> 'a' AS a, COUNT(*) AS n FROM docs WHERE j ? 'a' GROUP BY j ->> 'a'"),
        ("j5", "SELECT d_id, jsonb_build_object('id', d_id, 'k', k, 'doc', j, 'g', g) AS o, "
               "json_build_object('id', d_id, 'k', k, 'raw', js) AS oj FROM docs"),
        ("j6", "SELECT DISTINCT j -> 'a' AS a FROM docs"),
    ], seed=71)


def test_json_aggregates(make_flow, oracle_text_json):
    _run(make_flow, oracle_text_json, {"docs": DOCS_T}, [
        ("a1", "SELECT g, json_agg(d_id ORDER BY d_id) AS ids, jsonb_agg(j ORDER BY d_id) AS docs_ "
               "FROM docs GROUP BY g"),
        ("a2", "SELECT g, jsonb_agg(k ORDER BY k DESC, d_id) AS ks, json_agg(js ORDER BY d_id) AS raw, "
               "COUNT(*) AS n FROM docs GROUP BY g"),
        ("a3", "SELECT jsonb_agg(jsonb_build_object('id', d_id, 'g', g) ORDER BY d_id) AS all_ FROM docs"),
    ], seed=72)


def test_array_columns(make_flow, oracle_text_json):
    _run(make_flow, oracle_text_json, {"arrs": ARR_T}, [
        ("r1", "SELECT r_id, xs, ts, ns, 2 = ANY(xs) AS has2, i = ANY(xs) AS hasi, 'a' = ANY(ts) AS hasa, "
               "array_length(xs, 1) AS len, cardinality(ts) AS card, xs[1] AS first, xs[i] AS at_i, "
               "ts[2] AS t2, ns[1] AS n1 FROM arrs"),
        ("r2", "SELECT g, COUNT(*) AS n, SUM(xs[1]) AS s FROM arrs WHERE 1 = ANY(xs) OR cardinality(xs) = 0 "
               "GROUP BY g"),
        ("r3", "SELECT cardinality(xs) AS c, array_agg(r_id ORDER BY r_id) AS ids FROM arrs GROUP BY cardinality(xs)"),
    ], seed=73)


def test_enums_uuid_inet(make_flow, oracle_text_json):
    _run(make_flow, oracle_text_json, {"misc": MISC_T}, [
        ("e1", "SELECT m_id, mood, mood < 'ok' AS below_ok, mood >= 'sad' AS from_sad, mood = 'zen' AS z, "
               "u, u = 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11' AS is_a, ip, ip = '10.0.0.1/32' AS is_host, "
               "mood::text AS mt, u::text AS ut, ip::text AS it FROM misc"),
        ("e2", "SELECT g, MIN(mood) AS lo, MAX(mood) AS hi, MIN(u::text) AS first_u, COUNT(*) AS n FROM misc GROUP BY g"),
        ("e3", "SELECT mood, u, ip, COUNT(*) AS n FROM misc GROUP BY mood, u, ip"),
        ("e4", "SELECT m_id, mood FROM misc WHERE mood IN ('sad', 'happy') OR mood > 'ok'"),
        ("e5", "SELECT g, string_agg(mood::text, ',' ORDER BY mood, m_id) AS moods, "
               "jsonb_agg(mood ORDER BY mood DESC, m_id) AS jm FROM misc GROUP BY g"),
        ("e6", "SELECT m_id, mood FROM misc ORDER BY mood DESC NULLS LAST, m_id LIMIT 5"),
    ], seed=74)
