"""Commit-to-result latency and catch-up throughput of the MySQL/MariaDB service.

The same workload as ``benchmarks.service_latency`` (PostgreSQL), on a throwaway
MariaDB (``MariaDBServer``: the machine's ``mariadbd``, binlog in ROW format with
full images and metadata, ``sync_binlog=0`` and ``innodb_flush_log_at_trx_commit=2``
as the tests run it): ``customers(id, region)`` and ``orders(id, customer,
amount)``, the freshview control database, ``freshview.service.Service`` on a
``mysql://`` DSN in a background thread, and two views created with ``CALL
freshview.create_view`` (an aggregate and a join-aggregate).

Phase 1, latency: single-row transactions at ``--rate`` per second for
``--seconds`` (50 % amount updates, 15 % customer moves, 25 % inserts, 10 %
region moves), first ``--warmup`` seconds dropped.  MariaDB's binlog stamps a
commit in whole seconds, so the commit time of each transaction is taken by the
client right after ``COMMIT`` returns (same machine, same clock) and matched to
the service's transaction by its GTID (``@@last_gtid``); the result commit time
is the server's clock in the result transaction (``MySqlResults.commit_step``).
Latency = result commit − source commit, per source transaction.

Phase 2, catch-up: the service stops; ``--catchup-changes`` row changes are
committed in transactions of ``--catchup-batch`` rows (every fifth an INSERT …
SELECT from MariaDB's sequence engine, the others range UPDATEs of orders);
the service starts again on the same state and the clock runs until
``freshview.progress`` reaches the binlog position after the last commit.
Reported: row changes/s, steps, where the service's time went.

Both phases end by comparing every result table with MariaDB running the view's
SQL (PASS/FAIL).  Not a test: nothing asserts a speed.

    python3 -m benchmarks.mysql_service [--rate 200] [--seconds 30] [--catchup-changes 1000000] [--json out.json]
    python3 -m benchmarks.mysql_service --skip-latency   # phase 2 only (catch-up), about a minute
"""

from __future__ import annotations

import argparse
import collections
import decimal
import json
import logging
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pymysql

from benchmarks.service_latency import REGIONS, STEPS, _pct, _time_split, machine, say
from freshview.connectors.mysql import control, source as mysql_source
from freshview.connectors.mysql.source import current_position
from freshview.connectors.mysql.transactions import BinlogPosition
from freshview.service.embedded_mariadb import MariaDBServer
from freshview.service.service import ServiceOptions
from tests.support.service import ThreadedService

DATABASE = "freshview_bench"
VIEWS = {
    "customer_totals": "SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY customer",
    "region_totals": "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS total "
                     "FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region",
}
_REGION_NEXT = "CASE region " + " ".join(
    f"WHEN '{r}' THEN '{REGIONS[(i + 1) % len(REGIONS)]}'" for i, r in enumerate(REGIONS)) + f" ELSE '{REGIONS[0]}' END"


class ClientCommitTimes:
    """Source commit times measured by the client, by GTID, put into the service's transactions."""

    def __init__(self) -> None:
        self.by_gtid: dict[str, float] = {}
        self.matched = 0
        self._original = mysql_source.to_transaction

    def install(self) -> None:
        def to_transaction(txn, *args):
            out = self._original(txn, *args)
            at = self.by_gtid.get(txn.position.gtid)
            if at is not None:
                self.matched += 1
                out = type(out)(out.position, at, out.rows, out.truncated, out.definitions, out.payload)
            return out
        mysql_source.to_transaction = to_transaction


def connect(args: dict, **extra: Any) -> pymysql.Connection:
    return pymysql.connect(**{**args, "charset": "utf8mb4", **extra})


