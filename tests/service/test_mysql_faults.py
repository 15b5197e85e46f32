"""Faults on MariaDB: the service rides out what passes and stops, saying why, only for what does not.

A MariaDB of this module's own (the session's must not be restarted); the
service runs as an account of its own (``fvsvc``), so its connections are
found in the processlist.  While random transactions commit, each test
crashes and restarts the server, kills each kind of the service's
connections, fills its state directory, pauses its process and cuts the
network to the database.  Each ends with every result table equal to its
view's SQL as MariaDB computes it and the service never having exited.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pymysql
import pytest

from freshview.service.embedded_mariadb import MariaDBServer
from freshview.service.metrics import ServiceMetrics
from freshview.service.service import ServiceOptions
from tests.service.test_mysql_service import (
    SCHEMA,
    VIEWS,
    MySqlProcessService,
    connect,
    create_views,
    random_transaction,
    wait_until_fresh,
)
from tests.support.disk import fill, small_disk
from tests.support.faults import TcpProxy, Writer, wait_for
from tests.support.service import ROOT, ThreadedService

USER, PASSWORD = "fvsvc", "svc-pw"
FAULT_VIEWS = {n: VIEWS[n] for n in ("customer_totals", "order_regions", "everything")}
_counter = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[MariaDBServer]:
    with MariaDBServer() as db:
        conn = pymysql.connect(autocommit=True, **db.connect_args())
        with conn.cursor() as cur:
            cur.execute(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'")
            cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%' WITH GRANT OPTION")
        conn.close()
        yield db


@pytest.fixture
def shop(server: MariaDBServer) -> Iterator[dict]:
    from freshview.connectors.mysql import control

    args = {**server.connect_args(), "database": f"fvfaults_{os.getpid()}_{next(_counter)}"}
    with pymysql.connect(autocommit=True, **server.connect_args()) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{args['database']}`")
    try:
        with connect(args, autocommit=True) as conn, conn.cursor() as cur:
            control.install(conn)
            for statement in SCHEMA:
                cur.execute(statement)
            rng = random.Random(1)
            cur.executemany("INSERT INTO customers VALUES (%s, %s)",
                            [(i, rng.choice([None, "north", "south"])) for i in range(1, 31)])
            cur.executemany("INSERT INTO orders VALUES (%s, %s, %s, %s, %s)",
                            [(i, rng.randint(1, 34), rng.randint(1, 99_999) / 100, rng.choice(["open", "paid"]),
                              None) for i in range(1, 301)])
        yield args
    finally:  # (a new connection: the server may have restarted since)
        with pymysql.connect(autocommit=True, **server.connect_args()) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{args['database']}`")


def service_dsn(args: dict, port: int | None = None, password: str = PASSWORD, database: str | None = None) -> str:
    return f"mysql://{USER}:{password}@{args['host']}:{port or args['port']}/{database or args['database']}"


@pytest.fixture
def services(spark: Any) -> Iterator[list[ThreadedService]]:
    running: list[ThreadedService] = []
    yield running
    for svc in running:
        if svc.thread.is_alive():
            svc.stop()


def start(services: list, shop: dict, state: Path, spark: Any, **kwargs: Any) -> ThreadedService:
    kwargs.setdefault("options", ServiceOptions(poll_s=0.05, snapshot_chunk_rows=50))
    svc = ThreadedService(service_dsn(shop), state, spark, metrics=ServiceMetrics(), **kwargs)
    services.append(svc)
    return svc


def writer(args: dict, seed: int) -> Writer:
    rng, next_id = random.Random(seed), [300]

    def transaction(conn: Any) -> None:
        with conn.cursor() as cur:
            random_transaction(cur, rng, next_id)
        conn.commit()

    return Writer(lambda: connect(args, connect_timeout=5), transaction)


def kill(args: dict, where: str, params: tuple = ()) -> int:
    """KILL the service's connections matching ``where`` (a processlist condition); how many there were."""
    with connect({k: v for k, v in args.items() if k != "database"}, autocommit=True) as conn, \
            conn.cursor() as cur:
        cur.execute(f"SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s AND {where}", (USER, *params))
        ids = [r[0] for r in cur.fetchall()]
        for thread in ids:
            try:
                cur.execute(f"KILL {int(thread)}")
            except pymysql.err.OperationalError:  # (gone meanwhile)
                pass
    return len(ids)


def alive(svc: ThreadedService) -> None:
    assert svc.thread.is_alive() and svc.error is None, f"the service exited: {svc.error!r}"


def metric(svc: ThreadedService, name: str, **labels: str) -> float:
    return svc.service.metrics.registry.get_sample_value(name, labels) or 0.0


