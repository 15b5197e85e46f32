"""Faults on PostgreSQL: the service rides out what passes and stops, saying why, only for what does not.

A PostgreSQL of this module's own (the session's must not be restarted), with
``wal_sender_timeout`` short enough for a paused service to lose its stream.
While random transactions commit, each test crash-restarts and stops/starts
the server, kills each kind of the service's connections (named by
``application_name``), fills its state directory, pauses its process and cuts
the network to the database.  Each ends with every result table equal to its
view's SQL and the service never having exited: so nothing was lost and
nothing applied twice (a doubled step doubles counts and sums).
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import psycopg
import psycopg.conninfo
import pytest
from typer.testing import CliRunner

from freshview.cli.app import app
from freshview.service.embedded import PostgresServer
from freshview.service.metrics import ServiceMetrics
from freshview.service.service import ServiceOptions
from tests.service.test_service import SCHEMA, VIEWS, create_views, random_transaction
from tests.support.disk import fill, small_disk
from tests.support.faults import TcpProxy, Writer, wait_for
from tests.support.service import ROOT, ProcessService, ThreadedService, fresh_database, wait_until_fresh

FAULT_VIEWS = {k: VIEWS[k] for k in ("public.customer_totals", "public.region_revenue", "public.big_orders")}


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer(settings={"wal_sender_timeout": "'3s'"}) as pg:
        yield pg


@pytest.fixture
def shop(server: PostgresServer) -> Iterator[str]:
    with fresh_database(server.dsn) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA)
        yield dsn


@pytest.fixture
def services(spark: Any) -> Iterator[list[ThreadedService]]:
    running: list[ThreadedService] = []
    yield running
    for svc in running:
        if svc.thread.is_alive():
            svc.stop()


def start(services: list, dsn: str, state: Path, spark: Any, **kwargs: Any) -> ThreadedService:
    kwargs.setdefault("options", ServiceOptions(poll_s=0.05, snapshot_chunk_rows=50))
    svc = ThreadedService(dsn, state, spark, metrics=ServiceMetrics(), **kwargs)
    services.append(svc)
    return svc


def writer(dsn: str, seed: int) -> Writer:
    rng, next_id = random.Random(seed), [600]
    return Writer(lambda: psycopg.connect(dsn, autocommit=True, connect_timeout=5),
                  lambda conn: random_transaction(conn, rng, next_id))


def terminate(dsn: str, application: str) -> int:
    """pg_terminate_backend every session of the service named ``application``; how many there were."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return len(conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                                "current_database() AND application_name = %s", (application,)).fetchall())


def alive(svc: ThreadedService) -> None:
    assert svc.thread.is_alive() and svc.error is None, f"the service exited: {svc.error!r}"


def metric(svc: ThreadedService, name: str, **labels: str) -> float:
    return svc.service.metrics.registry.get_sample_value(name, labels) or 0.0


def test_restarts_and_killed_connections_are_ridden_out(shop, server, services, spark, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="freshview")
    killed_snapshot: list[int] = []

    def kill_snapshot_readers(table: str, done: int, estimate: Any, finished: bool) -> None:
        if done and not killed_snapshot:  # mid-snapshot: the readers and the slot exporting the snapshot
            killed_snapshot.append(terminate(shop, "freshview snapshot"))

    svc = start(services, shop, tmp_path / "state", spark, snapshot_progress=kill_snapshot_readers)
    with psycopg.connect(shop, autocommit=True) as conn:
        create_views(conn, FAULT_VIEWS)
    assert killed_snapshot and killed_snapshot[0] >= 1  # the CALLs above were served again after the kill
    wait_until_fresh(shop, list(FAULT_VIEWS))
    faults = [("the result/request connection", lambda: terminate(shop, "freshview")),
              ("the replication connection", lambda: terminate(shop, "freshview stream")),
              ("a crash-restart", lambda: server.restart("immediate")),
              ("a fast shutdown and start", lambda: (server.halt("fast"), time.sleep(2), server.resume()))]
    load = writer(shop, 1)
    for what, fault in faults:
        before = metric(svc, "freshview_reconnects_total")
        with load.running():
            time.sleep(0.5)
            fault()
            time.sleep(0.5)
        try:
            wait_until_fresh(shop, list(FAULT_VIEWS))
        except AssertionError as exc:
            raise AssertionError(f"after {what}: {exc}") from None
        alive(svc)
        assert metric(svc, "freshview_reconnects_total") > before, what
        assert metric(svc, "freshview_source_connected") == 1
    assert load.committed > 100 and load.errors >= 2  # the writer saw the restarts too
    with psycopg.connect(shop, autocommit=True) as conn:
        assert conn.execute("SELECT status FROM freshview.progress").fetchone()[0] == "running"
        assert conn.execute("SELECT count(*) FROM freshview.views WHERE status <> 'active'").fetchone()[0] == 0
    notices = [r.getMessage() for r in caplog.records if r.name.startswith("freshview")]
    assert any("lost the connection to the database" in m for m in notices)
    assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.WARNING)  # details: file only


