"""``alter_view`` against drop + create under a reader and a writer (issue 24: "swapped in one transaction").

A throwaway PostgreSQL holds ``orders(id, customer, amount, status)`` (``N`` rows, ``N / 10``
customers) and a one-row ``probe``; a ``Service`` in a thread of this process (its own local Spark)
keeps ``public.totals`` (``SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer``) and
``public.probe_v``.  For each case the view is first (re)created with its old SQL, untimed; then a
writer commits small transactions (20/s: an order inserted, one's amount updated, sometimes one
cancelled), a reader runs ``SELECT count(*), sum(total) FROM public.totals`` every 20 ms and a prober
writes the clock into ``probe`` every 0.2 s and waits to see it in ``probe_v`` (its lag), while the
change is made:

* alter, column added: ``CALL freshview.alter_view`` to ``... SUM(amount) AS total, COUNT(*) AS n ...``;
* alter, same columns: ``CALL freshview.alter_view`` to ``... WHERE status <> 'cancelled' ...`` (a column
  the service does not keep yet: computed inside the step loop) and to ``... WHERE amount >= 1 ...``;
* drop + create of the first two new SQLs (the way before ``alter_view``).

Printed per case: the CALL(s)' wall time; the reader's longest gap (from a read that failed or found
the table empty to the next good one), its longest single read (a read waiting on a lock) and the
row counts its good reads saw (old, then new); the probe's lag during the CALL; and, once the writer
has stopped, whether the result table equals PostgreSQL's answer to the new SQL (exactly, as sorted rows).
Which freshview runs is whatever ``PYTHONPATH`` puts first:

    PYTHONPATH=src:. python3 -m benchmarks.alter_view [N]
"""
from __future__ import annotations

import logging
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

import freshview
from freshview.connectors.postgres import control
from freshview.service.embedded import PostgresServer
from freshview.service.service import ServiceOptions
from tests.support.service import ThreadedService

VIEW = "public.totals"
OLD = "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer"
ADDED = "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer"
SAME = "SELECT customer, SUM(amount) AS total FROM orders WHERE status <> 'cancelled' GROUP BY customer"
KEPT = "SELECT customer, SUM(amount) AS total FROM orders WHERE amount >= 1 GROUP BY customer"
CASES = [  # (label, how, new SQL, its columns)
    ("alter_view, column added", "alter", ADDED, "customer, total, n"),
    ("alter_view, same columns (WHERE status: a column not kept yet)", "alter", SAME, "customer, total"),
    ("alter_view, same columns (WHERE amount: kept columns only)", "alter", KEPT, "customer, total"),
    ("drop + create, column added", "recreate", ADDED, "customer, total, n"),
    ("drop + create, same columns", "recreate", SAME, "customer, total"),
]
TIMEOUT_S = 1800


class _Said(logging.Handler):
    """The service's log lines about the view (its computation, its swap), printed."""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if VIEW in text and any(w in text for w in ("first computation", "created", "altered", "dropped")):
            print("  service:", text, flush=True)


