"""The real process: ``freshview run`` killed with SIGKILL at random moments, then started again.

Transactions keep committing the whole time.  After the last restart the
result tables must equal the views' SQL: nothing lost, nothing applied twice
(a doubled step would double the counts and sums).
"""

from __future__ import annotations

import random
import threading
import time

import psycopg

from tests.service.test_service import SCHEMA, VIEWS, create_views, random_transaction
from tests.support.service import ProcessService, wait_until_fresh


def test_sigkill_at_random_moments_loses_nothing_and_doubles_nothing(database, tmp_path):
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(SCHEMA)
    state, log = tmp_path / "state", tmp_path / "service.log"
    service = ProcessService(database, state, log)
    service.wait_ready(database)
    views = {k: VIEWS[k] for k in ("public.customer_totals", "public.region_revenue", "public.big_orders",
                                   "public.event_totals")}
    rng = random.Random(11)
    next_id = [600]
    stop = threading.Event()
    committed = [0]

    def writer() -> None:
        with psycopg.connect(database, autocommit=True) as conn:
            while not stop.is_set():
                random_transaction(conn, rng, next_id)
                committed[0] += 1
                time.sleep(0.002)

    with psycopg.connect(database, autocommit=True) as conn:
        create_views(conn, views)
    thread = threading.Thread(target=writer)
    thread.start()
    kills = random.Random(5)
    try:
        for _ in range(3):
            time.sleep(kills.uniform(0.5, 4.0))
            service.kill()
            time.sleep(kills.uniform(0.0, 1.0))  # changes pile up while it is down
            service = ProcessService(database, state, log)
            service.wait_ready(database)
        time.sleep(1.0)
    finally:
        stop.set()
        thread.join()
    assert committed[0] > 50
    try:
        wait_until_fresh(database, list(views), timeout=90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nservice log:\n{service.output()}") from None
    assert service.terminate() == 0, service.output()
    with psycopg.connect(database, autocommit=True) as conn:
        assert conn.execute("SELECT status FROM freshview.progress").fetchone()[0] == "stopped"
