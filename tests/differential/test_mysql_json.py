"""Differential tests of MariaDB's JSON functions in the MySQL dialect: freshview vs MariaDB 10.11.

A JSON column (MariaDB: LONGTEXT with a json_valid check) holds documents written with odd spacing, key
orders and duplicate keys, so MariaDB's re-spacing in JSON_EXTRACT and its first-key rule matter; both
executors, random streams with NULLs and duplicates.
"""

from __future__ import annotations

from tests.differential.test_mysql_dialect import maria  # noqa: F401  (the MariaDB oracle fixture)
from tests.support.differential import run_differential

DOCS = ['{"a": 1, "s": "x"}', '{"s":"y\\\\n z",  "a":[1, 2,{"k":  "v"}]}', '{"a": {"b": 1.50, "c": null}}',
        '{"a": 2, "a": 3}', '[1, "two", null]', '"str"', '{}', None]
J = ("d_id INT, g INT, j JSON, k TEXT, n NUMERIC(6,2)", ["d_id"],
     {"j": DOCS, "g": [1, 2, None], "k": ["a", "b", 'q"uote', None]})


def test_mariadb_json_functions(make_flow, maria):
    report = run_differential(lambda **kw: make_flow(dialect="mysql", **kw), maria, sources={"docs": J}, views=[
        ("m1", "SELECT d_id, JSON_EXTRACT(j, '$.a') AS a, JSON_EXTRACT(j, '$.a[2].k') AS ak, "
               "JSON_EXTRACT(j, '$[1]') AS second, JSON_UNQUOTE(JSON_EXTRACT(j, '$.s')) AS s, "
               "JSON_UNQUOTE(j) AS uq, JSON_EXTRACT(j, '$.a.b') AS ab FROM docs"),
        ("m2", "SELECT d_id, JSON_OBJECT('id', d_id, 'k', k, 'n', n, 'a', JSON_EXTRACT(j, '$.a')) AS o FROM docs"),
        ("m3", "SELECT g, JSON_ARRAYAGG(d_id ORDER BY d_id) AS ids, JSON_ARRAYAGG(k ORDER BY d_id) AS ks, "
               "COUNT(*) AS c FROM docs GROUP BY g"),
        ("m4", "SELECT JSON_UNQUOTE(JSON_EXTRACT(j, '$.s')) AS s, COUNT(*) AS c FROM docs "
               "WHERE JSON_EXTRACT(j, '$.a') IS NOT NULL GROUP BY JSON_UNQUOTE(JSON_EXTRACT(j, '$.s'))"),
    ], seed=81, steps=8)
    assert report.steps >= 8
