"""The binder's MySQL dialect: types, the plans of MySQL's rules, collation keys, located refusals.

The values these plans compute are checked against MariaDB in
tests/differential/test_mysql_dialect.py; here: the typing (read from MariaDB
10.11's ``CREATE TABLE ... AS SELECT`` + ``SHOW CREATE TABLE``) and the errors.
"""

from __future__ import annotations

import pytest

from freshview.collation import fold, key
from freshview.errors import SqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import Call
from freshview.schema import SqlType, schema_from_ddl
from freshview.sql import build_plan
from freshview.sql.dialect import get_dialect

T = schema_from_ddl("id INT, i INT, b BIGINT, d NUMERIC(10,2), f DOUBLE PRECISION, s TEXT, "
                    "bs TEXT COLLATE utf8mb4_bin, dt DATE, ls TEXT COLLATE latin1_swedish_ci")


class Catalog:
    def relation_columns(self, name):
        return (tuple((c.name, c.type) for c in T.columns), False) if name == "t" else None


def types(sql: str) -> dict[str, SqlType]:
    return dict(build_plan(sql, Catalog(), "mysql").columns)


def walk(node):
    yield node
    for child in node.inputs():
        yield from walk(child)


def test_division_is_decimal_with_the_dividends_scale_plus_4():
    t = types("SELECT i / i AS a, d / i AS b, i / d AS c, f / i AS e, i DIV 2 AS g, i % 2 AS m FROM t")
    assert t["a"] == SqlType.numeric(None, 4)
    assert t["b"] == SqlType.numeric(None, 6)
    assert t["c"] == SqlType.numeric(None, 4)
    assert t["e"] == SqlType("float8")
    assert t["g"] == SqlType("int8") and t["m"] == SqlType("int8")


def test_division_by_zero_is_null_through_a_nullif_divisor():
    plan = build_plan("SELECT i / i AS a FROM t", Catalog(), "mysql")
    project = next(n for n in walk(plan) if isinstance(n, pn.Project))
    div = project.exprs[0]
    assert isinstance(div, Call) and div.op == "/" and div.args[1].op == "nullif"


def test_aggregate_types_follow_mariadb():
    t = types("SELECT SUM(i) AS si, SUM(b) AS sb, SUM(d) AS sd, AVG(i) AS ai, AVG(d) AS ad, COUNT(*) AS n, "
              "SUM(f) AS sf FROM t")
    assert t["si"] == SqlType.numeric(32, 0)
    assert t["sb"] == SqlType.numeric(38, 0)  # decimal(41,0) in MariaDB; 38 digits is freshview's widest
    assert t["sd"] == SqlType.numeric(32, 2)
    assert t["ai"] == SqlType.numeric(14, 4)
    assert t["ad"] == SqlType.numeric(14, 6)
    assert t["n"] == SqlType("int8") and t["sf"] == SqlType("float8")


def test_postgres_dialect_keeps_postgres_rules():
    t = dict(build_plan("SELECT i / i AS a, SUM(i) AS s FROM t GROUP BY i", Catalog()).columns)
    assert t["a"] == SqlType("int4") and t["s"] == SqlType("int8")


def test_mysql_spelling_parses():
    t = types("SELECT `id`, CONCAT(s, 'x') AS c, IF(i > 1, 1, 0) AS y, IFNULL(i, 0) AS z, i <=> NULL AS n, "
              "YEAR(dt) AS yr, DATE_ADD(dt, INTERVAL 1 DAY) AS nx FROM t WHERE i || d && s = \"a\" LIMIT 1, 2")
    assert t["yr"] == SqlType("int4") and t["nx"] == SqlType("date") and t["n"] == SqlType("bool")


def test_text_comparisons_use_the_collation_key():
    plan = build_plan("SELECT id FROM t WHERE s = 'A' AND bs = 'b'", Catalog(), "mysql")
    text = " ".join(str(getattr(n, "predicate", "")) for n in walk(plan))
    assert "collkey:utf8mb4_general_ci" in text and "collkey:utf8mb4_bin" in text


def test_group_by_case_insensitive_text_groups_by_key_and_shows_a_spelling():
    plan = build_plan("SELECT s, COUNT(*) AS n FROM t GROUP BY s", Catalog(), "mysql")
    agg = next(n for n in walk(plan) if isinstance(n, pn.Aggregate))
    assert (agg.group[0].op, agg.group[0].param) == ("collkey", "utf8mb4_general_ci")
    assert [a.func for a in agg.aggs] == ["count_star", "spelling"]


