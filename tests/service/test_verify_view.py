"""End to end on PostgreSQL: ``CALL freshview.verify_view`` and ``freshview run --verify-every``
(``service.verify``): equal under concurrent writes, and a result table damaged by hand named row by row."""

from __future__ import annotations

import os
import random
import threading
import time

import psycopg
import pytest

from freshview.service.core import ServiceOptions
from freshview.service.metrics import ServiceMetrics
from tests.service.test_service import VIEWS, random_transaction, shop  # noqa: F401 - a fixture
from tests.support.service import wait_until_fresh

CHECKED = {
    "public.customer_totals": VIEWS["public.customer_totals"],  # a join, aggregated (keyed by its groups)
    "public.region_revenue": VIEWS["public.region_revenue"],    # over another freshview view
    "public.big_orders": VIEWS["public.big_orders"],            # counted (rows repeat)
    "public.event_means": "SELECT kind, AVG(qty) AS mean, SUM(qty / 3.0) AS thirds, SUM(qty * 0.1::float8) AS f, "
                          "COUNT(*) AS n FROM events GROUP BY kind",  # numeric and float: within a tolerance
}


class Writer:
    """Random transactions from a thread until stopped."""

    def __init__(self, dsn: str, seed: int) -> None:
        self.dsn, self.rng, self.next_id = dsn, random.Random(seed), [600]
        self.stopped = threading.Event()
        self.count = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopped.is_set():
                random_transaction(conn, self.rng, self.next_id)
                self.count += 1
                time.sleep(0.005)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(30)


def verified(conn: psycopg.Connection, name: str) -> tuple:
    return conn.execute("SELECT verify_result, verify_detail, verified_at IS NOT NULL FROM freshview.views "
                        "WHERE name = %s", (name,)).fetchone()


def test_views_verify_equal_under_writes_and_damage_done_by_hand_is_named(shop, start_service):
    metrics = ServiceMetrics()
    start_service(options=ServiceOptions(poll_s=0.05, verify_every_s=1.0, execution="local"), metrics=metrics)
    with psycopg.connect(shop, autocommit=True) as conn:
        for name, sql in CHECKED.items():
            conn.execute("CALL freshview.create_view(%s, %s)", (name, sql))
        writer = Writer(shop, 7)
        try:
            for name in CHECKED:  # the service keeps stepping the writes meanwhile
                before = writer.count
                answer = conn.execute("CALL freshview.verify_view(%s)", (name,)).fetchone()[0]
                assert answer.startswith("equal at 0/"), (name, answer)
                assert verified(conn, name)[:1] == ("equal",)
            # --verify-every: each view in turn, by itself
            deadline = time.monotonic() + 60
            while not all((verified(conn, n)[2]) for n in CHECKED) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert writer.count > before, "no write ran while the views were verified"
        finally:
            writer.stop()
        wait_until_fresh(shop, list(CHECKED), timeout=120)
        for name in CHECKED:
            assert verified(conn, name)[0] == "equal", verified(conn, name)

        # Damage by hand (the test's role is a superuser): freshview did not write these.
        customer, total = conn.execute("SELECT customer, total FROM customer_totals ORDER BY customer LIMIT 1"
                                       ).fetchone()
        conn.execute("UPDATE customer_totals SET total = total + 1000 WHERE customer = %s", (customer,))
        amount = conn.execute("SELECT amount FROM big_orders ORDER BY amount DESC LIMIT 1").fetchone()[0]
        conn.execute("DELETE FROM big_orders WHERE amount = %s", (amount,))
        conn.execute("INSERT INTO event_means VALUES ('forged', 1, 2, 3, 4)")
        with pytest.raises(psycopg.errors.RaiseException) as damaged:
            conn.execute("CALL freshview.verify_view('public.customer_totals')")
        text = str(damaged.value)
        assert "view public.customer_totals differs from its SQL at 0/" in text, text
        assert f"missing from the result table: ({customer}, " in text and f", {total}, " in text, text
        assert f"extra in the result table:     ({customer}, " in text and f", {total + 1000}, " in text, text
        with pytest.raises(psycopg.errors.RaiseException, match=rf"missing from the result table: \(\d+, {amount}, "):
            conn.execute("CALL freshview.verify_view('public.big_orders')")
        with pytest.raises(psycopg.errors.RaiseException,
                           match=r"extra in the result table: +\(forged, 1, 2, 3, 4\)"):
            conn.execute("CALL freshview.verify_view('public.event_means')")
        result, detail, _ = verified(conn, "public.event_means")
        assert result == "different" and "(forged, 1, 2, 3, 4)" in detail
        # a view over the damaged one reads it through its definition: its own table is right
        assert conn.execute("CALL freshview.verify_view('public.region_revenue')").fetchone()[0].startswith("equal")
    sample = metrics.registry.get_sample_value
    assert sample("freshview_view_verified_total", {"view": "public.event_means", "result": "different"}) >= 1
    assert sample("freshview_view_verified_total", {"view": "public.customer_totals", "result": "equal"}) >= 2


def test_what_cannot_be_verified_is_refused_with_the_reason(shop, start_service):
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.RaiseException, match="freshview: no view named public.nothing"):
            conn.execute("CALL freshview.verify_view('nothing')")
        conn.execute("CALL freshview.create_view('recent', $$SELECT id FROM orders WHERE placed > now() - "
                     "interval '30 days'$$)")
        with pytest.raises(psycopg.errors.RaiseException, match="view public.recent is time-based"):
            conn.execute("CALL freshview.verify_view('recent')")
        role = f"fv_verify_{os.getpid()}"
        conn.execute(f"CREATE ROLE {role}")
        try:
            conn.execute(f"SET ROLE {role}")
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied to verify view recent"):
                conn.execute("CALL freshview.verify_view('recent')")
            conn.execute("RESET ROLE")
        finally:
            conn.execute(f"DROP ROLE {role}")