def status(args: dict) -> str:
    with connect(args, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT status FROM freshview.progress WHERE source = %s", (args["database"],))
        row = cur.fetchone()
    return row[0] if row else ""


def test_restarts_and_killed_connections_are_ridden_out(shop, server, services, spark, tmp_path):
    killed_snapshot: list[int] = []
    holder: list[ThreadedService] = []

    def kill_snapshot_reader(table: str, done: int, estimate: Any, finished: bool) -> None:
        if done and not killed_snapshot:  # mid-snapshot: its own connection (not the service's main one)
            main = holder[0].service.connector.control.conn.thread_id()
            killed_snapshot.append(kill(shop, "DB = %s AND COMMAND <> 'Binlog Dump' AND ID <> %s",
                                        (shop["database"], main)))

    holder.append(start(services, shop, tmp_path / "state", spark, snapshot_progress=kill_snapshot_reader))
    svc = holder[0]
    try:
        create_views(shop, FAULT_VIEWS)
    except pymysql.err.OperationalError:
        alive(svc)
        raise
    assert killed_snapshot and killed_snapshot[0] >= 1  # the CALLs above were served again after the kill
    wait_until_fresh(shop, list(FAULT_VIEWS))
    faults = [("the result/request connection",
               lambda: kill(shop, "DB = %s AND COMMAND <> 'Binlog Dump'", (shop["database"],))),
              ("the binlog connection", lambda: kill(shop, "COMMAND = 'Binlog Dump'")),
              ("a crash and restart", lambda: (server.crash(), time.sleep(1), server.resume())),
              ("a shutdown and start", lambda: (server.shutdown(), time.sleep(2), server.resume()))]
    load = writer(shop, 1)
    for what, fault in faults:
        before = metric(svc, "freshview_faults_total", kind="connection")
        with load.running():
            time.sleep(0.5)
            fault()
            time.sleep(0.5)
        try:
            wait_until_fresh(shop, list(FAULT_VIEWS))
        except AssertionError as exc:
            raise AssertionError(f"after {what}: {exc}") from None
        alive(svc)
        if what != "the binlog connection":  # (the binlog reader may reconnect by itself, unseen)
            assert metric(svc, "freshview_faults_total", kind="connection") > before, what
        assert metric(svc, "freshview_source_connected") == 1
    assert load.committed > 100 and load.errors >= 2
    assert status(shop) == "running"


def test_a_full_state_disk_pauses_stepping_and_resumes(shop, services, spark, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="freshview")
    with small_disk(tmp_path / "disk", "48m") as disk:
        svc = start(services, shop, disk / "state", spark)
        create_views(shop, FAULT_VIEWS)
        wait_until_fresh(shop, list(FAULT_VIEWS))
        load = writer(shop, 2)
        filler = fill(disk)
        with load.running():
            wait_for(lambda: status(shop) == "state disk full", 60, "the status to say the state disk is full")
            alive(svc)
        filler.unlink()
        wait_until_fresh(shop, list(FAULT_VIEWS))
        alive(svc)
        messages = [r.getMessage() for r in caplog.records]
        assert sum("state directory full since" in m for m in messages) == 1
        assert status(shop) == "running" and metric(svc, "freshview_state_disk_full") == 0


def test_a_paused_process_and_a_network_down_for_a_while_are_ridden_out(shop, server, services, spark, tmp_path):
    first = start(services, shop, tmp_path / "state", spark)  # the views' first computations on the warm Spark
    create_views(shop, FAULT_VIEWS)
    first.stop()
    proxy = TcpProxy(server.port)
    service = MySqlProcessService(service_dsn(shop, proxy.port), tmp_path / "state", tmp_path / "service.log",
                                  "--execution", "local")  # (catch-up steps without waiting for its JVM)
    log = tmp_path / "state" / "freshview.log"
    try:
        service.wait_ready(shop)
        load = writer(shop, 3)
        with load.running():
            time.sleep(0.5)
            service.proc.send_signal(signal.SIGSTOP)
            time.sleep(5)
            service.proc.send_signal(signal.SIGCONT)
            time.sleep(0.5)
        wait_until_fresh(shop, list(FAULT_VIEWS))
        said = len(log.read_text())
        with load.running():  # the network to the database is down for 20 s (10 times the back-off's cap)
            time.sleep(0.5)
            proxy.cut()
            time.sleep(20)
            proxy.restore()
            time.sleep(0.5)
        wait_until_fresh(shop, list(FAULT_VIEWS))
        assert service.proc.poll() is None, service.output()
        during_the_cut = log.read_text()[said:]
    finally:
        code = service.terminate() if service.proc.poll() is None else service.proc.returncode
        proxy.close()
    output = service.log_path.read_text()
    assert code == 0 and "Traceback" not in output, output
    assert during_the_cut.count("database unreachable since") == 1, during_the_cut
    assert "database reachable again after" in during_the_cut


@pytest.mark.parametrize("case", ["bad credentials", "no such database"])
def test_what_a_restart_cannot_fix_stops_it_with_one_line(shop, tmp_path, case):
    dsn = service_dsn(shop, password="wrong") if case == "bad credentials" else \
        service_dsn(shop, database="dropped_long_ago")
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               FRESHVIEW_DSN=dsn)
    proc = subprocess.run([sys.executable, "-m", "freshview", "run", "--state-dir", str(tmp_path / "state"),
                           "--quiet"], env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("logs: ")]
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("freshview stopped: "), proc.stderr
    assert ("(1045)" if case == "bad credentials" else "(1049)") in lines[0] and PASSWORD not in proc.stderr