def make_database(server: dict, rows: int, customers: int) -> tuple[dict, float]:
    t0 = time.perf_counter()
    with connect(server, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {DATABASE}")
        cur.execute(f"USE {DATABASE}")
        control.install(conn)
        cur.execute("CREATE TABLE customers (id int PRIMARY KEY, region varchar(20) NOT NULL)")
        cur.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount decimal(12,2) NOT NULL)")
        regions = ", ".join(f"'{r}'" for r in REGIONS)
        cur.execute(f"INSERT INTO customers SELECT seq, ELT(1 + seq % {len(REGIONS)}, {regions}) "
                    f"FROM seq_1_to_{customers}")
        cur.execute(f"INSERT INTO orders SELECT seq, 1 + (seq * 7919) % {customers}, ((seq * 37) % 100000) / 100.0 "
                    f"FROM seq_1_to_{rows}")
    return {**server, "database": DATABASE}, time.perf_counter() - t0


def dsn_of(args: dict) -> str:
    return f"mysql://{args['user']}@{args['host']}:{args['port']}/{args['database']}"


def verify(args: dict) -> dict[str, Any]:
    """Each result table against MariaDB running the view's SQL (as multisets, ``_fv_key`` dropped)."""
    out: dict[str, Any] = {}
    with connect(args, autocommit=True) as conn, conn.cursor() as cur:
        for name, sql in VIEWS.items():
            cur.execute(sql)
            expected = collections.Counter(_norm(r) for r in cur.fetchall())
            cur.execute(f"SELECT * FROM `{name}`")
            names = [d[0] for d in cur.description]
            keep = [i for i, n in enumerate(names) if n not in ("_fv_key", "_fv_count")]
            count = names.index("_fv_count") if "_fv_count" in names else None  # (rows that may repeat)
            actual: collections.Counter = collections.Counter()
            for r in cur.fetchall():
                actual[_norm(tuple(r[i] for i in keep))] += 1 if count is None else r[count]
            out[name] = {"rows": sum(expected.values()), "equal": actual == expected}
            if actual != expected:  # a few differences, to start from
                out[name]["missing"] = [str(r) for r in list((expected - actual).elements())[:3]]
                out[name]["unexpected"] = [str(r) for r in list((actual - expected).elements())[:3]]
    return out


def _norm(row: tuple) -> tuple:
    return tuple(str(v.normalize()) if isinstance(v, decimal.Decimal) else v for v in row)


def stored_position(cur: Any, database: str) -> BinlogPosition | None:
    cur.execute("SELECT position FROM freshview.progress WHERE source = %s", (database,))
    row = cur.fetchone()
    return BinlogPosition.from_text(row[0]) if row and row[0] else None


def wait_position(args: dict, svc: ThreadedService, target: BinlogPosition, timeout: float) -> float:
    """Poll ``freshview.progress`` every 20 ms on one connection until it reaches ``target``.

    (One connection for the whole wait: the service runs in this process, and opening one per poll
    costs PyMySQL a TLS context with the default certificates each time, ~15 ms of the GIL, which
    took a quarter of the process's CPU samples from the service during catch-up.)
    """
    t0 = time.perf_counter()
    last = t0
    with connect(args, autocommit=True) as conn, conn.cursor() as cur:
        while True:
            at = stored_position(cur, args["database"])
            if at is not None and not at < target:
                return time.perf_counter() - t0
            if svc.error is not None or not svc.thread.is_alive():
                raise RuntimeError(f"the service stopped: {svc.error!r}")
            now = time.perf_counter()
            if now - t0 > timeout:
                raise RuntimeError(f"the position did not reach {target.to_text()} within {timeout:.0f} s (at {at})")
            if now - last > 10:
                say(f"  ... at {at and at.to_text()}, target {target.to_text()}, steps {svc.service.steps}")
                last = now
            time.sleep(0.02)


