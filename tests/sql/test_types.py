"""Binding json, jsonb, arrays, enums, uuid and inet: what each becomes, and the located refusals
(PostgreSQL's own errors, and what freshview does not maintain)."""

from __future__ import annotations

import pytest

from freshview.errors import SqlTypeError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import Call, Literal
from freshview.schema import SqlType, schema_from_ddl
from freshview.sql import build_plan

SOURCES = {"t": schema_from_ddl("id INT, j JSONB, js JSON, xs INT[], m mood AS ENUM ('zen', 'sad', 'ok'), "
                                "u UUID, ip INET, s TEXT")}


class Catalog:
    def relation_columns(self, name):
        return (tuple((c.name, c.type) for c in SOURCES[name].columns), False) if name in SOURCES else None


def plan(sql, dialect="postgres"):
    return build_plan(sql, Catalog(), dialect)


def project(sql, dialect="postgres"):
    return [n for n in pn.walk(plan(sql, dialect)) if isinstance(n, pn.Project)][0].exprs


def calls(e):
    out = [e.op] if isinstance(e, Call) else []
    for c in e.children():
        out += calls(c)
    return out


def test_json_operators_bind_to_typed_calls():
    ja, jat, jp, c, has, built = project(
        "SELECT j -> 'a' AS ja, j ->> 0 AS jat, j #>> '{a,1}' AS jp, j @> '{\"a\": 1}' AS c, j ? 'k' AS has, "
        "jsonb_build_object('b', 1, 'a', s) AS built FROM t")
    assert (ja.op, ja.type, ja.args[1]) == ("json_get", SqlType("jsonb"), Literal(SqlType("text"), "a"))
    assert (jat.op, jat.type, jat.args[1]) == ("json_get_text", SqlType("text"), Literal(SqlType("int4"), 0))
    assert jp.op == "json_path_text" and [a.value for a in jp.args[1:]] == ["a", "1"]
    assert c.op == "jsonb_contains" and c.args[1] == Literal(SqlType("jsonb"), '{"a": 1}')  # canonical
    assert has.op == "jsonb_exists" and built.op == "json_build_object" and built.type == SqlType("jsonb")


def test_jsonb_literals_are_canonical_and_enum_order_is_declared():
    [eq] = [n.predicate for n in pn.walk(plan("SELECT id FROM t WHERE j = '{\"b\":1,  \"a\" : 2}'"))
            if isinstance(n, pn.Filter)]
    assert eq.args[1] == Literal(SqlType("text"), '{"a": 2, "b": 1}')  # its equality key (canonical), folded
    [lt] = [n.predicate for n in pn.walk(plan("SELECT id FROM t WHERE m < 'sad'")) if isinstance(n, pn.Filter)]
    assert lt.op == "<" and [a.type for a in lt.args] == [SqlType("int4")] * 2  # ranks compared, not labels


@pytest.mark.parametrize("sql, error, words", [
    ("SELECT j FROM t GROUP BY js, j", UnsupportedSqlError, "GROUP BY a json value"),
    ("SELECT id FROM t WHERE js = js", SqlTypeError, "operator does not exist: json = json"),
    ("SELECT id FROM t WHERE j < j", UnsupportedSqlError, "ordering jsonb"),
    ("SELECT id FROM t WHERE ip > '10.0.0.1'", UnsupportedSqlError, "ordering inet"),
    ("SELECT MIN(ip) FROM t", SqlTypeError, r"min\(inet\)"),
    ("SELECT MAX(u) FROM t", SqlTypeError, r"max\(uuid\)"),
    ("SELECT id FROM t ORDER BY j LIMIT 3", UnsupportedSqlError, "ORDER BY a jsonb"),
    ("SELECT count(unnest(xs)) FROM t", UnsupportedSqlError, "set-returning"),
    ("SELECT id FROM t WHERE m = 'angry'", SqlTypeError, "invalid input value for enum mood"),
    ("SELECT id FROM t WHERE u = 'not-a-uuid'", SqlTypeError, "invalid input value for type uuid"),
    ("SELECT id FROM t WHERE m = s", SqlTypeError, "cannot compare"),
    ("SELECT s::uuid FROM t", UnsupportedSqlError, "non-constant"),
    ("SELECT id FROM t WHERE 1 < ANY(xs)", UnsupportedSqlError, "only = ANY"),
])
def test_refusals_are_located(sql, error, words):
    with pytest.raises(error, match=words) as info:
        plan(sql)
    assert "line 1" in str(info.value)


def test_mysql_json_functions_bind_to_mariadb_ops():
    a, b, o = project("SELECT JSON_EXTRACT(js, '$.a[1].b') AS a, js ->> '$.s' AS b, JSON_OBJECT('k', id) AS o FROM t",
                      "mysql")
    assert a.op == "mariadb_extract" and [x.value for x in a.args[1:]] == ["a", 1, "b"]
    assert b.op == "json_unquote" and b.args[0].op == "mariadb_extract"
    assert o.op == "mariadb_object"
    with pytest.raises(UnsupportedSqlError, match="JSON_OBJECT"):
        plan("SELECT JSON_OBJECT('k', id) AS o FROM t")
