"""Time-based views through simulated days: freshview with a fake clock vs PostgreSQL at the same instant.

Each step either changes the sources (random inserts, updates, deletes; NULLs and duplicates) or only
moves the clock (``advance()``), often exactly onto a row's time bound; after every step each view's
snapshot must equal PostgreSQL's answer to the view's SQL with ``now()`` (``current_date``,
``localtimestamp`` ...) replaced by the fake clock's instant as a literal (the oracle runs in UTC).
"""

from __future__ import annotations

import datetime as dt
import random
import re

import pytest

from freshview.runtime.cost import EXECUTORS
from freshview.schema import schema_from_ddl
from tests.support.oracle import assert_same_rows
from tests.support.streams import RandomTable

START = dt.datetime(2026, 3, 1, 9, 30)
# row times around the simulated week: every 5 hours, some on midnights, some a µs off
_TIMES = [START + dt.timedelta(hours=5 * k) for k in range(-12, 40)] + \
         [dt.datetime(2026, 3, d) for d in range(1, 9)] + [dt.datetime(2026, 3, 3, 0, 0, 0, 1)]
_DATES = [dt.date(2026, 2, 27) + dt.timedelta(days=k) for k in range(12)]

SOURCES = {
    "t": ("id INT, ts TIMESTAMP, tz TIMESTAMPTZ, d DATE, v INT", [],
          {"ts": _TIMES, "tz": [x.replace(tzinfo=dt.timezone.utc) for x in _TIMES], "d": _DATES,
           "v": list(range(6)), "id": list(range(15))}),
    "u": ("k INT, ts TIMESTAMP, v INT", ["k"], {"ts": _TIMES, "v": list(range(6))}),
}

VIEWS = [
    ("recent", "SELECT id, ts FROM t WHERE ts > now() - interval '2 days'"),
    ("by_day", "SELECT d, count(*) AS n, sum(v) AS s FROM t "
               "WHERE d >= current_date - 1 AND d < current_date + 2 GROUP BY d"),
    ("either", "SELECT id, v FROM t WHERE date_trunc('day', now()) <= ts OR v > 4"),
    ("cased", "SELECT id FROM t WHERE CASE WHEN v > 2 THEN ts < localtimestamp ELSE d <> current_date END"),
    ("case_value", "SELECT id, v FROM t WHERE CASE WHEN ts > now() - interval '1 day' THEN v ELSE 0 END > 2"),
    ("latest", "SELECT v, max(ts) AS m, count(*) AS n FROM t GROUP BY v "
               "HAVING max(ts) >= now() - interval '1 day'"),
    ("window", "SELECT a.id, b.k FROM t a JOIN u b ON a.v = b.v "
               "AND b.ts BETWEEN now() - interval '12 hours' AND now() + interval '12 hours'"),
    ("outer", "SELECT a.id, b.k FROM t a LEFT JOIN u b ON a.v = b.v AND b.ts > now()"),
    ("stamped", "SELECT count(*) AS n FROM t WHERE tz <= current_timestamp AND tz > now() - interval '30 hours'"),
    ("over_recent", "SELECT count(*) AS n, count(DISTINCT id) AS ids FROM recent"),  # a view over a time-based view
]

_NOW = re.compile(r"now\(\)|current_timestamp", re.I)


def at(sql: str, instant: dt.datetime) -> str:
    """``sql`` with the time functions replaced by ``instant`` (UTC) as PostgreSQL literals."""
    stamp = instant.isoformat(sep=" ")
    sql = _NOW.sub(f"'{stamp}+00'::timestamptz", sql)
    sql = re.sub(r"localtimestamp", f"'{stamp}'::timestamp", sql, flags=re.I)
    return re.sub(r"current_date", f"'{instant.date()}'::date", sql, flags=re.I)


MYSQL_SOURCES = {"t": ("id INT, ts TIMESTAMP, d DATE, v INT", [],
                       {"ts": _TIMES, "d": _DATES, "v": list(range(6)), "id": list(range(15))})}
MYSQL_VIEWS = [
    ("m_recent", "SELECT id, ts FROM t WHERE ts > NOW() - INTERVAL 2 DAY"),
    ("m_days", "SELECT d, COUNT(*) AS n FROM t WHERE d >= CURDATE() - INTERVAL 1 DAY "
               "AND d < DATE_ADD(CURDATE(), INTERVAL 2 DAY) GROUP BY d"),
    ("m_utc", "SELECT id FROM t WHERE ts <= UTC_TIMESTAMP() AND ts > DATE_SUB(UTC_TIMESTAMP(), INTERVAL 30 HOUR)"),
    ("m_having", "SELECT v, MAX(ts) AS m, COUNT(*) AS n FROM t GROUP BY v HAVING MAX(ts) >= NOW() - INTERVAL 1 DAY"),
]