def latency_phase(args: argparse.Namespace, db: dict, svc: ThreadedService, clock: ClientCommitTimes,
                  next_id: list[int]) -> dict[str, Any]:
    service = svc.service
    base_len, base_steps, mark = len(service.latencies_ms), service.steps, len(STEPS.steps)
    base_times = dict(service.timings)
    rng = random.Random(1)
    total = int(round(args.rate * args.seconds))
    warm, behind, commit_ms = 0, 0.0, []
    say(f"phase 1: {args.rate:g} single-row txn/s for {args.seconds:g} s (first {args.warmup:g} s are warm-up)")
    with connect(db) as conn, conn.cursor() as cur:
        t0 = time.perf_counter()
        for i in range(total):
            due = t0 + i / args.rate
            now = time.perf_counter()
            if now < due:
                time.sleep(due - now)
            else:
                behind = max(behind, (now - due) * 1000)
            r = rng.random()
            if r < 0.5:
                cur.execute("UPDATE orders SET amount = amount + %s WHERE id = %s",
                            (rng.randint(1, 10_000) / 100, rng.randint(1, args.rows)))
            elif r < 0.65:
                cur.execute("UPDATE orders SET customer = 1 + customer %% %s WHERE id = %s",
                            (args.customers, rng.randint(1, args.rows)))
            elif r < 0.9:
                next_id[0] += 1
                cur.execute("INSERT INTO orders VALUES (%s, %s, %s)",
                            (next_id[0], rng.randint(1, args.customers), rng.randint(1, 100_000) / 100))
            else:
                cur.execute(f"UPDATE customers SET region = {_REGION_NEXT} WHERE id = %s",
                            (rng.randint(1, args.customers),))
            started = time.perf_counter()
            conn.commit()
            committed = time.time()
            commit_ms.append((time.perf_counter() - started) * 1000)
            cur.execute("SELECT @@last_gtid")
            clock.by_gtid[cur.fetchone()[0]] = committed
            if started - t0 < args.warmup:
                warm += 1
        elapsed = time.perf_counter() - t0
        target = current_position(conn)
    drain = wait_position(db, svc, target, 300)
    deadline = time.monotonic() + 30
    while len(service.latencies_ms) - base_len < total and time.monotonic() < deadline:
        time.sleep(0.05)
    lat = list(service.latencies_ms)[base_len:][warm:]
    steps = service.steps - base_steps
    result = {
        "rate_target": args.rate, "transactions": total, "achieved_rate": round(total / elapsed, 1),
        "writer_max_behind_ms": round(behind, 1), "client_commit_ms_p50": round(_pct(commit_ms, 50), 2),
        "measured_transactions": len(lat), "commit_times_matched": clock.matched,
        "latency_ms": {k: round(v, 1) for k, v in {
            "p50": _pct(lat, 50), "p90": _pct(lat, 90), "p99": _pct(lat, 99),
            "max": max(lat) if lat else float("nan"), "mean": statistics.fmean(lat) if lat else float("nan")}.items()},
        "engine_steps": steps, "txn_per_step": round(total / steps, 2) if steps else None,
        "drain_after_last_commit_s": round(drain, 3), "step_engine": STEPS.since(mark),
        "service_time_s": _time_split(service, base_times), "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }
    say(f"  latency p50 {result['latency_ms']['p50']} ms, p90 {result['latency_ms']['p90']} ms, "
        f"p99 {result['latency_ms']['p99']} ms over {len(lat)} transactions; {steps} engine steps")
    return result


def make_changes(db: dict, changes: int, batch: int, rows: int, customers: int, next_id: list[int]) -> BinlogPosition:
    done, n, at = 0, 0, 1
    with connect(db) as conn, conn.cursor() as cur:
        while done < changes:
            size = min(batch, changes - done)
            if n % 5 == 4 and done + size < changes:
                start = next_id[0] + 1
                cur.execute(f"INSERT INTO orders SELECT seq, 1 + (seq * 31) % {customers}, (seq % 1000) / 10.0 "
                            f"FROM seq_{start}_to_{start + size - 1}")
                next_id[0] += size
            else:
                if at + size - 1 > rows:
                    at = 1
                cur.execute("UPDATE orders SET amount = amount + 0.01, customer = 1 + customer %% %s "
                            "WHERE id BETWEEN %s AND %s", (customers, at, at + size - 1))
                at += size
            conn.commit()
            done += size
            n += 1
        return current_position(conn)


def catchup_phase(args: argparse.Namespace, db: dict, svc: ThreadedService, state: Path,
                  next_id: list[int]) -> tuple[dict[str, Any], ThreadedService]:
    svc.stop()
    say(f"phase 2: {args.catchup_changes:,} row changes while the service is down "
        f"(transactions of {args.catchup_batch:,} rows)")
    t0 = time.perf_counter()
    target = make_changes(db, args.catchup_changes, args.catchup_batch, args.rows, args.customers, next_id)
    written = time.perf_counter() - t0
    say(f"  written in {written:.1f} s; restarting the service")
    mark = len(STEPS.steps)
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    svc = ThreadedService(dsn_of(db), state, None, options=ServiceOptions())
    # (A new service counts from zero; reading its counters after the start would miss the steps it
    # took before this thread ran again.)
    base_steps, base_times = 0, dict.fromkeys(svc.service.timings, 0.0)
    wait_position(db, svc, target, 1800)
    cpu = time.process_time() - cpu0
    seconds = time.perf_counter() - t0  # (from the restart: the service's start-up is part of catching up)
    result = {"changes": args.catchup_changes, "batch": args.catchup_batch, "write_s": round(written, 1),
              "restart_to_caught_up_s": round(seconds, 2), "changes_per_s": round(args.catchup_changes / seconds),
              "process_cpu_s": round(cpu, 2),  # this process (service + polling), not the server's
              "engine_steps": svc.service.steps - base_steps, "step_engine": STEPS.since(mark),
              "service_time_s": _time_split(svc.service, base_times),
              "loadavg_1m_after": round(os.getloadavg()[0], 2)}
    say(f"  caught up in {seconds:.1f} s: {result['changes_per_s']:,} row changes/s, "
        f"{result['engine_steps']} steps, {cpu:.1f} s CPU; time split {result['service_time_s']}")
    return result, svc


def main() -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.mysql_service")
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--customers", type=int, default=10_000)
    parser.add_argument("--catchup-changes", type=int, default=1_000_000)
    parser.add_argument("--catchup-batch", type=int, default=10_000)
    parser.add_argument("--skip-latency", action="store_true", help="run only phase 2 (catch-up)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    logging.getLogger("freshview.service").addHandler(STEPS)
    logging.getLogger("freshview.service").setLevel(logging.DEBUG)
    logging.getLogger("freshview.service").propagate = False
    res: dict[str, Any] = {"machine": machine(), "args": vars(args) | {"json": str(args.json)},
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    clock = ClientCommitTimes()
    clock.install()
    state = Path(tempfile.mkdtemp(prefix="fv-mysql-bench-"))
    with MariaDBServer() as server:
        res["mariadb"] = server.version if hasattr(server, "version") else None
        say(f"MariaDB on port {server.port}; loading {args.rows:,} orders and {args.customers:,} customers")
        db, load_s = make_database(server.connect_args(), args.rows, args.customers)
        res["load_s"] = round(load_s, 1)
        svc = ThreadedService(dsn_of(db), state / "state", None, options=ServiceOptions())
        try:
            with connect(db, autocommit=True) as conn, conn.cursor() as cur:
                for name, sql in VIEWS.items():
                    t0 = time.perf_counter()
                    cur.execute("CALL freshview.create_view_timeout(%s, %s, 600)", (f"{DATABASE}.{name}", sql))
                    res.setdefault("create_view_s", {})[name] = round(time.perf_counter() - t0, 2)
            say(f"views created: {res['create_view_s']}")
            next_id = [args.rows]
            if not args.skip_latency:
                res["latency"] = latency_phase(args, db, svc, clock, next_id)
                res["latency"]["check"] = verify(db)
            if args.catchup_changes:
                res["catchup"], svc = catchup_phase(args, db, svc, state / "state", next_id)
                res["catchup"]["check"] = verify(db)
        finally:
            svc.stop()
            shutil.rmtree(state, ignore_errors=True)
    checks = [c for phase in ("latency", "catchup") if phase in res for c in res[phase]["check"].values()]
    ok = all(c["equal"] for c in checks)
    say(f"results equal MariaDB's answers: {'PASS' if ok else 'FAIL'}")
    print(json.dumps(res, indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
