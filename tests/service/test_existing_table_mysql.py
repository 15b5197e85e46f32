"""End to end on MariaDB: ``create_view_use_existing_table`` (and ``_timeout``) fills a table the user made
(partitioned, indexed, granted: all kept) and keeps it up to date, refuses one that cannot hold the view
naming why, refuses a missing table and a requester who may not write the table, and ``drop_view`` leaves
it."""

from __future__ import annotations

import random

import pymysql
import pytest

from freshview.connectors.mysql.setup import user_grant_sql
from tests.service.test_mysql_service import (  # noqa: F401 - fixtures
    connect, run_transactions, shop, start_service, wait_until_fresh,
)

SQL = "SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders WHERE status <> 'cancelled' GROUP BY customer"
USER = "fv_existing_user"


def test_a_view_fills_a_table_the_user_made_on_mariadb(shop, start_service):
    start_service()
    database = shop["database"]
    name = f"{database}.totals_u"
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        # _fv_key: the digest of the view's key (customer) that freshview writes by; partitioned by it
        cur.execute("CREATE TABLE totals_u (_fv_key binary(16) NOT NULL PRIMARY KEY, customer bigint, "
                    "n decimal(30,0), total decimal(65,10), KEY totals_u_total (total)) "
                    "PARTITION BY KEY (_fv_key) PARTITIONS 3")
        cur.execute("INSERT INTO totals_u VALUES (X'00', -1, 1, 1)")
        cur.execute("CREATE USER IF NOT EXISTS 'fv_existing_r'@'%'")
        cur.execute(f"GRANT SELECT ON `{database}`.totals_u TO 'fv_existing_r'@'%'")
        try:
            with pytest.raises(pymysql.err.MySQLError, match=f"a table named {name} already exists"):
                cur.execute("CALL freshview.create_view(%s, %s)", (name, SQL))
            cur.execute("CALL freshview.create_view_use_existing_table(%s, %s)", (name, SQL))
            cur.execute("SELECT COUNT(*) FROM totals_u WHERE customer = -1")
            assert cur.fetchone() == (0,)
            run_transactions(shop, random.Random(31), 40, [300])
            wait_until_fresh(shop, ["totals_u"], timeout=120)
            cur.execute("SELECT status, existing FROM freshview.views WHERE name = %s", (name,))
            assert cur.fetchone() == ("active", 1)
            cur.execute("SELECT COUNT(*) FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = 'totals_u'", (database,))
            assert cur.fetchone() == (3,)
            cur.execute("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = 'totals_u' AND INDEX_NAME = 'totals_u_total'", (database,))
            assert cur.fetchone() == (1,)
            cur.execute("SHOW GRANTS FOR 'fv_existing_r'@'%'")
            assert f"`{database}`.`totals_u`" in " ".join(g for g, in cur.fetchall())
            cur.execute("CALL freshview.verify_view(%s)", (name,))
            assert cur.fetchone()[0].startswith("equal")
            cur.execute("CALL freshview.drop_view(%s)", (name,))
            cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = 'totals_u'", (database,))
            assert cur.fetchone() == (1,)  # (the user's table stays)
            cur.execute("SHOW GRANTS FOR 'fv_existing_r'@'%'")
            assert f"`{database}`.`totals_u`" in " ".join(g for g, in cur.fetchall())
            # the _timeout form, into the same table again (its rows replaced)
            cur.execute("CALL freshview.create_view_use_existing_table_timeout(%s, %s, 120)", (name, SQL))
            wait_until_fresh(shop, ["totals_u"], timeout=120)
        finally:
            cur.execute("DROP USER IF EXISTS 'fv_existing_r'@'%'")


def test_a_table_that_cannot_hold_the_view_is_refused_on_mariadb(shop, start_service):
    start_service()
    database = shop["database"]
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE narrow (customer int, n int, total decimal(6,2), region varchar(10) NOT NULL, "
                    "UNIQUE KEY narrow_customer (customer))")
        cur.execute("INSERT INTO narrow VALUES (1, 1, 1, 'x')")
        with pytest.raises(pymysql.err.MySQLError) as refused:
            cur.execute("CALL freshview.create_view_use_existing_table(%s, %s)", (f"{database}.narrow", SQL))
        text = refused.value.args[1]
        assert text.startswith(f"freshview: the table {database}.narrow cannot hold the view's result "
                               "(use_existing_table): it has no column _fv_key (binary(16)); "
                               "its column n is int, which the view's bigint does not convert to without loss; "
                               "its column total is decimal(6,2), which the view's decimal("), text
        assert "its column region is NOT NULL without a default, and the view does not fill it" in text, text
        cur.execute("SELECT COUNT(*) FROM narrow")
        assert cur.fetchone() == (1,)  # untouched
        cur.execute("SELECT name, status, error FROM freshview.views WHERE name LIKE %s", (f"{database}.%",))
        assert cur.fetchall() == ()
        # the key: every unique key must hold _fv_key
        cur.execute("CREATE TABLE keyed (_fv_key binary(16) NOT NULL PRIMARY KEY, customer int, n bigint, "
                    "total decimal(65,10), UNIQUE KEY keyed_customer (customer))")
        with pytest.raises(pymysql.err.MySQLError, match="its unique index keyed_customer on \\(customer\\) lacks "
                                                         "_fv_key"):
            cur.execute("CALL freshview.create_view_use_existing_table(%s, %s)", (f"{database}.keyed", SQL))
        with pytest.raises(pymysql.err.MySQLError, match=f"there is no table {database}.nope to fill"):
            cur.execute("CALL freshview.create_view_use_existing_table(%s, %s)", (f"{database}.nope", SQL))
        cur.execute("SELECT name, status, error FROM freshview.views WHERE name LIKE %s", (f"{database}.%",))
        assert cur.fetchall() == ()


def test_a_requester_who_may_not_write_the_table_is_refused_on_mariadb(shop, start_service):
    start_service()
    database = shop["database"]
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE theirs (_fv_key binary(16) NOT NULL PRIMARY KEY, customer bigint, n bigint, "
                    "total decimal(65,10))")
        cur.execute("INSERT INTO theirs VALUES (X'00', -1, 1, 1)")
        cur.execute(f"DROP USER IF EXISTS '{USER}'@'%'")
        cur.execute(f"CREATE USER '{USER}'@'%' IDENTIFIED BY 'pw'")
        try:
            for grant in user_grant_sql(f"'{USER}'@'%'"):
                cur.execute(grant)
            cur.execute(f"GRANT SELECT ON `{database}`.orders TO '{USER}'@'%'")
            cur.execute(f"GRANT SELECT ON `{database}`.theirs TO '{USER}'@'%'")
            with connect(shop, user=USER, password="pw", autocommit=True) as user, user.cursor() as ucur:
                with pytest.raises(pymysql.err.MySQLError, match="the view's requester may not INSERT, DELETE "
                                                                 f"{database}.theirs"):
                    ucur.execute("CALL freshview.create_view_use_existing_table(%s, %s)", (f"{database}.theirs", SQL))
                cur.execute("SELECT customer FROM theirs")
                assert cur.fetchall() == ((-1,),)  # untouched
                cur.execute(f"GRANT INSERT, DELETE ON `{database}`.theirs TO '{USER}'@'%'")
                ucur.execute("CALL freshview.create_view_use_existing_table(%s, %s)", (f"{database}.theirs", SQL))
            wait_until_fresh(shop, ["theirs"], timeout=120)
        finally:
            cur.execute(f"DROP USER IF EXISTS '{USER}'@'%'")
