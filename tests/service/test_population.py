"""End to end on PostgreSQL: a view is populated beside the stream (``service.population``).

The population is held in its first computation (``loading.compute_first`` made to wait, in the
service's own process) so the tests can look at the service while it populates: the other views keep
changing, the stream keeps being acknowledged, ``freshview.views`` shows the phase and the rows read;
then it is let go, catches up on what was written meanwhile and ends equal to the view's SQL.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from freshview.errors import FreshviewError
from freshview.service import loading
from tests.service.test_service import SCHEMA, VIEWS, random_transaction
from tests.support.service import ROOT, wait_for_status, wait_until_fresh

HELD = "public.customer_totals"  # reads orders and customers, both followed anew by its population
PROBE = "public.event_totals"  # reads events: the view that must keep its lag meanwhile


@pytest.fixture
def shop(database: str) -> str:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(SCHEMA)
    return database


@pytest.fixture
def gate(monkeypatch):
    """``gate.set()`` lets the held view's first computation go; ``gate.reached`` is set once it waits."""
    gate = _hold(monkeypatch, HELD)
    yield gate
    gate.set()


def _hold(monkeypatch, name: str) -> threading.Event:
    """View ``name``'s first computation waits for the returned event (``reached`` is set once it waits)."""
    gate = threading.Event()
    gate.reached = threading.Event()  # type: ignore[attr-defined]
    original = loading.compute_first

    def held(flow, view, sql, *args):
        if view == name.split(".", 1)[1] or view == name:
            gate.reached.set()  # type: ignore[attr-defined]
            assert gate.wait(120), "the test never let the population go"
        return original(flow, view, sql, *args)

    monkeypatch.setattr(loading, "compute_first", held)
    return gate


def _view_row(conn: psycopg.Connection, name: str) -> tuple | None:
    return conn.execute("SELECT status, phase, rows_read, elapsed_s, error FROM freshview.views WHERE name = %s",
                        (name,)).fetchone()


def _poll(what, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


FILLS = "SELECT count(*) FROM pg_tables WHERE tablename LIKE '\\_fv\\_fill\\_%'"  # tables written aside


def test_a_view_populates_beside_the_stream(shop, start_service, gate, caplog):
    caplog.set_level(logging.INFO, logger="freshview")
    start_service()
    rng = random.Random(3)
    next_id = [600]
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view(%s, %s)", (PROBE, VIEWS[PROBE]))
        # A CALL that times out says how far the population got (and the population goes on).
        with pytest.raises(psycopg.errors.RaiseException,
                           match=r"still working on request \d+ after 10 s \(public.customer_totals is populating: "
                                 r"computing, 640 rows read( of ~\d+)?, [\d.]+ s\)"):  # (an estimate once analyzed)
            conn.execute("CALL freshview.create_view(%s, %s, 10)", (HELD, VIEWS[HELD]))
        assert gate.reached.wait(60)
        row = _poll(lambda: (r := _view_row(conn, HELD)) and r[1] == "computing" and r)
        assert row and row[0] == "populating" and row[2] == 640, row  # 600 orders + 40 customers read
        assert conn.execute("SELECT to_regclass(%s)", (HELD,)).fetchone()[0] is None  # never visible half filled
        slot_lsn = "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name LIKE 'freshview_%%' " \
                   "AND NOT temporary"
        before_lsn = conn.execute(slot_lsn).fetchone()[0]
        before_beat = conn.execute("SELECT heartbeat_at FROM freshview.progress").fetchone()[0]
        for _ in range(40):  # its own tables change too: caught up once it goes on
            random_transaction(conn, rng, next_id)
        wait_until_fresh(shop, [PROBE], timeout=180)  # the other view keeps being stepped
        assert _poll(lambda: conn.execute(slot_lsn).fetchone()[0] > before_lsn), "the stream was not acknowledged"
        assert _poll(lambda: conn.execute("SELECT heartbeat_at FROM freshview.progress").fetchone()[0] > before_beat)
        later = _poll(lambda: (r := _view_row(conn, HELD)) and r[3] > row[3] and r, timeout=5)
        assert later and later[0] == "populating", "its elapsed time is not updated"
        gate.set()
        for _ in range(20):
            random_transaction(conn, rng, next_id)
    wait_until_fresh(shop, [PROBE, HELD], timeout=180)
    # its rows were written aside by the worker and the table renamed into place at the join (the changes
    # committed meanwhile written then): the result table's fill is not the loop's
    said = [r.getMessage() for r in caplog.records]
    assert any(f"view {HELD}: " in m and "rows written aside" in m for m in said), said
    with psycopg.connect(shop, autocommit=True) as conn:
        assert conn.execute(FILLS).fetchone()[0] == 0


def test_block_until_running_false_and_a_failure_shows_in_freshview_views(shop, start_service, monkeypatch):
    original = loading.compute_first

    def broken(flow, view, sql, *args):
        if "big_orders" in view:
            raise FreshviewError("boom in the first computation")
        return original(flow, view, sql, *args)

    monkeypatch.setattr(loading, "compute_first", broken)
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view(%s, %s, block_until_running => false)",
                     ("public.big_orders", VIEWS["public.big_orders"]))
        status, error = wait_for_status(conn, "public.big_orders", "failed", timeout=180)
        assert status == "failed" and "boom in the first computation" in error
        assert conn.execute("SELECT state FROM freshview.requests WHERE name = 'public.big_orders'").fetchone() == \
            ("failed",)
        conn.execute("CALL freshview.create_view_async('public.bad', 'SELECT nope FROM orders')")  # refused at once
        status, error = wait_for_status(conn, "public.bad", "failed")
        assert status == "failed" and "nope" in error, error
        # A CALL that waits gets the message and leaves no trace; the service goes on.
        with pytest.raises(psycopg.errors.RaiseException, match="boom in the first computation"):
            conn.execute("CALL freshview.create_view(%s, %s)", ("public.big_orders2", VIEWS["public.big_orders"]))
        assert _view_row(conn, "public.big_orders2") is None
        conn.execute("CALL freshview.create_view(%s, %s, 60, false)", (PROBE, VIEWS[PROBE]))
        conn.execute("INSERT INTO events VALUES ('buy', 7)")
    wait_until_fresh(shop, [PROBE], timeout=180)  # (a first computation on Spark: slow on a loaded machine)


