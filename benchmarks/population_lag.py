"""A probe view's lag while another view is populated (issue 22: "beside the stream, never instead of it").

A throwaway PostgreSQL holds ``big_a`` (``N`` rows), ``big_b`` (``N / 10``) and a one-row ``probe``;
a ``Service`` in a thread of this process (its own local Spark) keeps ``public.probe_v`` (``SELECT id,
ts FROM probe``).  A prober writes the wall clock into ``probe`` every 0.2 s and polls the result table
until it shows it: that wait is the probe's lag.  Measured for 5 s before, during one ``CALL
freshview.create_view`` of a join + aggregate over ``big_a`` and ``big_b``, and for 5 s after; printed:
p50 / p99 / max lag per period and the CALL's time (and the service's log lines on the population's
computation and join).  Which freshview runs is whatever ``PYTHONPATH`` puts
first, so the same script times two checkouts:

    PYTHONPATH=src:. python3 -m benchmarks.population_lag [N]
    PYTHONPATH=/work/main/src:. python3 -m benchmarks.population_lag [N]
"""
from __future__ import annotations

import logging
import os
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

VIEW = "SELECT a.k, COUNT(*) AS n, SUM(b.w) AS w FROM big_a a JOIN big_b b ON a.k = b.id GROUP BY a.k"


def _quantiles(lags: list[float]) -> str:
    if not lags:
        return "no probe"
    ordered = sorted(lags)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (f"p50 {statistics.median(ordered) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
            f"max {ordered[-1] * 1000:.0f} ms ({len(ordered)} probes)")


class _Said(logging.Handler):
    """The service's log lines about the population (its computation, its join), printed."""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "big_v" in text and ("first computation" in text or "created" in text):
            print("  service:", text, flush=True)


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    print("freshview from", freshview.__file__, flush=True)
    logging.getLogger("freshview.service").addHandler(_Said())
    logging.getLogger("freshview.service").setLevel(logging.INFO)
    server = PostgresServer(settings={"shared_buffers": "1GB"})
    work = Path(tempfile.mkdtemp(prefix="fv-population-lag-"))
    try:
        dsn = server.start()
        with psycopg.connect(dsn, autocommit=True) as db:
            control.install(db)
            db.execute("CREATE TABLE big_a (id int PRIMARY KEY, k int, v int)")
            db.execute("CREATE TABLE big_b (id int PRIMARY KEY, w int)")
            db.execute("CREATE TABLE probe (id int PRIMARY KEY, ts double precision)")
            db.execute(f"INSERT INTO big_a SELECT g, g % {max(1, n // 10)}, g % 97 FROM generate_series(1, {n}) g")
            db.execute(f"INSERT INTO big_b SELECT g, g % 89 FROM generate_series(0, {max(1, n // 10)}) g")
            db.execute("INSERT INTO probe VALUES (1, 0)")
            db.execute("VACUUM ANALYZE")
        svc = ThreadedService(dsn, work / "state", None, options=ServiceOptions())
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CALL freshview.create_view(%s, %s, 600)", ("public.probe_v", "SELECT id, ts FROM probe"))
        period = ["before"]
        lags: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        stop = threading.Event()

        def prober() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not stop.is_set():
                    wrote = time.time()
                    conn.execute("UPDATE probe SET ts = %s WHERE id = 1", (wrote,))
                    where = period[0]
                    while not stop.is_set():
                        row = conn.execute("SELECT ts FROM public.probe_v").fetchone()
                        if row and row[0] == wrote:
                            lags[where].append(time.time() - wrote)
                            break
                        time.sleep(0.005)
                    time.sleep(max(0.0, 0.2 - (time.time() - wrote)))

        thread = threading.Thread(target=prober, daemon=True)
        thread.start()
        time.sleep(5)
        period[0] = "during"
        print(f"N = {n}; load average {os.getloadavg()}", flush=True)
        started = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CALL freshview.create_view(%s, %s, 1800)", ("public.big_v", VIEW))
        took = time.perf_counter() - started
        period[0] = "after"
        time.sleep(5)
        stop.set()
        thread.join(30)
        print(f"create_view returned after {took:.1f} s; load average {os.getloadavg()}", flush=True)
        for name, values in lags.items():
            print(f"probe lag {name:6}: {_quantiles(values)}", flush=True)
        svc.stop()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