def test_a_full_state_disk_pauses_stepping_and_resumes(shop, services, spark, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="freshview")
    with small_disk(tmp_path / "disk", "48m") as disk:
        state = disk / "state"
        svc = start(services, shop, state, spark)
        with psycopg.connect(shop, autocommit=True) as conn:
            create_views(conn, FAULT_VIEWS)
        wait_until_fresh(shop, list(FAULT_VIEWS))
        load = writer(shop, 2)
        filler = fill(disk)
        with load.running(), psycopg.connect(shop, autocommit=True) as conn:
            wait_for(lambda: conn.execute("SELECT status FROM freshview.progress").fetchone()[0] == "state disk full",
                     60, "the status to say the state disk is full")
            assert metric(svc, "freshview_state_disk_full") == 1
            lsn = conn.execute("SELECT lsn FROM freshview.progress").fetchone()[0]
            time.sleep(1.5)  # changes keep coming; nothing is stepped, nothing acknowledged past the results
            assert conn.execute("SELECT lsn FROM freshview.progress").fetchone()[0] == lsn
            confirmed = conn.execute("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s",
                                     (svc.service.slot,)).fetchone()[0]
            assert confirmed <= lsn
            shown = CliRunner().invoke(app, ["status", "--dsn", shop])
            assert "paused: its state directory is full" in " ".join(shown.output.split()), shown.output
            alive(svc)
        filler.unlink()
        wait_until_fresh(shop, list(FAULT_VIEWS))
        alive(svc)
        assert metric(svc, "freshview_state_disk_full") == 0 and metric(svc, "freshview_faults_total",
                                                                            kind="disk_full") >= 1
        messages = [r.getMessage() for r in caplog.records]
        assert sum("state directory full since" in m for m in messages) == 1
        assert any("room again" in m for m in messages)
        svc.stop()
        assert not list(state.glob("*.tmp")) and not (state / "SPACE.probe").exists()
        caplog.clear()
        again = start(services, shop, state, spark)  # the state it left is whole: no rebuild
        with load.running():
            time.sleep(0.5)
        wait_until_fresh(shop, list(FAULT_VIEWS))
        assert not any("rebuilding" in r.getMessage() for r in caplog.records)
        again.stop()


def via(dsn: str, port: int) -> str:
    return psycopg.conninfo.make_conninfo(dsn, port=str(port))


def test_a_paused_process_and_a_network_down_for_a_while_are_ridden_out(shop, server, services, spark, tmp_path):
    first = start(services, shop, tmp_path / "state", spark)  # the views' first computations on the warm Spark
    with psycopg.connect(shop, autocommit=True) as conn:
        create_views(conn, FAULT_VIEWS)
    first.stop()
    proxy = TcpProxy(server.port)
    service = ProcessService(via(shop, proxy.port), tmp_path / "state", tmp_path / "service.log",
                             "--execution", "local")  # (catch-up steps without waiting for its JVM)
    try:
        service.wait_ready(shop)
        load = writer(shop, 3)
        with load.running():  # paused longer than wal_sender_timeout: the server drops its stream
            time.sleep(0.5)
            service.proc.send_signal(signal.SIGSTOP)
            time.sleep(6)
            service.proc.send_signal(signal.SIGCONT)
            time.sleep(0.5)
        wait_until_fresh(shop, list(FAULT_VIEWS))
        log = tmp_path / "state" / "freshview.log"  # (one line a record: the terminal's wrap long ones)
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
    assert code == 0, output
    assert "Traceback" not in output, output  # (the terminal's: tracebacks go to the log file)
    assert during_the_cut.count("database unreachable since") == 1, during_the_cut  # once, not at each retry
    assert "database reachable again after" in during_the_cut and "the fault in full" in during_the_cut


def run_cli(args: list[str], dsn: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               FRESHVIEW_DSN=dsn, COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "freshview", "run", *args], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("case", ["bad credentials", "no such database", "state of a newer freshview"])
def test_what_a_restart_cannot_fix_stops_it_with_one_line(shop, tmp_path, case):
    state = tmp_path / "state"
    dsn = shop
    if case == "bad credentials":
        dsn = psycopg.conninfo.make_conninfo(shop, user="nobody_here")
    elif case == "no such database":
        dsn = psycopg.conninfo.make_conninfo(shop, dbname="dropped_long_ago")
    else:
        state.mkdir()
        (state / "MANIFEST").write_text(json.dumps({"format": "freshview-spine", "version": 99, "hash_version": 1,
                                                    "generation": 1, "log": "wal-1.log", "meta": {},
                                                    "arrangements": {}}))
    proc = run_cli(["--state-dir", str(state), "--quiet"], dsn, tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr
    assert lines[-1].startswith("freshview stopped: ") and "Traceback" not in proc.stderr, proc.stderr
    assert [line for line in lines if not line.startswith("logs: ")] == lines[-1:], proc.stderr
    expected = {"bad credentials": 'role "nobody_here" does not exist', "no such database": "dropped_long_ago",
                "state of a newer freshview": "newer freshview"}[case]
    assert expected in lines[-1]
    assert "Traceback" in (state / "freshview.log").read_text()
    if case == "state of a newer freshview":
        assert json.loads((state / "MANIFEST").read_text())["version"] == 99  # left as it was
