"""End-to-end helpers: a fresh database per test, services in threads or processes, result checks.

Every check compares a result table with PostgreSQL running the view's SQL
over the same database right now (the oracle), as multisets, with the
counted tables' ``_fv_count`` expanded.  ``wait_until_fresh`` polls until
they agree, so it works whatever the service's batching; on timeout it fails
with the diff.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import psycopg
import psycopg.conninfo
from psycopg import sql

from freshview.connectors.postgres import control
from freshview.connectors.postgres.identifiers import identifier
from freshview.service.service import Service, ServiceOptions
from tests.support.oracle import _fmt, diff_rows

_counter = itertools.count()
ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def fresh_database(server_dsn: str) -> Iterator[str]:
    """A new database with the freshview schema installed; dropped (with its slots) afterwards."""
    name = f"fv_e2e_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = psycopg.conninfo.conninfo_to_dict(server_dsn)
    params["dbname"] = name
    dsn = psycopg.conninfo.make_conninfo(**params)
    with psycopg.connect(dsn, autocommit=True) as conn:
        control.install(conn)
    try:
        yield dsn
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            for _ in range(50):  # a killed service's walsender takes a moment to go away
                slots = admin.execute("SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = %s",
                                      (name,)).fetchall()
                for slot, pid in slots:
                    if pid is not None:
                        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    with contextlib.suppress(psycopg.Error):
                        admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                if not admin.execute("SELECT 1 FROM pg_replication_slots WHERE database = %s", (name,)).fetchone():
                    break
                time.sleep(0.1)
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


class ThreadedService:
    """A Service in a background thread of the test process (shares the test's Spark session)."""

    def __init__(self, dsn: str, state_dir: Path, spark: Any, **kwargs: Any) -> None:
        kwargs.setdefault("options", ServiceOptions(poll_s=0.05))
        self.service = Service(dsn, state_dir, spark=spark, **kwargs)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.service.ready.wait(120):
            raise AssertionError("the service did not become ready")
        if self.error:
            raise self.error

    def _run(self) -> None:
        try:
            self.service.run()
        except BaseException as exc:  # surfaced by stop() or ready
            self.error = exc
            self.service.ready.set()

    def stop(self) -> None:
        self.service.stop()
        self.thread.join(60)
        if self.thread.is_alive():
            raise AssertionError("the service did not stop within 60 s")
        if self.error:
            raise self.error


class ProcessService:
    """``python -m freshview run`` in a child process, to be stopped or killed like the real thing."""

    def __init__(self, dsn: str, state_dir: Path, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        self.log = open(log_path, "ab")
        env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                   FRESHVIEW_DSN=dsn)
        self.proc = subprocess.Popen([sys.executable, "-m", "freshview", "run", "--state-dir", str(state_dir),
                                      "--quiet", *args], stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, dsn: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(f"the service exited ({self.proc.returncode}):\n{self.output()}")
                row = conn.execute("SELECT status, heartbeat_at > now() - interval '5 s' FROM freshview.progress"
                                   ).fetchone()
                if row and row[0] == "running" and row[1]:
                    return
                time.sleep(0.2)
        raise AssertionError(f"the service did not start:\n{self.output()}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.log.close()

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(60)
        self.log.close()
        return code

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-5000:]


def result_rows(conn: psycopg.Connection, table: str) -> list[tuple]:
    """A result table's rows as a multiset (a counted row appears _fv_count times)."""
    cur = conn.execute(sql.SQL("SELECT * FROM {}").format(identifier(table)))  # "A"."B c" or public.x
    columns = [d.name for d in cur.description]
    rows = cur.fetchall()
    if "_fv_count" not in columns:
        return rows
    at = columns.index("_fv_count")
    out = []
    for row in rows:
        out.extend([row[:at] + row[at + 1:]] * row[at])
    return out


def view_sql(conn: psycopg.Connection, table: str) -> str:
    return conn.execute("SELECT sql FROM freshview.views WHERE name = %s", (table,)).fetchone()[0]


def wait_until_fresh(dsn: str, tables: list[str], timeout: float = 60.0) -> None:
    """Poll until every result table equals its view's SQL run by PostgreSQL now."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            problems = []
            for table in tables:
                status = conn.execute("SELECT status, error FROM freshview.views WHERE name = %s",
                                      (table,)).fetchone()
                if status is None or status[0] != "active":
                    problems.append(f"{table}: status {status}")
                    continue
                expected = conn.execute(view_sql(conn, table)).fetchall()
                only_actual, only_expected = diff_rows(result_rows(conn, table), expected)
                if only_actual or only_expected:
                    problems.append(f"{table}: {len(only_actual)} rows only in the result table, "
                                    f"{len(only_expected)} only in the view's SQL; e.g. "
                                    f"{[_fmt(r) for r in only_actual[:3]]} vs {[_fmt(r) for r in only_expected[:3]]}")
            if not problems:
                return
            if time.monotonic() > deadline:
                raise AssertionError("result tables are not fresh:\n  " + "\n  ".join(problems))
            time.sleep(0.2)


def wait_for_status(conn: psycopg.Connection, table: str, status: str, timeout: float = 60.0) -> tuple:
    """Poll freshview.views until the view has ``status``; returns (status, error) as last seen."""
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute("SELECT status, error FROM freshview.views WHERE name = %s", (table,)).fetchone()
        if (row and row[0] == status) or time.monotonic() > deadline:
            return row or (None, None)
        time.sleep(0.2)