_HELD_SERVICE = """
import sys, time
from freshview.service import loading
original = loading.compute_first
def held(flow, view, sql, *args):
    if view.endswith("customer_totals"):
        time.sleep(3600)  # killed here
    return original(flow, view, sql, *args)
loading.compute_first = held
from freshview.cli.app import main
sys.argv = ["freshview", "run", "--state-dir", sys.argv[1], "--quiet"]
main()
"""


def test_a_service_killed_mid_population_populates_the_view_again(shop, start_service, tmp_path):
    state = tmp_path / "state"
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               FRESHVIEW_DSN=shop)
    with open(tmp_path / "service.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-c", _HELD_SERVICE, str(state)], stdout=log,
                                stderr=subprocess.STDOUT, env=env)
    rng = random.Random(5)
    next_id = [600]
    try:
        with psycopg.connect(shop, autocommit=True) as conn:
            conn.execute("CALL freshview.create_view_async(%s, %s)", (HELD, VIEWS[HELD]))
            row = _poll(lambda: proc.poll() is None and (r := _view_row(conn, HELD)) and r[1] == "computing" and r,
                        timeout=180)
            assert row, f"the population did not reach its computation:\n{(tmp_path / 'service.log').read_text()}"
            for _ in range(20):
                random_transaction(conn, rng, next_id)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    start_service(state)
    with psycopg.connect(shop, autocommit=True) as conn:
        for _ in range(20):
            random_transaction(conn, rng, next_id)
        wait_until_fresh(shop, [HELD], timeout=120)
        assert conn.execute("SELECT state, attempts FROM freshview.requests").fetchall() == [("done", 2)]


def test_requests_are_served_while_a_view_populates_and_a_drop_ends_its_population(shop, start_service, gate):
    """Several populations: a create over other tables populates and returns while one is held; one over a
    table the held population follows anew waits (phase ``waiting``); dropping the held view ends its
    population (its CALL is answered) and the waiting one goes on."""
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CALL freshview.create_view_async(%s, %s)", (HELD, VIEWS[HELD]))
        assert gate.reached.wait(120)
        conn.execute("CALL freshview.create_view(%s, %s, 120)", (PROBE, VIEWS[PROBE]))  # returns meanwhile
        conn.execute("CALL freshview.create_view_async(%s, %s)", ("public.regions", VIEWS["public.regions"]))
        assert _poll(lambda: (r := _view_row(conn, "public.regions")) and r[1] == "waiting"), \
            _view_row(conn, "public.regions")  # customers: followed anew by the held population
        assert _view_row(conn, HELD)[:2] == ("populating", "computing")
        conn.execute("INSERT INTO events VALUES ('buy', 3)")
        wait_until_fresh(shop, [PROBE], timeout=120)
        conn.execute("CALL freshview.drop_view(%s)", (HELD,))
        assert _view_row(conn, HELD) is None
        assert conn.execute("SELECT state, error FROM freshview.requests WHERE name = %s AND action = 'create'",
                            (HELD,)).fetchone() == \
            ("failed", f"freshview: view {HELD} was dropped while it was being populated")
        gate.set()  # (its worker ends and cleans up after itself)
        conn.execute("UPDATE customers SET region = 'north' WHERE id = 3")
    wait_until_fresh(shop, [PROBE, "public.regions"], timeout=180)
    with psycopg.connect(shop, autocommit=True) as conn:
        assert _poll(lambda: conn.execute(FILLS).fetchone()[0] == 0)  # nothing written aside is left behind


