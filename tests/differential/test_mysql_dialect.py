"""Differential tests of the MySQL dialect: freshview vs MariaDB on random change streams.

The flows run with ``dialect="mysql"``; MariaDB (the ``mysql_database``
fixture's server, 10.11) runs the same SQL over the same data after every
step, under both executors.  Text values mix case, accents, ``ß`` and
trailing spaces so utf8mb4_general_ci's groups and comparisons matter;
views whose shown spelling of a group is MariaDB's arbitrary choice compare
text by collation key (``canon=collation_keys``).
"""

from __future__ import annotations

import pytest

from tests.support.differential import run_differential
from tests.support.mysql_oracle import MariaDBOracle, collation_keys

WORDS = ["a", "A", "á", "a ", "b", "B", "ß", "s", "S", "ss", "Straße", "STRASSE", "é", "E", "", "x%y", None]
T = ("t_id INT, g INT, s TEXT, d NUMERIC(10,2), f DOUBLE PRECISION, dt DATE, bs TEXT COLLATE utf8mb4_bin",
     ["t_id"], {"s": WORDS, "bs": WORDS, "g": [0, 1, 2, 3, -3, 7, None]})
U = ("u_id INT, u_s TEXT, u_n INT", ["u_id"], {"u_s": WORDS})


@pytest.fixture
def maria(mysql_database):
    ora = MariaDBOracle(mysql_database)
    try:
        yield ora
    finally:
        ora.close()


def _run(make_flow, maria, sources, views, seed, steps=8, canon=None):
    report = run_differential(lambda **kw: make_flow(dialect="mysql", **kw), maria, sources=sources,
                              views=views, seed=seed, steps=steps, canon=canon)
    assert report.steps >= steps
    return report


def test_mysql_arithmetic(make_flow, maria):
    _run(make_flow, maria, {"t": T}, [
        ("ar1", "SELECT t_id, g / 3 AS a, g DIV 2 AS b, g % 3 AS c, MOD(g, 0) AS c0, g / 0 AS z, g + 1 AS k, "
                "-g AS n FROM t"),
        ("ar2", "SELECT t_id, d / g AS e, d % 2 AS m, d % (g - g) AS m0, g * d AS p, d / 4 AS q, f / g AS h "
                "FROM t WHERE g <> 5"),
        ("ar3", "SELECT t_id, g > 1 AS gt, g <=> NULL AS isn, (g > 1) XOR (d > 1) AS x FROM t WHERE g || d > 3"),
    ], seed=1)


def test_mysql_functions(make_flow, maria):
    _run(make_flow, maria, {"t": T}, [
        ("fn1", "SELECT t_id, CONCAT(bs, '-', g) AS c, CONCAT_WS(',', bs, g, d) AS w, IF(g > 1, 'y', 'n') AS y, "
                "IFNULL(g, -1) AS z FROM t"),
        ("fn2", "SELECT t_id, YEAR(dt) AS y, MONTH(dt) AS m, DAY(dt) AS dd, DATE_ADD(dt, INTERVAL 1 MONTH) AS nx, "
                "DATE_SUB(dt, INTERVAL 3 DAY) AS pv FROM t"),
        ("fn3", "SELECT `t_id`, TRUNCATE(d, 1) AS tr, ROUND(d, 1) AS r1, ROUND(d) AS r0, LOCATE('a', bs) AS l, "
                "SUBSTRING(bs, 2, 2) AS sb FROM t WHERE `g` IS NOT NULL && d IS NOT NULL"),
    ], seed=2)


def test_mysql_collation_comparisons(make_flow, maria):
    _run(make_flow, maria, {"t": T, "u": U}, [
        ("co1", "SELECT t_id, s FROM t WHERE s = 'A' OR s = 'ss' OR s IN ('straße', 'E') OR s LIKE 'b%' "
                "OR s LIKE 'a' OR bs LIKE 'S%'"),
        ("co2", "SELECT t_id, bs FROM t WHERE bs = 'a' OR bs > 'S'"),
        ("co3", "SELECT t.t_id, u.u_id FROM t JOIN u ON t.s = u.u_s"),
        ("co4", "SELECT t_id, s = bs AS same, s < 'b' AS lt FROM t"),
    ], seed=3)


