"""Recovery after a fault: how long the service takes to be fresh again once the database is back.

The script starts a throwaway PostgreSQL and a throwaway MariaDB of its own
(``freshview.service.embedded`` / ``embedded_mariadb``), a table ``marks(id,
at)`` in each and one view ``SELECT id, at FROM marks`` created with ``CALL
freshview.create_view``, and runs ``freshview.service.Service`` in a
background thread of this process (its own local Spark session, default
``ServiceOptions``: first retry at once, back-off doubling from 0.25 s to a
2 s cap).  Then, ``--trials`` times per fault:

* PostgreSQL: a crash-restart (``pg_ctl restart -m immediate``), a fast
  shutdown, ``--gap`` seconds down, start; the result/request connection and
  the replication connection killed (``pg_terminate_backend``);
* MariaDB: a crash (SIGKILL) and start, a clean shutdown, ``--gap`` seconds
  down, start; the main connection and the binlog connection killed (KILL);
* both: the network to the database cut for ``--gap`` seconds (a TCP proxy
  between the service and the server closes every connection and refuses new
  ones).

"Back" is the moment the server accepts connections again (``pg_ctl``/the
start returned; for a kill, the kill; for the network, its restore).  Right
then the script commits a new mark (a fresh id) and polls the result table
every 10 ms until the mark is there.  Recovery = that moment minus "back":
it holds the service's retry wait, its reconnect and re-attach, and the
ordinary commit-to-result latency of one transaction.  Reported per fault:
the median and the maximum over the trials; the issue asks for at most 5 s.

    python3 -m benchmarks.service_faults [--trials 5] [--gap 5] [--only pg|mysql]

Results are printed as a Markdown table (``--json out.json`` writes them too).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

import psycopg  # noqa: E402
import psycopg.conninfo  # noqa: E402
import pymysql  # noqa: E402

from freshview.connectors.mysql import control as mysql_control  # noqa: E402
from freshview.connectors.postgres import control as pg_control  # noqa: E402
from freshview.service.embedded import PostgresServer  # noqa: E402
from freshview.service.embedded_mariadb import MariaDBServer  # noqa: E402
from freshview.service.service import ServiceOptions  # noqa: E402
from tests.support.faults import TcpProxy  # noqa: E402
from tests.support.service import ThreadedService  # noqa: E402

POLL_S = 0.01
TIMEOUT_S = 120.0


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Target:
    """One database with the marks table, its view, and a service following it (through a proxy)."""

    def __init__(self, name: str, proxy: TcpProxy) -> None:
        self.name, self.proxy = name, proxy
        self.next_id = 0
        self.service: ThreadedService | None = None

    def connect(self) -> Any:
        raise NotImplementedError

    def execute(self, sql: str, params: tuple = ()) -> list:
        for attempt in range(50):  # the server may still be finishing its start
            try:
                conn = self.connect()
                try:
                    cur = conn.cursor()
                    cur.execute(sql, params)
                    rows = cur.fetchall() if cur.description else []
                    conn.commit()
                    return rows
                finally:
                    conn.close()
            except (psycopg.OperationalError, pymysql.err.OperationalError):
                if attempt == 49:
                    raise
                time.sleep(0.1)
        return []

    def mark(self) -> int:
        self.next_id += 1
        self.execute("INSERT INTO marks VALUES (%s, 0)", (self.next_id,))
        return self.next_id

    def wait_mark(self, mark: int) -> float:
        """Seconds until ``mark`` is in the result table (polled on one connection, reopened if it breaks)."""
        deadline = time.monotonic() + TIMEOUT_S
        conn = None
        while time.monotonic() < deadline:
            try:
                if conn is None:
                    conn = self.connect()
                cur = conn.cursor()
                cur.execute("SELECT 1 FROM marks_view WHERE id = %s", (mark,))
                found = cur.fetchone()
                conn.commit()
                if found:
                    conn.close()
                    return time.monotonic()
            except (psycopg.Error, pymysql.err.MySQLError):
                conn = None
            if self.service is not None and (self.service.error or not self.service.thread.is_alive()):
                raise RuntimeError(f"the service exited: {self.service.error!r}")
            time.sleep(POLL_S)
        raise RuntimeError(f"mark {mark} did not reach the result table within {TIMEOUT_S:.0f} s")


class Postgres(Target):
    def __init__(self, server: PostgresServer, proxy: TcpProxy) -> None:
        super().__init__("PostgreSQL", proxy)
        self.server = server
        self.dsn = psycopg.conninfo.make_conninfo(server.dsn, dbname="faults")

    def connect(self) -> Any:
        return psycopg.connect(self.dsn, connect_timeout=5)

    def service_dsn(self) -> str:
        return psycopg.conninfo.make_conninfo(self.dsn, port=str(self.proxy.port))

    def setup(self) -> None:
        with psycopg.connect(self.server.dsn, autocommit=True) as admin:
            admin.execute("CREATE DATABASE faults")
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            pg_control.install(conn)
            conn.execute("CREATE TABLE marks (id int PRIMARY KEY, at int)")

    def create_view(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("CALL freshview.create_view('public.marks_view', 'SELECT id, at FROM marks', 600)")

    def kill(self, application: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'faults' "
                         "AND application_name = %s", (application,))

    def faults(self, gap: float) -> dict[str, Callable[[], None]]:
        return {"crash-restart (pg_ctl restart -m immediate)": lambda: self.server.restart("immediate"),
                f"fast shutdown, {gap:.0f} s down, start": lambda: (self.server.halt("fast"), time.sleep(gap),
                                                                   self.server.resume()),
                "result/request connection killed": lambda: self.kill("freshview"),
                "replication connection killed": lambda: self.kill("freshview stream")}


class MariaDB(Target):
    def __init__(self, server: MariaDBServer, proxy: TcpProxy) -> None:
        super().__init__("MariaDB", proxy)
        self.server = server
        self.args = {**server.connect_args(), "database": "faults"}

    def connect(self) -> Any:
        return pymysql.connect(**self.args, connect_timeout=5)

    def service_dsn(self) -> str:
        return f"mysql://root@127.0.0.1:{self.proxy.port}/faults"

    def setup(self) -> None:
        conn = pymysql.connect(**self.server.connect_args(), autocommit=True)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE faults")
        conn.close()
        conn = pymysql.connect(**self.args, autocommit=True)
        mysql_control.install(conn)
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE marks (id int PRIMARY KEY, at int)")
        conn.close()

    def create_view(self) -> None:
        conn = pymysql.connect(**self.args, autocommit=True)
        with conn.cursor() as cur:
            cur.execute("CALL freshview.create_view_timeout('faults.marks_view', 'SELECT id, at FROM marks', 600)")
        conn.close()

    def kill(self, where: str) -> None:
        conn = pymysql.connect(**self.server.connect_args(), autocommit=True)
        with conn.cursor() as cur:
            cur.execute(f"SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND {where}")
            for (thread,) in cur.fetchall():
                try:
                    cur.execute(f"KILL {int(thread)}")
                except pymysql.err.OperationalError:
                    pass
        conn.close()

    def faults(self, gap: float) -> dict[str, Callable[[], None]]:
        return {"crash (SIGKILL) and start": lambda: (self.server.crash(), self.server.resume()),
                f"shutdown, {gap:.0f} s down, start": lambda: (self.server.shutdown(), time.sleep(gap),
                                                              self.server.resume()),
                "main connection killed": lambda: self.kill("DB = 'faults' AND COMMAND <> 'Binlog Dump'"),
                "binlog connection killed": lambda: self.kill("COMMAND = 'Binlog Dump'")}


def measure(target: Target, trials: int, gap: float) -> list[dict[str, Any]]:
    faults = target.faults(gap)
    faults[f"network cut for {gap:.0f} s"] = lambda: (target.proxy.cut(), time.sleep(gap), target.proxy.restore())
    rows = []
    for name, fault in faults.items():
        times = []
        for _ in range(trials):
            target.wait_mark(target.mark())  # running and fresh before the fault
            fault()
            back = time.monotonic()
            times.append(target.wait_mark(target.mark()) - back)
        rows.append({"database": target.name, "fault": name, "trials": trials,
                     "median_s": statistics.median(times), "max_s": max(times)})
        say(f"{target.name}: {name}: median {rows[-1]['median_s']:.2f} s, max {rows[-1]['max_s']:.2f} s")
    return rows


def run(target: Target, work: Path, trials: int, gap: float) -> list[dict[str, Any]]:
    target.setup()
    target.service = ThreadedService(target.service_dsn(), work / f"state-{target.name}", None,
                                     options=ServiceOptions())
    try:
        target.create_view()
        return measure(target, trials, gap)
    finally:
        target.service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--gap", type=float, default=5.0, help="seconds the database or network is down")
    parser.add_argument("--only", choices=["pg", "mysql"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="freshview-faults-") as tmp:
        if args.only in (None, "pg"):
            with PostgresServer() as server:
                proxy = TcpProxy(server.port)
                try:
                    rows += run(Postgres(server, proxy), Path(tmp), args.trials, args.gap)
                finally:
                    proxy.close()
        if args.only in (None, "mysql"):
            with MariaDBServer() as server:
                proxy = TcpProxy(server.port)
                try:
                    rows += run(MariaDB(server, proxy), Path(tmp), args.trials, args.gap)
                finally:
                    proxy.close()
    print(f"\nload average {os.getloadavg()[0]:.1f}; {args.trials} trials per fault\n")
    print("| database | fault | median recovery | max recovery |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['database']} | {r['fault']} | {r['median_s']:.2f} s | {r['max_s']:.2f} s |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