def test_a_lost_slot_rebuilds_view_by_view_the_first_rebuilt_staying_fresh(shop, start_service, tmp_path,
                                                                           monkeypatch):
    """After a lost slot every view is rebuilt beside the stream: one whose rebuild is held stays
    ``rebuilding`` (with its phase) while the other, rebuilt, follows the changes; then both end equal."""
    service = start_service(tmp_path / "state")
    with psycopg.connect(shop, autocommit=True) as conn:
        for name in (PROBE, HELD):
            conn.execute("CALL freshview.create_view(%s, %s)", (name, VIEWS[name]))
    wait_until_fresh(shop, [PROBE, HELD], timeout=180)
    slot = service.service.slot
    service.stop()
    hold, reached, original = threading.Event(), threading.Event(), loading.compute_first

    def held(flow, view, sql, *args):
        if view.endswith("customer_totals"):
            reached.set()
            assert hold.wait(120), "the test never let the rebuild go"
        return original(flow, view, sql, *args)

    monkeypatch.setattr(loading, "compute_first", held)
    rng, next_id = random.Random(9), [600]
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        start_service(tmp_path / "state")
        try:
            assert reached.wait(120)
            assert _poll(lambda: (r := _view_row(conn, HELD)) and r[:2] == ("rebuilding", "computing") and r)
            for _ in range(20):
                random_transaction(conn, rng, next_id)
            conn.execute("INSERT INTO events VALUES ('sell', 11)")
            wait_until_fresh(shop, [PROBE], timeout=120)  # rebuilt, and live while the other one rebuilds
            assert _view_row(conn, HELD)[0] == "rebuilding"
        finally:
            hold.set()
        for _ in range(20):
            random_transaction(conn, rng, next_id)
    wait_until_fresh(shop, [PROBE, HELD], timeout=180)


def test_tables_written_aside_by_a_stopped_service_are_dropped_when_it_starts(shop, start_service):
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CREATE TABLE public._fv_fill_0123456789ab_deadbeef (x int)")  # (a population killed)
        conn.execute("CREATE TABLE public.xfv_fill_kept (x int)")  # not one: LIKE's _ is escaped
        start_service()
        assert conn.execute(FILLS).fetchone()[0] == 0
        assert conn.execute("SELECT to_regclass('public.xfv_fill_kept')").fetchone()[0] is not None


def test_a_view_reading_columns_a_copy_lacks_widens_it_beside_the_stream(database, start_service, monkeypatch,
                                                                          caplog):
    # ``widening``: the table is read again, wider, by the new view's population, and the view already over it
    # is computed again there, while the loop keeps that view fresh over the narrower copy; at the join it
    # moves to the wider copy, its result table kept (written by difference).
    caplog.set_level(logging.INFO, logger="freshview")
    gate = _hold(monkeypatch, "public.wb")
    narrow, wide = "SELECT a, count(*) AS n FROM w GROUP BY a", "SELECT b, sum(a) AS s FROM w GROUP BY b"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE w (id int PRIMARY KEY, a int, b int, c text)")
        conn.execute("INSERT INTO w SELECT g, g % 7, g % 5, 'x' FROM generate_series(1, 300) g")
        service = start_service().service
        conn.execute("CALL freshview.create_view('public.wa', %s)", (narrow,))
        assert service.flow.source_schema(service.names.engine("public.w")).names == ["id", "a"]
        conn.execute("CREATE INDEX wa_n ON public.wa (n)")
        oid = conn.execute("SELECT 'public.wa'::regclass::oid").fetchone()[0]
        try:
            conn.execute("CALL freshview.create_view_async('public.wb', %s)", (wide,))
            assert gate.reached.wait(60)  # type: ignore[attr-defined]
            for i in range(5):  # the loop goes on: the view over the narrower copy stays fresh meanwhile
                conn.execute("UPDATE w SET a = a + 1 WHERE id %% 11 = %s", (i,))
                conn.execute("INSERT INTO w VALUES (%s, %s, NULL, 'y')", (1000 + i, i))
            wait_until_fresh(database, ["public.wa"], timeout=60)
            assert _poll(lambda: _view_row(conn, "public.wb")[:2] == ("populating", "computing"))
            # a view over w reading nothing new waits for the table read again (else it would join first,
            # over the narrower copy, and wb's join would find a view over w it did not compute again)
            conn.execute("CALL freshview.create_view_async('public.wc', 'SELECT a, max(id) AS m FROM w GROUP BY a')")
            assert _poll(lambda: (r := _view_row(conn, "public.wc")) and r[1] == "waiting"), _view_row(conn, "public.wc")
        finally:
            gate.set()
        conn.execute("DELETE FROM w WHERE id < 20")
        wait_until_fresh(database, ["public.wa", "public.wb", "public.wc"], timeout=120)
        assert service.flow.source_schema(service.names.engine("public.w")).names == ["id", "a", "b"]
        assert conn.execute("SELECT 'public.wa'::regclass::oid, to_regclass('public.wa_n') IS NOT NULL").fetchone() \
            == (oid, True)
        said = [r.getMessage() for r in caplog.records]
        assert any("view public.wa: computed again over the wider copy beside the stream" in m for m in said), said
        conn.execute("UPDATE w SET b = 9 WHERE id = 30")
        wait_until_fresh(database, ["public.wa", "public.wb"], timeout=60)