def test_mysql_collation_groups(make_flow, maria):
    _run(make_flow, maria, {"t": T, "u": U}, [
        ("gr1", "SELECT s, COUNT(*) AS n, SUM(g) AS total FROM t GROUP BY s"),
        ("gr2", "SELECT DISTINCT s FROM t"),
        ("gr3", "SELECT COUNT(DISTINCT s) AS k, COUNT(DISTINCT bs) AS kb FROM t"),
        ("gr4", "SELECT u_s, COUNT(*) AS n FROM u LEFT JOIN t ON t.s = u.u_s GROUP BY u_s HAVING COUNT(*) > 1"),
        ("gr5", "SELECT bs, COUNT(*) AS n FROM t GROUP BY bs"),
    ], seed=4, canon=collation_keys)


def test_mysql_aggregates(make_flow, maria):
    _run(make_flow, maria, {"t": T}, [
        ("ag1", "SELECT g, SUM(d) AS sd, AVG(d) AS ad, AVG(g) AS ag, MIN(d) AS mn, MAX(dt) AS mx, COUNT(d) AS c "
                "FROM t GROUP BY g"),
        ("ag2", "SELECT SUM(g) AS s, COUNT(*) AS n, SUM(DISTINCT g) AS sdist, MAX(bs) AS mb FROM t"),
        ("ag3", "SELECT g, COUNT(*) AS n FROM t GROUP BY g HAVING SUM(d) > 10"),
    ], seed=5)


def test_mysql_relational(make_flow, maria):
    _run(make_flow, maria, {"t": T, "u": U}, [
        ("re1", "SELECT t.t_id, u.u_n FROM t LEFT JOIN u ON t.g = u.u_n AND u.u_id > 2"),
        ("re2", "SELECT t_id FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.u_n = t.g) "
                "AND t.g NOT IN (SELECT u_id FROM u WHERE u_id IS NOT NULL)"),
        ("re3", "SELECT t_id, g FROM t WHERE g > 2 UNION ALL SELECT u_id, u_n FROM u"),
        ("re4", "SELECT t_id, g FROM t ORDER BY t_id DESC LIMIT 2, 5"),
        ("re5", "SELECT t_id, ROW_NUMBER() OVER (PARTITION BY g ORDER BY t_id) AS rn, "
                "SUM(d) OVER (PARTITION BY g ORDER BY t_id) AS run FROM t"),
        ("re6", "SELECT g, (SELECT COUNT(*) FROM u WHERE u.u_n = x.g) AS m FROM (SELECT DISTINCT g FROM t) x"),
        ("re7", "SELECT t_id, g FROM t WHERE g IN (1, 2) UNION SELECT u_id, u_n FROM u"),
    ], seed=6)


def test_the_oracle_tells_the_dialects_apart(make_flow, maria):
    """PostgreSQL semantics (integer division truncates, 'a' <> 'A') fail against MariaDB: the check can fail."""
    with pytest.raises(AssertionError, match="rows differ"):
        run_differential(make_flow, maria, sources={"t": T}, seed=7, steps=1, executions=["local"],
                         views=[("pg", "SELECT t_id, g / 2 AS a, s = 'a' AS eq FROM t")])


def test_mysql_rollup_and_decimal_div(make_flow, maria):
    _run(make_flow, maria, {"t": T}, [
        ("div_dec", "SELECT t_id, d DIV 2 AS h, d DIV g AS q, g DIV d AS r FROM t"),
        ("sum_div", "SELECT g, SUM(d) DIV 2 AS h FROM t GROUP BY g"),
        ("rollup", "SELECT g, COUNT(*) AS n, SUM(d) AS sd FROM t GROUP BY g WITH ROLLUP"),
    ], seed=23)


def test_mysql_rollup_over_collated_text(make_flow, maria):
    _run(make_flow, maria, {"t": T}, [  # a group's spelling is MariaDB's choice: compared by collation key
        ("rollup_text", "SELECT s, g, COUNT(*) AS n FROM t GROUP BY s, g WITH ROLLUP"),
    ], seed=24, canon=collation_keys)