def at_mysql(sql: str, instant: dt.datetime) -> str:
    """MariaDB's spelling of ``at``: the time functions as DATETIME/DATE literals."""
    sql = re.sub(r"NOW\(\)|UTC_TIMESTAMP\(\)", f"TIMESTAMP'{instant.isoformat(sep=' ')}'", sql)
    return sql.replace("CURDATE()", f"DATE'{instant.date()}'")


def _bounds_ahead(now: dt.datetime) -> list[dt.datetime]:
    """Instants where some view's rows change: row times moved by the views' intervals, midnights."""
    shifts = [dt.timedelta(0), dt.timedelta(days=2), dt.timedelta(days=1), dt.timedelta(hours=12),
              -dt.timedelta(hours=12), dt.timedelta(hours=30)]
    out = [x + s for x in _TIMES for s in shifts] + [dt.datetime.combine(d, dt.time()) for d in _DATES]
    return sorted(x for x in out if x > now)


def run_temporal(make_flow, oracle, seed: int, steps: int, executions=EXECUTORS, sources=SOURCES, views=VIEWS,
                 at=at) -> dict[str, int]:
    rng = random.Random(seed)
    clock = [START]
    flows = {e: make_flow(execution=e, clock=lambda: clock[0]) for e in executions}
    tables = {}
    for name, (ddl, pk, domains) in sources.items():
        for flow in flows.values():
            flow.register_source(name, ddl, primary_key=pk or None)
        oracle.create_table(name, schema_from_ddl(ddl, pk))
        tables[name] = RandomTable(name, schema_from_ddl(ddl, pk), random.Random(f"{seed}:{name}"), domains, 0.15)
    def register(views) -> None:
        for view, sql in views:
            for flow in flows.values():
                flow.register_view(view, sql)
    half = (len(views) + 1) // 2
    register(views[:half])  # over empty sources; the others over the initial load (a first computation)
    seen = {view: 0 for view, _ in views}

    def compare(step: int, what: str) -> None:
        for name, table in tables.items():
            oracle.load(name, table.current())
        for view, sql in views:
            if view == "over_recent":
                sql = sql.replace("recent", f"({VIEWS[0][1]}) AS r")
            expected = oracle.query(at(sql, clock[0]))
            seen[view] += expected.num_rows
            for e, flow in flows.items():
                assert_same_rows(flow.snapshot(view), expected,
                                 context=f"seed={seed} step={step} ({what}) at {clock[0]} view={view} execution={e}")

    initial = {n: t.step(25, inserts_only=True) for n, t in tables.items()}
    for flow in flows.values():
        flow.tick(initial)
    register(views[half:])
    compare(0, "initial load")
    for step in range(1, steps + 1):
        ahead = _bounds_ahead(clock[0])
        roll = rng.random()
        if roll < 0.4 and ahead:  # exactly onto a bound, or a µs before it
            clock[0] = ahead[min(int(rng.expovariate(0.3)), len(ahead) - 1)] - \
                dt.timedelta(microseconds=rng.choice([0, 0, 1]))
            clock[0] = max(clock[0], START)
        elif roll < 0.7:
            clock[0] += dt.timedelta(minutes=rng.randint(0, 18 * 60))
        if rng.random() < 0.5:
            deltas = {n: t.step(rng.randint(1, 8)) for n, t in tables.items() if rng.random() < 0.7}
            for flow in flows.values():
                flow.tick(deltas)
            what = f"changes {sorted(deltas)}"
        else:
            for flow in flows.values():
                flow.advance()
            what = "clock only"
        compare(step, what)
        for flow in flows.values():  # nothing is due at the step's own time once it ran
            due = flow.next_due()
            assert due is None or due > clock[0].replace(tzinfo=dt.timezone.utc).timestamp()
    return seen


def test_time_based_views_through_simulated_days(make_flow, oracle):
    seen = run_temporal(make_flow, oracle, seed=1, steps=10, executions=("local",))
    assert all(seen.values()), seen  # every view had rows at some step (the stream is not vacuous)


def test_time_based_views_under_both_executors(make_flow, oracle):
    run_temporal(make_flow, oracle, seed=7, steps=2)


def test_mysql_time_functions_against_mariadb(make_flow, mysql_database):
    from tests.support.mysql_oracle import MariaDBOracle

    maria = MariaDBOracle(mysql_database)
    try:
        seen = run_temporal(lambda **kw: make_flow(dialect="mysql", **kw), maria, seed=3, steps=10,
                            executions=("local",), sources=MYSQL_SOURCES, views=MYSQL_VIEWS, at=at_mysql)
    finally:
        maria.close()
    assert all(seen.values()), seen


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 6))
def test_time_based_views_long_runs(make_flow, oracle, seed):
    run_temporal(make_flow, oracle, seed=seed, steps=60)