class _Load:
    """The writer, the reader and the prober of one case, in threads until ``stop``."""

    def __init__(self, dsn: str, n: int, first_id: int) -> None:
        self.dsn, self.n, self.first_id = dsn, n, first_id
        self.stopping = threading.Event()
        self.reads: list[tuple[float, float, bool, int]] = []  # (start, end, good, rows)
        self.errors: list[str] = []
        self.failed: set[float] = set()  # the starts of the reads that failed
        self.lags: list[tuple[float, float]] = []  # (written at, lag)
        self.writes = 0
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._writer, self._reader, self._prober)]
        for thread in self.threads:
            thread.start()

    def _writer(self) -> None:
        rng = random.Random(24)
        next_id = self.first_id
        customers = max(1, self.n // 10)
        with psycopg.connect(self.dsn) as conn:
            while not self.stopping.is_set():
                began = time.perf_counter()
                with conn.transaction():
                    conn.execute("INSERT INTO orders VALUES (%s, %s, %s, 'open')",
                                 (next_id, rng.randrange(customers), rng.randrange(1, 100_000) / 100))
                    conn.execute("UPDATE orders SET amount = amount + 1 WHERE id = %s", (rng.randint(1, self.n),))
                    if rng.random() < 0.3:
                        conn.execute("UPDATE orders SET status = CASE status WHEN 'cancelled' THEN 'open' "
                                     "ELSE 'cancelled' END WHERE id = %s", (rng.randint(1, self.n),))
                next_id += 1
                self.writes += 1
                time.sleep(max(0.0, 0.05 - (time.perf_counter() - began)))

    def _reader(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopping.is_set():
                began = time.time()
                try:
                    count, _ = conn.execute(f"SELECT count(*), sum(total) FROM {VIEW}").fetchone()
                    self.reads.append((began, time.time(), count > 0, count))
                except psycopg.Error as exc:
                    self.reads.append((began, time.time(), False, 0))
                    self.failed.add(began)
                    self.errors.append(str(exc).splitlines()[0])
                time.sleep(max(0.0, 0.02 - (time.time() - began)))

    def _prober(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopping.is_set():
                wrote = time.time()
                conn.execute("UPDATE probe SET ts = %s WHERE id = 1", (wrote,))
                while not self.stopping.is_set():
                    row = conn.execute("SELECT ts FROM public.probe_v").fetchone()
                    if row and row[0] == wrote:
                        self.lags.append((wrote, time.time() - wrote))
                        break
                    time.sleep(0.005)
                time.sleep(max(0.0, 0.2 - (time.time() - wrote)))

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)

    def gaps(self) -> tuple[float, int, int]:
        """The longest gap (a bad read's start to the next good read's start), bad reads, empty reads, reads."""
        longest, since, bad, empty = 0.0, None, 0, 0
        for began, _, good, rows_seen in self.reads:
            if not good:
                bad += 1
                empty += 1 if rows_seen == 0 and began not in self.failed else 0
                since = began if since is None else since
            elif since is not None:
                longest, since = max(longest, began - since), None
        if since is not None:  # (never good again)
            longest = max(longest, self.reads[-1][1] - since)
        return longest, bad, empty, len(self.reads)


def _equal(dsn: str, sql: str, columns: str, timeout: float = 180) -> tuple[bool, float, int]:
    """Whether the result table equals PostgreSQL's answer to ``sql`` (polled until it does or ``timeout``)."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            status = conn.execute("SELECT status FROM freshview.views WHERE name = %s", (VIEW,)).fetchone()
            expected = sorted(conn.execute(sql).fetchall())
            actual = sorted(conn.execute(f"SELECT {columns} FROM {VIEW}").fetchall()) if status == ("active",) else []
            if actual == expected or time.perf_counter() - started > timeout:
                return actual == expected, time.perf_counter() - started, len(expected)
            time.sleep(0.5)


def _call(dsn: str, how: str, sql: str) -> float:
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        if how == "alter":
            conn.execute("CALL freshview.alter_view(%s, %s, %s)", (VIEW, sql, TIMEOUT_S))
        else:
            conn.execute("CALL freshview.drop_view(%s)", (VIEW,))
            conn.execute("CALL freshview.create_view(%s, %s, %s)", (VIEW, sql, TIMEOUT_S))
    return time.perf_counter() - started


def _recreate(dsn: str, sql: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM freshview.views WHERE name = %s", (VIEW,)).fetchone():
            conn.execute("CALL freshview.drop_view(%s)", (VIEW,))
        conn.execute("CALL freshview.create_view(%s, %s, %s)", (VIEW, sql, TIMEOUT_S))


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    print("freshview from", freshview.__file__, flush=True)
    logging.getLogger("freshview.service").addHandler(_Said())
    logging.getLogger("freshview.service").setLevel(logging.INFO)
    server = PostgresServer(settings={"shared_buffers": "1GB"})
    work = Path(tempfile.mkdtemp(prefix="fv-alter-view-"))
    rows: list[str] = []
    try:
        dsn = server.start()
        with psycopg.connect(dsn, autocommit=True) as db:
            control.install(db)
            db.execute("CREATE TABLE orders (id int PRIMARY KEY, customer int, amount numeric, status text)")
            db.execute("CREATE TABLE probe (id int PRIMARY KEY, ts double precision)")
            db.execute(f"INSERT INTO orders SELECT g, g % {max(1, n // 10)}, (g % 10000) / 100.0, "
                       f"CASE WHEN g % 7 = 0 THEN 'cancelled' ELSE 'open' END FROM generate_series(1, {n}) g")
            db.execute("INSERT INTO probe VALUES (1, 0)")
            db.execute("VACUUM ANALYZE")
        svc = ThreadedService(dsn, work / "state", None, options=ServiceOptions())
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CALL freshview.create_view(%s, %s, 600)", ("public.probe_v", "SELECT id, ts FROM probe"))
        for case, (label, how, sql, columns) in enumerate(CASES):
            _recreate(dsn, OLD)
            load = _Load(dsn, n, n + 1 + case * 10_000_000)
            time.sleep(3)
            print(f"{label}: N = {n}; load average {os.getloadavg()}", flush=True)
            began = time.time()
            took = _call(dsn, how, sql)
            ended = time.time()
            time.sleep(3)
            load.stop()
            equal, waited, groups = _equal(dsn, sql, columns)
            gap, bad, empty, reads = load.gaps()
            during = [r for r in load.reads if began <= r[0] <= ended]
            longest_read = max((r[1] - r[0] for r in during), default=0.0)
            seen = " / ".join(f"{c:,}" for c in dict.fromkeys(r[3] for r in during if r[2])) or "none"
            lags = sorted(lag for wrote, lag in load.lags if began <= wrote <= ended)
            lag = (f"{statistics.median(lags) * 1000:.0f} / {lags[-1] * 1000:.0f} ms ({len(lags)})" if lags
                   else "no probe")
            print(f"  took {took:.1f} s; reads {reads} ({len(during)} during), bad {bad}, longest gap {gap:.2f} s, "
                  f"empty {empty}, longest read {longest_read * 1000:.0f} ms, row counts seen {seen}; errors "
                  f"{sorted(set(load.errors))[:2]}; writes {load.writes}; probe lag {lag}; "
                  f"equal {equal} ({groups} groups, after {waited:.1f} s); load {os.getloadavg()}", flush=True)
            rows.append(f"| {label} | {took:.1f} s | {gap:.2f} s ({bad} of {reads}; {empty} empty) "
                        f"| {longest_read * 1000:.0f} ms | {seen} | {lag} | {equal} |")
        svc.stop()
    finally:
        server.stop()
    print(f"\nN = {n}\n")
    print("| case | CALL(s) took | longest gap (bad reads of all; empty) | longest read during "
          "| row counts seen during (in order) | probe lag p50 / max during | equal |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
