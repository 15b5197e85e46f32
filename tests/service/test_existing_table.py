"""End to end on PostgreSQL: ``create_view(..., use_existing_table => true)`` fills a table the user made
(partitioned, indexed, granted, commented: all kept), refuses one that cannot hold the view naming why, and
``drop_view`` leaves it."""

from __future__ import annotations

import os
import random

import psycopg
import pytest

from tests.service.test_service import VIEWS, random_transaction, shop  # noqa: F401 - a fixture
from tests.support.service import wait_until_fresh

SQL = VIEWS["public.customer_totals"]  # customer, region, n, total, biggest; keyed by (customer, region)


def test_a_view_fills_a_table_the_user_made_and_keeps_what_the_user_gave_it(shop, start_service):
    start_service()
    role = f"fv_reader_{os.getpid()}"
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CREATE TABLE totals_p (customer bigint, region text, n bigint, total numeric, "
                     "biggest numeric(14,2), UNIQUE NULLS NOT DISTINCT (customer, region)) PARTITION BY HASH (customer)")
        for i in range(2):
            conn.execute(f"CREATE TABLE totals_p_{i} PARTITION OF totals_p FOR VALUES WITH (MODULUS 2, REMAINDER {i})")
        conn.execute("CREATE INDEX totals_p_total ON totals_p (total)")
        conn.execute("COMMENT ON TABLE totals_p IS 'mine'")
        conn.execute(f"CREATE ROLE {role}")
        try:
            conn.execute(f"GRANT SELECT ON totals_p TO {role}")
            conn.execute("INSERT INTO totals_p VALUES (-1, 'stale', 1, 1, 1)")
            oid = conn.execute("SELECT 'totals_p'::regclass::oid").fetchone()[0]
            with pytest.raises(psycopg.errors.RaiseException, match="a table named public.totals_p already exists"):
                conn.execute("CALL freshview.create_view('public.totals_p', %s)", (SQL,))
            conn.execute("CALL freshview.create_view('public.totals_p', %s, use_existing_table => true)", (SQL,))
            rng, next_id = random.Random(11), [600]
            for _ in range(30):
                random_transaction(conn, rng, next_id)
            wait_until_fresh(shop, ["public.totals_p"], timeout=120)
            assert conn.execute("SELECT count(*) FROM totals_p WHERE region = 'stale'").fetchone()[0] == 0
            assert conn.execute("SELECT 'totals_p'::regclass::oid, obj_description('totals_p'::regclass), "
                                "has_table_privilege(%s, 'totals_p', 'SELECT'), "
                                "to_regclass('totals_p_total') IS NOT NULL", (role,)).fetchone() == (
                oid, "mine", True, True)
            assert conn.execute("SELECT existing FROM freshview.views WHERE name = 'public.totals_p'").fetchone() == (
                True,)
            assert conn.execute("CALL freshview.verify_view('public.totals_p')").fetchone()[0].startswith("equal")
            conn.execute("CALL freshview.drop_view('public.totals_p')")
            assert conn.execute("SELECT to_regclass('totals_p') IS NOT NULL").fetchone() == (True,)
        finally:
            conn.execute("DROP TABLE IF EXISTS totals_p")
            conn.execute(f"DROP ROLE {role}")


def test_a_table_that_cannot_hold_the_view_is_refused_naming_why(shop, start_service):
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CREATE TABLE narrow (customer int, region text, n int, total numeric)")
        with pytest.raises(psycopg.errors.RaiseException) as refused:
            conn.execute("CALL freshview.create_view('public.narrow', %s, use_existing_table => true)", (SQL,))
        assert str(refused.value).startswith(
            "freshview: the table public.narrow cannot hold the view's result (use_existing_table): "
            "its column n is integer, which the view's bigint does not convert to without loss; "
            "it has no column biggest (numeric(12,2)); "
            "it has no primary key or unique index on exactly (customer, region), the view's key")
        assert conn.execute("SELECT count(*) FROM narrow").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM freshview.views").fetchone() == (0,)
        with pytest.raises(psycopg.errors.RaiseException, match="there is no table public.nope to fill"):
            conn.execute("CALL freshview.create_view('public.nope', %s, use_existing_table => true)", (SQL,))


def test_a_requester_who_may_not_write_the_table_is_refused(shop, start_service):
    """The service fills the user's table with its own rights: the requester must hold INSERT and DELETE on it,
    or anyone who may call create_view could have any table the service may write overwritten."""
    from tests.service.test_access_postgres import as_role

    start_service()
    role = "fv_existing_writer"
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute(f"DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN "
                     f"CREATE ROLE {role} LOGIN; END IF; END$$")
        conn.execute(f"GRANT USAGE ON SCHEMA freshview TO {role}")
        conn.execute(f"GRANT SELECT ON orders, customers TO {role}")
        conn.execute("CREATE TABLE victims (customer bigint, region text, n bigint, total numeric, "
                     "biggest numeric(14,2), UNIQUE NULLS NOT DISTINCT (customer, region))")
        conn.execute("INSERT INTO victims VALUES (-1, 'kept', 1, 1, 1)")
        conn.execute(f"GRANT SELECT, INSERT ON victims TO {role}")
        with psycopg.connect(as_role(shop, role), autocommit=True) as theirs:
            with pytest.raises(psycopg.errors.RaiseException) as refused:
                theirs.execute("CALL freshview.create_view('public.victims', %s, use_existing_table => true)",
                               (SQL,))
            assert "the view's requester fv_existing_writer may not DELETE it" in str(refused.value)
            assert conn.execute("SELECT count(*) FROM victims WHERE customer = -1").fetchone() == (1,)  # untouched
            assert conn.execute("SELECT count(*) FROM freshview.views WHERE name = 'public.victims'").fetchone() == (0,)
            conn.execute(f"GRANT DELETE ON victims TO {role}")
            theirs.execute("CALL freshview.create_view('public.victims', %s, use_existing_table => true)", (SQL,))
        wait_until_fresh(shop, ["public.victims"], timeout=60)