@pytest.mark.parametrize("sql, message", [
    ("SELECT 'a' + 1 AS x FROM t", "arithmetic on a string"),
    ("SELECT MAX(s) FROM t", "MAX of text under the case-insensitive collation"),
    ("SELECT id FROM t ORDER BY s LIMIT 2", "ORDER BY text under the case-insensitive collation"),
    ("SELECT s FROM t UNION SELECT s FROM t", "UNION (without ALL) of text columns"),
    ("SELECT bs FROM t INTERSECT SELECT bs FROM t", "INTERSECT (without ALL) of text columns"),
    ("SELECT s FROM t WHERE s = 'x' COLLATE utf8mb4_unicode_ci", "collation 'utf8mb4_unicode_ci'"),
    ("SELECT s, i FROM t GROUP BY s", "ONLY_FULL_GROUP_BY"),
    ("SELECT f DIV 2 FROM t", "DIV of double precision"),
    ("SELECT now() FROM t", "now() in the SELECT list cannot be scheduled"),
    ("SELECT id FROM t WHERE ls = 'a'", "column 'ls' under collation 'latin1_swedish_ci'"),
])
def test_refusals_are_located(sql, message):
    with pytest.raises(SqlError) as err:
        build_plan(sql, Catalog(), "mysql")
    assert message in str(err.value) and "line 1, column" in str(err.value)


def test_unknown_dialect():
    with pytest.raises(ValueError, match="unknown SQL dialect"):
        get_dialect("oracle")


def test_general_ci_keys_match_mariadb_facts():
    # SELECT 'a'='A ', 'a'='á', 'ß'='s', 'ss'='ß' on MariaDB 10.11: 1, 1, 1, 0
    assert key("a") == key("A ") == key("á")
    assert key("ß") == key("s") and key("ss") != key("ß")
    assert key("😀") == key("😺")  # every supplementary character weighs U+FFFD
    assert key("a ", "utf8mb4_bin") == "a" and key("A", "utf8mb4_bin") != key("a", "utf8mb4_bin")
    assert fold("a ") == "A "  # LIKE is not PAD SPACE


def test_like_folds_case_but_keeps_trailing_spaces():
    plan = build_plan("SELECT id FROM t WHERE s LIKE 'a%' AND bs LIKE 'b'", Catalog(), "mysql")
    text = " ".join(str(getattr(n, "predicate", "")) for n in walk(plan))
    assert "collfold:utf8mb4_general_ci" in text and "collkey" not in text


class NamedCatalog:
    """Relations ``Orders`` (mixed case) and ``orders`` of the default database ``app``, ``other.t`` elsewhere."""

    default_schema = "app"

    def relation_columns(self, name):
        cols = tuple((c.name, c.type) for c in schema_from_ddl("id INT, amount INT").columns)
        return (cols, False) if name in ("Orders", "orders", "other.t") else None


def scans(sql: str, dialect: str = "mysql") -> list[str]:
    return sorted(n.relation for n in walk(build_plan(sql, NamedCatalog(), dialect)) if isinstance(n, pn.Scan))


def test_mysql_table_names_keep_their_case_and_columns_fold():
    assert scans("SELECT Id, AMOUNT AS Total FROM Orders") == ["Orders"]
    assert build_plan("SELECT Id, `AMOUNT` AS Total FROM Orders", NamedCatalog(), "mysql").columns[1][0] == "total"
    assert scans("SELECT o.id FROM `Orders` o JOIN orders p ON o.ID = p.id") == ["Orders", "orders"]
    with pytest.raises(SqlError, match="unknown table or alias 'O'"):  # aliases are case-sensitive, as on Linux
        build_plan("SELECT o.id FROM Orders o WHERE O.id > 0", NamedCatalog(), "mysql")
    assert scans("SELECT id FROM app.Orders") == ["Orders"]  # the default database's relations are bare
    assert scans("SELECT id FROM other.t") == ["other.t"]
    with pytest.raises(SqlError, match="unknown table 'ORDERS'"):
        build_plan("SELECT id FROM ORDERS", NamedCatalog(), "mysql")
    with pytest.raises(SqlError, match="unknown table"):
        build_plan("SELECT id FROM App.Orders", NamedCatalog(), "mysql")  # database names keep their case too


def test_postgres_folds_unquoted_table_names():
    assert scans('SELECT id FROM ORDERS', "postgres") == ["orders"]
    assert scans('SELECT id FROM "Orders"', "postgres") == ["Orders"]
