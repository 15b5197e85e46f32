"""Time functions in view SQL: accepted where they can be scheduled (both dialects), refused elsewhere with
the construct, line and column."""

from __future__ import annotations

import pytest

from freshview.errors import UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.temporal import TemporalFilter
from freshview.schema import schema_from_ddl
from freshview.sql.build import build_plan

T = schema_from_ddl("id INT, ts TIMESTAMP, tz TIMESTAMPTZ, d DATE, v INT")


class Catalog:
    def relation_columns(self, name):
        return (tuple((c.name, c.type) for c in T.columns), False) if name == "t" else None


def temporal(sql: str, dialect: str = "postgres") -> list[TemporalFilter]:
    return [n for n in pn.walk(build_plan(sql, Catalog(), dialect)) if isinstance(n, TemporalFilter)]


@pytest.mark.parametrize("where", [
    "ts > now() - interval '30 days'", "d >= current_date", "tz <= current_timestamp",
    "ts < localtimestamp", "date_trunc('day', now()) <= ts", "now()::date = d", "d BETWEEN current_date - 7 AND current_date",
    "CASE WHEN v > 1 THEN ts > now() ELSE d <> current_date END", "ts > transaction_timestamp() OR v IS NULL",
    "NOT (ts >= statement_timestamp() - interval '2 hours')", "CASE WHEN ts > now() THEN 1 ELSE 0 END = 1",
])
def test_postgres_time_functions_in_comparisons_are_scheduled(where):
    assert len(temporal(f"SELECT id FROM t WHERE {where}")) == 1


@pytest.mark.parametrize("where", [
    "ts > NOW() - INTERVAL 1 DAY", "d >= CURDATE()", "ts > DATE_SUB(UTC_TIMESTAMP(), INTERVAL 30 DAY)",
    "d = UTC_DATE()", "ts <= CURRENT_TIMESTAMP", "ts < LOCALTIMESTAMP", "ts < SYSDATE()", "d > CURRENT_DATE",
])
def test_mysql_time_functions_in_comparisons_are_scheduled(where):
    assert len(temporal(f"SELECT id FROM t WHERE {where}", "mysql")) == 1


def test_having_and_join_conditions_are_scheduled():
    assert temporal("SELECT v, max(ts) AS m FROM t GROUP BY v HAVING max(ts) > now() - interval '1 day'")
    assert temporal("SELECT a.id FROM t a JOIN t b ON a.v = b.v AND b.ts > now()")
    assert temporal("SELECT a.id, b.id AS j FROM t a LEFT JOIN t b ON a.v = b.v AND b.ts > now()")


@pytest.mark.parametrize("sql, words, keyword", [
    ("SELECT id,\n  now() AS n FROM t", "now() in the SELECT list cannot be scheduled", "now()"),
    ("SELECT count(*) AS n FROM t\nGROUP BY current_date - d", "current_date in a GROUP BY key", "current_date"),
    ("SELECT v, count(*) AS n FROM t\nGROUP BY v, d >= current_date", "cannot be scheduled", "current_date"),
    ("SELECT count(*) AS c,\n  sum(CASE WHEN ts > now() THEN 1 END) AS n FROM t", "in an aggregate's argument", "now()"),
    ("SELECT id FROM t\nWHERE ts > now() - interval '1 month'", "a month is not a fixed span", "now()"),
    ("SELECT id FROM t\nWHERE d - current_date > 3", "now()", "current_date"),
    ("SELECT id FROM t\nWHERE extract(hour from now()) = 3", "outside a comparison", "now()"),
    ("SELECT id FROM t\nWHERE (now() IS NULL)", "outside a comparison", "now()"),
    ("SELECT id FROM t\nWHERE ts > current_timestamp(3)", "current_timestamp(precision) is not supported",
     "current_timestamp"),
    ("SELECT id FROM t\nWHERE current_time IS NULL", "current_time is not supported", "current_time"),
])
def test_unschedulable_uses_are_refused_with_the_reason_and_position(sql, words, keyword):
    with pytest.raises(UnsupportedSqlError) as err:
        build_plan(sql, Catalog())
    text = str(err.value)
    assert words in text and "^" in text, text
    where = err.value.location
    assert where is not None and where.line == 2, text
    assert sql.splitlines()[1][where.column - 1:].lower().startswith(keyword), text


def test_mysql_now_in_the_select_list_is_refused_with_its_position():
    with pytest.raises(UnsupportedSqlError, match="now\\(\\) in the SELECT list") as err:
        build_plan("SELECT id, NOW() AS n FROM t", Catalog(), "mysql")
    assert err.value.location is not None and err.value.location.column == 12
