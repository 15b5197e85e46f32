"""End to end on MariaDB: views created with CALL, kept fresh from the binlog, checked against MariaDB.

Every check compares a result table (``_fv_key`` dropped, ``_fv_count``
expanded) with the view's SQL run by MariaDB over the same database right now,
as multisets; text is compared by its ``utf8mb4_general_ci`` key, the tables'
collation, since which spelling of a case-insensitive group MariaDB shows is
its arbitrary choice.
"""

from __future__ import annotations

import collections
import random
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterator

import pymysql
import pytest

from freshview.collation import key as collation_key
from freshview.connectors.mysql import control
from tests.support.service import ProcessService, ThreadedService

SCHEMA = (
    "CREATE TABLE customers (id int PRIMARY KEY, region varchar(20)) COLLATE utf8mb4_general_ci",
    "CREATE TABLE orders (id int PRIMARY KEY, customer int, amount decimal(10,2), status varchar(10) NOT NULL, "
    "note varchar(20)) COLLATE utf8mb4_general_ci",
    "CREATE TABLE events (kind varchar(10), qty int) COLLATE utf8mb4_general_ci",  # no key: duplicates
)
REGIONS = [None, "north", "North", "south", "EAST"]
STATUSES = ["open", "Open", "OPEN", "paid", "cancelled"]
NOTES = [None, "a", "A", "b", "vip", "VIP"]
KINDS = ["click", "Click", "view", "buy", None]

VIEWS = {
    "customer_totals": "SELECT customer, status, COUNT(*) AS n, SUM(amount) AS total, MAX(amount) AS biggest, COUNT(note) AS notes "
                       "FROM orders GROUP BY customer, status",
    "order_regions": "SELECT o.id, o.amount, c.region FROM orders o JOIN customers c ON o.customer = c.id "
                     "WHERE o.amount > 10",
    "event_totals": "SELECT kind, SUM(qty) AS qty, COUNT(*) AS n FROM events GROUP BY kind",
    "everything": "SELECT COUNT(*) AS n, SUM(amount) AS total FROM orders",
}


def dsn_of(args: dict) -> str:
    password = urllib.parse.quote(args.get("password") or "", safe="")
    return f"mysql://{args['user']}:{password}@{args['host']}:{args['port']}/{args['database']}"


def connect(args: dict, **extra: Any) -> pymysql.Connection:
    return pymysql.connect(**{**args, "charset": "utf8mb4", **extra})


@pytest.fixture
def shop(mysql_database: dict) -> dict:
    with connect(mysql_database, autocommit=True) as conn, conn.cursor() as cur:
        control.install(conn)
        for statement in SCHEMA:
            cur.execute(statement)
        rng = random.Random(1)
        cur.executemany("INSERT INTO customers VALUES (%s, %s)", [(i, rng.choice(REGIONS)) for i in range(1, 31)])
        cur.executemany("INSERT INTO orders VALUES (%s, %s, %s, %s, %s)",
                        [(i, rng.choice([None, *range(1, 35)]), rng.choice([None, rng.randint(1, 99_999) / 100]),
                          rng.choice(STATUSES), rng.choice(NOTES)) for i in range(1, 301)])
        cur.executemany("INSERT INTO events VALUES (%s, %s)",
                        [(rng.choice(KINDS), rng.choice([None, 1, 2, 3])) for _ in range(60)])
    return mysql_database


@pytest.fixture
def start_service(spark: Any, shop: dict, tmp_path: Path) -> Iterator[Callable[..., ThreadedService]]:
    running: list[ThreadedService] = []

    def start(**kwargs: Any) -> ThreadedService:
        svc = ThreadedService(dsn_of(shop), tmp_path / "state", spark, **kwargs)
        running.append(svc)
        return svc

    yield start
    for svc in running:
        if svc.thread.is_alive():
            svc.stop()


def create_views(args: dict, views: dict[str, str]) -> None:
    with connect(args, autocommit=True) as conn, conn.cursor() as cur:
        for name, sql in views.items():
            cur.execute("CALL freshview.create_view(%s, %s)", (f"{args['database']}.{name}", sql))


def random_transaction(cur: Any, rng: random.Random, next_id: list[int]) -> None:
    """1-6 random statements over the three tables (the caller commits)."""
    for _ in range(rng.randint(1, 6)):
        op = rng.random()
        oid = rng.randint(1, next_id[0])
        if op < 0.25:
            next_id[0] += 1
            cur.execute("INSERT INTO orders VALUES (%s, %s, %s, %s, %s)",
                        (next_id[0], rng.choice([None, *range(1, 35)]),
                         rng.choice([None, rng.randint(1, 99_999) / 100]), rng.choice(STATUSES), rng.choice(NOTES)))
        elif op < 0.4:
            cur.execute("UPDATE orders SET amount = amount + %s, status = %s WHERE id = %s",
                        (rng.randint(-300, 300), rng.choice(STATUSES), oid))
        elif op < 0.5:
            cur.execute("UPDATE orders SET customer = %s, note = %s WHERE id BETWEEN %s AND %s",
                        (rng.choice([None, *range(1, 35)]), rng.choice(NOTES), oid, oid + 3))
        elif op < 0.6:
            cur.execute("DELETE FROM orders WHERE id = %s", (oid,))
        elif op < 0.7:
            cur.execute("UPDATE customers SET region = %s WHERE id = %s", (rng.choice(REGIONS), rng.randint(1, 35)))
        elif op < 0.75:
            cid = rng.randint(31, 40)
            cur.execute("INSERT INTO customers VALUES (%s, %s) ON DUPLICATE KEY UPDATE region = VALUES(region)",
                        (cid, rng.choice(REGIONS)))
        elif op < 0.9:
            row = (rng.choice(KINDS), rng.choice([None, 1, 2, 3]))
            cur.executemany("INSERT INTO events VALUES (%s, %s)", [row] * rng.randint(1, 3))  # duplicates
        else:
            cur.execute("DELETE FROM events WHERE kind <=> %s LIMIT 1", (rng.choice(KINDS),))


def run_transactions(args: dict, rng: random.Random, count: int, next_id: list[int]) -> None:
    with connect(args) as conn:
        for _ in range(count):
            with conn.cursor() as cur:
                random_transaction(cur, rng, next_id)
            conn.rollback() if rng.random() < 0.1 else conn.commit()


def _norm(row: tuple) -> tuple:
    return tuple(collation_key(v) if isinstance(v, str) else v for v in row)


def result_rows(cur: Any, table: str) -> collections.Counter:
    cur.execute(f"SELECT * FROM `{table}`")
    names = [d[0] for d in cur.description]
    out: collections.Counter = collections.Counter()
    for row in cur.fetchall():
        values = dict(zip(names, row))
        values.pop("_fv_key", None)
        times = values.pop("_fv_count", 1)
        out[_norm(tuple(values.values()))] += times
    return out


def differences(args: dict, names: list[str]) -> list[str]:
    problems = []
    with connect(args, autocommit=True) as conn, conn.cursor() as cur:
        for name in names:
            cur.execute("SELECT status, error, `sql` FROM freshview.views WHERE name = %s",
                        (f"{args['database']}.{name}",))
            found = cur.fetchone()
            if found is None or found[0] != "active":
                problems.append(f"{name}: status {found and found[:2]}")
                continue
            cur.execute(found[2])
            expected = collections.Counter(_norm(r) for r in cur.fetchall())
            actual = result_rows(cur, name)
            if actual != expected:
                problems.append(f"{name}: only in the result table {list((actual - expected).items())[:3]}, "
                                f"only in MariaDB's answer {list((expected - actual).items())[:3]}")
    return problems


def wait_until_fresh(args: dict, names: list[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        problems = differences(args, names)
        if not problems:
            return
        if time.monotonic() > deadline:
            raise AssertionError("result tables are not fresh:\n  " + "\n  ".join(problems))
        time.sleep(0.2)


def test_views_follow_random_transactions(shop, start_service):
    svc = start_service()
    rng = random.Random(7)
    next_id = [300]
    stop = threading.Event()

    def writer() -> None:  # changes keep committing while the views' snapshots are taken
        while not stop.is_set():
            run_transactions(shop, rng, 5, next_id)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        create_views(shop, VIEWS)
    finally:
        stop.set()
        thread.join()
    run_transactions(shop, rng, 150, next_id)
    wait_until_fresh(shop, list(VIEWS))
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("DESCRIBE customer_totals")
        columns = {r[0]: r[1] for r in cur.fetchall()}
        assert columns["_fv_key"] == "binary(16)"  # the hash primary key of the view's key columns
        cur.execute("SELECT status, position FROM freshview.progress WHERE source = %s", (shop["database"],))
        status, position = cur.fetchone()
        assert status == "running" and position and "@" in position
        cur.execute("CALL freshview.drop_view(%s)", (f"{shop['database']}.order_regions",))
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                    "TABLE_NAME = 'order_regions'", (shop["database"],))
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT COUNT(*) FROM freshview.views WHERE name = %s", (f"{shop['database']}.order_regions",))
        assert cur.fetchone()[0] == 0
    run_transactions(shop, rng, 30, next_id)
    wait_until_fresh(shop, ["customer_totals", "event_totals", "everything"])
    assert svc.service.steps > 0


def test_create_view_reports_errors(shop, start_service):
    start_service()
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        with pytest.raises(pymysql.err.OperationalError, match="freshview"):
            cur.execute("CALL freshview.create_view(%s, %s)", (f"{shop['database']}.bad", "SELECT nope FROM orders"))
        with pytest.raises(pymysql.err.OperationalError, match="unknown table|does not exist"):
            cur.execute("CALL freshview.create_view(%s, %s)", (f"{shop['database']}.bad2", "SELECT * FROM missing"))


def test_restart_resumes_without_applying_twice(shop, start_service):
    svc = start_service()
    rng = random.Random(11)
    next_id = [300]
    create_views(shop, {n: VIEWS[n] for n in ("customer_totals", "event_totals", "order_regions")})
    run_transactions(shop, rng, 40, next_id)
    wait_until_fresh(shop, ["customer_totals", "event_totals", "order_regions"])
    svc.stop()
    run_transactions(shop, rng, 60, next_id)  # while no service runs
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT steps FROM freshview.progress WHERE source = %s", (shop["database"],))
        steps_before = cur.fetchone()[0]
    start_service()
    wait_until_fresh(shop, ["customer_totals", "event_totals", "order_regions"])
    run_transactions(shop, rng, 20, next_id)
    wait_until_fresh(shop, ["customer_totals", "event_totals", "order_regions"])
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT steps FROM freshview.progress WHERE source = %s", (shop["database"],))
        assert cur.fetchone()[0] > steps_before


def test_truncate_and_incompatible_ddl(shop, start_service):
    start_service()
    rng = random.Random(3)
    next_id = [300]
    create_views(shop, {n: VIEWS[n] for n in ("event_totals", "customer_totals")})
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("TRUNCATE TABLE events")
        cur.execute("INSERT INTO events VALUES ('Click', 5), ('click', 1), (NULL, NULL)")
    run_transactions(shop, rng, 10, next_id)
    wait_until_fresh(shop, ["event_totals", "customer_totals"])
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE events DROP COLUMN qty")
        cur.execute("INSERT INTO events VALUES ('view')")
        deadline = time.monotonic() + 30
        while True:
            cur.execute("SELECT status, error FROM freshview.views WHERE name = %s",
                        (f"{shop['database']}.event_totals",))
            status, error = cur.fetchone()
            if status == "failed" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status == "failed" and "qty" in error
        cur.execute("UPDATE orders SET status = 'Paid', amount = amount + 1 WHERE id % 3 = 0")
        cur.execute("DELETE FROM orders WHERE id % 7 = 0")
    wait_until_fresh(shop, ["customer_totals"])  # the other view carries on


def test_position_follows_transactions_of_tables_no_view_reads(shop, start_service):
    start_service()
    create_views(shop, {"event_totals": VIEWS["event_totals"]})
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO events VALUES ('buy', 1)")
        wait_until_fresh(shop, ["event_totals"])
        cur.execute("SELECT position FROM freshview.progress WHERE source = %s", (shop["database"],))
        before = cur.fetchone()[0]
        cur.execute("CREATE TABLE unrelated (id int PRIMARY KEY)")
        cur.execute("INSERT INTO unrelated VALUES (1), (2)")
        cur.execute("SELECT @@gtid_binlog_pos")  # one domain, one server: 0-1-<sequence number>
        now = int(cur.fetchone()[0].split("-")[-1])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the service's own writes move the server on too: reach, not equal
            cur.execute("SELECT position FROM freshview.progress WHERE source = %s", (shop["database"],))
            after = cur.fetchone()[0]
            if int(after.split("@")[0].split("-")[-1]) >= now:
                break
            time.sleep(0.2)
        assert after != before and int(after.split("@")[0].split("-")[-1]) >= now, (before, after, now)


def test_purged_binlogs_lead_to_a_rebuild(shop, start_service, monkeypatch):
    from freshview.service import recovery

    reasons: list = []
    decide = recovery.rebuild_reason
    monkeypatch.setattr(recovery, "rebuild_reason", lambda *a: reasons.append(decide(*a)) or reasons[-1])
    svc = start_service()
    rng = random.Random(5)
    next_id = [300]
    create_views(shop, {n: VIEWS[n] for n in ("customer_totals", "event_totals")})
    run_transactions(shop, rng, 10, next_id)
    wait_until_fresh(shop, ["customer_totals", "event_totals"])
    svc.stop()
    run_transactions(shop, rng, 20, next_id)
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        current = cur.fetchone()[0]
        deadline = time.monotonic() + 20
        while True:  # the stopped service's binlog dump thread may hold the file a moment longer
            cur.execute("PURGE BINARY LOGS TO %s", (current,))  # the service's position is gone
            cur.execute("SHOW BINARY LOGS")
            if [r[0] for r in cur.fetchall()] == [current] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    start_service()
    wait_until_fresh(shop, ["customer_totals", "event_totals"])
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = cur.fetchall()
    assert reasons[0] is None and "purged" in (reasons[-1] or ""), (reasons, files, current)  # the restart saw the lost position
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT error FROM freshview.views WHERE name = %s", (f"{shop['database']}.event_totals",))
        assert cur.fetchone()[0] is None  # active again, the rebuild's reason cleared
    run_transactions(shop, rng, 20, next_id)
    wait_until_fresh(shop, ["customer_totals", "event_totals"])


class MySqlProcessService(ProcessService):
    """``freshview run --dsn mysql://…`` in a child process."""

    def wait_ready(self, args: dict, timeout: float = 120) -> None:  # type: ignore[override]
        deadline = time.monotonic() + timeout
        with connect(args, autocommit=True) as conn, conn.cursor() as cur:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(f"the service exited ({self.proc.returncode}):\n{self.output()}")
                cur.execute("SELECT status, TIMESTAMPDIFF(MICROSECOND, heartbeat_at, UTC_TIMESTAMP(6)) < 3e6 "
                            "FROM freshview.progress WHERE source = %s", (args["database"],))
                row = cur.fetchone()
                if row and row[0] == "running" and row[1]:
                    return
                time.sleep(0.2)
        raise AssertionError(f"the service did not start:\n{self.output()}")


def test_sigkill_at_random_moments_loses_nothing_and_doubles_nothing(shop, tmp_path):
    dsn = dsn_of(shop)
    state, log = tmp_path / "state", tmp_path / "service.log"
    service = MySqlProcessService(dsn, state, log)
    service.wait_ready(shop)
    views = {n: VIEWS[n] for n in ("customer_totals", "order_regions", "event_totals")}
    create_views(shop, views)
    rng = random.Random(13)
    next_id = [300]
    stop = threading.Event()
    committed = [0]

    def writer() -> None:
        while not stop.is_set():
            run_transactions(shop, rng, 1, next_id)
            committed[0] += 1
            time.sleep(0.002)

    thread = threading.Thread(target=writer)
    thread.start()
    kills = random.Random(5)
    try:
        for _ in range(3):
            time.sleep(kills.uniform(0.5, 4.0))
            service.kill()
            time.sleep(kills.uniform(0.0, 1.0))  # changes pile up while it is down
            service = MySqlProcessService(dsn, state, log)
            service.wait_ready(shop)
        time.sleep(1.0)
    finally:
        stop.set()
        thread.join()
    assert committed[0] > 50
    try:
        wait_until_fresh(shop, list(views), timeout=90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nservice log:\n{service.output()}") from None
    assert service.terminate() == 0, service.output()
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT status FROM freshview.progress WHERE source = %s", (shop["database"],))
        assert cur.fetchone()[0] == "stopped"


def test_mixed_case_and_quoted_names(shop, start_service):
    """Table names keep their case (MariaDB on Linux compares them exactly) and may need backticks; column
    names are case-insensitive; views may be named either way and read one another."""
    db = shop["database"]
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE `Orders` (`Id` int PRIMARY KEY, `Customer` int, `Amount` decimal(10,2)) "
                    "COLLATE utf8mb4_general_ci")
        cur.execute("CREATE TABLE `big items` (`order id` int, Qty int) COLLATE utf8mb4_general_ci")
        cur.executemany("INSERT INTO `Orders` VALUES (%s, %s, %s)", [(i, i % 7, i * 1.5) for i in range(1, 41)])
        cur.executemany("INSERT INTO `big items` VALUES (%s, %s)", [(i % 45, i % 4) for i in range(1, 61)])
    start_service()
    views = {
        "`Customer Totals`": "SELECT customer, SUM(AMOUNT) AS Total, COUNT(*) AS N FROM Orders GROUP BY Customer",
        "CamelView": "SELECT o.Id, b.qty FROM `Orders` o JOIN `big items` b ON b.`ORDER ID` = o.id WHERE b.Qty > 0",
        "`view of a view`": f"SELECT COUNT(*) AS groups, SUM(total) AS total FROM {db}.`Customer Totals`",
    }
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        for name, sql in views.items():
            cur.execute("CALL freshview.create_view(%s, %s)", (f"{db}.{name}", sql))
        with pytest.raises(pymysql.err.OperationalError, match="unknown table 'ORDERS'"):  # neither `Orders` nor `orders`
            cur.execute("CALL freshview.create_view(%s, %s)", (f"{db}.wrong_case", "SELECT Id FROM ORDERS"))
        for _ in range(20):
            cur.execute("UPDATE `Orders` SET `Amount` = `Amount` + 1, Customer = Customer + 1 WHERE Id = %s",
                        (random.randint(1, 40),))
            cur.execute("INSERT INTO `big items` VALUES (%s, %s)", (random.randint(1, 40), random.randint(0, 3)))
            cur.execute("DELETE FROM `Orders` WHERE Id = %s", (random.randint(1, 40),))
        cur.execute("SELECT name FROM freshview.views WHERE name LIKE %s ORDER BY name", (f"{db}.%",))
        assert sorted(r[0] for r in cur.fetchall()) == sorted(f"{db}.{n}" for n in views)
    deadline = time.monotonic() + 60
    while True:
        problems = []
        with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
            for name, sql in views.items():
                cur.execute(sql)
                expected = collections.Counter(_norm(r) for r in cur.fetchall())
                actual = result_rows(cur, name.strip("`"))
                if actual != expected:
                    problems.append(f"{name}: {actual} != {expected}")
        if not problems:
            break
        assert time.monotonic() < deadline, problems
        time.sleep(0.2)
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CALL freshview.drop_view(%s)", (f"{db}.`view of a view`",))
        cur.execute("CALL freshview.drop_view(%s)", (f"`{db}`.`Customer Totals`",))
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,))
        tables = {r[0] for r in cur.fetchall()}
    assert "Customer Totals" not in tables and "view of a view" not in tables and "CamelView" in tables


def wait_sql(args: dict, name: str, text: str, timeout: float = 60.0) -> None:
    """A view's stored SQL once it reads ``text`` (rewritten after a rename)."""
    deadline = time.monotonic() + timeout
    with connect(args, autocommit=True) as conn, conn.cursor() as cur:
        while True:
            cur.execute("SELECT `sql`, status, error FROM freshview.views WHERE name = %s",
                        (f"{args['database']}.{name}",))
            row = cur.fetchone()
            if row and text in row[0]:
                return
            assert time.monotonic() < deadline, f"{name} was not rewritten to read {text}: {row}"
            time.sleep(0.1)


def wait_failed(args: dict, name: str, timeout: float = 60.0) -> str:
    """A view's error once it failed (the test fails if it stays anything else)."""
    deadline = time.monotonic() + timeout
    with connect(args, autocommit=True) as conn, conn.cursor() as cur:
        while True:
            cur.execute("SELECT status, error FROM freshview.views WHERE name = %s", (f"{args['database']}.{name}",))
            row = cur.fetchone()
            if row and row[0] == "failed":
                return row[1]
            assert time.monotonic() < deadline, f"{name} did not fail: {row}"
            time.sleep(0.1)


def test_malformed_requests_answered_and_interrupted_ones_retried_once(shop, start_service, monkeypatch):
    """Issue 20 on MariaDB: no request stops the service; a request running when it died is retried once."""
    from freshview.service import catalog

    real = catalog.compile_view
    monkeypatch.setattr(catalog, "compile_view", lambda sql, *a, **k: (_ for _ in ()).throw(IndexError("injected"))
                        if "boom" in sql else real(sql, *a, **k))
    db = shop["database"]
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        for name, attempts in (("once", 1), ("twice", 2)):  # what a service killed twice / once leaves behind
            cur.execute("INSERT INTO freshview.requests (action, name, `sql`, state, attempts) VALUES "
                        "('create', %s, 'SELECT id, amount FROM orders', 'running', %s)", (f"{db}.{name}", attempts))
        cur.execute("CREATE VIEW random_view AS SELECT id, RAND() AS r FROM orders")
        cur.execute("CREATE SEQUENCE numbers")
    service = start_service()
    malformed = {
        "SELECT FROM orders": "a SELECT list with no columns is not supported",
        "SELECT id FROM orders WHERE EXISTS (WITH w AS (SELECT id FROM customers) SELECT 1 FROM w "
        "WHERE w.id = orders.customer AND w.nope)": "unknown column 'w.nope'",
        "SELECT id, RAND() AS r FROM orders": "random() is not supported",
        "SELECT id, NOW() AS t FROM orders": "now() in the SELECT list cannot be scheduled",
        "SELECT id FROM random_view": "random_view is read through its definition, where random()",
        "SELECT next_not_cached_value FROM numbers": "is a sequence, not a base table",
        "SELECT boom FROM orders": "failed with an internal error (IndexError: injected)",
    }
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        for n, (sql, message) in enumerate(malformed.items()):
            with pytest.raises(pymysql.err.OperationalError) as info:
                cur.execute("CALL freshview.create_view_timeout(%s, %s, 30)", (f"{db}.bad{n}", sql))
            assert message in str(info.value), (sql, str(info.value))
        cur.execute("SELECT name, state, error FROM freshview.requests WHERE name IN (%s, %s)",
                    (f"{db}.once", f"{db}.twice"))
        rows = {r[0]: r[1:] for r in cur.fetchall()}
        assert rows[f"{db}.twice"] == ("failed", "freshview: this request stopped the service; not retried")
        assert rows[f"{db}.once"] == ("done", None)
    run_transactions(shop, random.Random(2), 10, [300])
    wait_until_fresh(shop, ["once"])
    assert service.thread.is_alive()


def test_views_partitions_and_every_alter_table(shop, start_service):
    """MariaDB views read through their definitions, a partitioned table followed, and DDL on followed tables:
    each form keeps the views right or fails them naming the statement; none leaves a view active and stale."""
    from freshview.service.service import ServiceOptions

    failing = {  # table -> (DDL, what the error must say)
        "f_drop": ("ALTER TABLE f_drop DROP COLUMN a", "column a of"),
        "f_type": ("ALTER TABLE f_type MODIFY a bigint", "column a of"),
        "f_dropped": ("DROP TABLE f_dropped", "no longer exists"),
    }
    renamed = {  # table -> (DDL, its name now, what its view's SQL must read now): followed, no snapshot
        "f_rename_col": ("ALTER TABLE f_rename_col RENAME COLUMN b TO bb", "f_rename_col", "`bb`"),
        "f_change_col": ("ALTER TABLE f_change_col CHANGE b b2 varchar(20)", "f_change_col", "`b2`"),
        "f_rename": ("RENAME TABLE f_rename TO f_renamed", "f_renamed", "f_renamed AS f_rename"),
        "f_alter_rename": ("ALTER TABLE f_alter_rename RENAME TO f_other", "f_other", "f_other AS f_alter_rename"),
    }
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        for table in [*failing, *renamed, "kept"]:
            cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, a int, b varchar(20), c int)")
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", [(g, g % 4, f"b{g}", g) for g in range(1, 13)])
        cur.execute("CREATE TABLE parts (id int, region int, v int, PRIMARY KEY (id, region)) "
                    "PARTITION BY RANGE (region) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN "
                    "(20), PARTITION p2 VALUES LESS THAN MAXVALUE)")
        cur.executemany("INSERT INTO parts VALUES (%s, %s, %s)", [(g, g % 25, g) for g in range(1, 40)])
        cur.execute("CREATE VIEW open_orders (oid, cust, amt) AS SELECT id, customer, amount FROM orders "
                    "WHERE status IN ('open', 'paid')")
    start_service(options=ServiceOptions(poll_s=0.05, catalog_check_s=0.3))
    views = {f"v_{t}": f"SELECT a, COUNT(*) AS n, SUM(LENGTH(b)) AS b, SUM(id) AS ids FROM {t} GROUP BY a"
             for t in [*failing, *renamed, "kept"]}
    views["v_kept_rows"] = "SELECT id, a FROM kept WHERE a > 0"
    views["v_parts"] = "SELECT region, COUNT(*) AS n, SUM(v) AS v FROM parts GROUP BY region"
    views["v_open"] = "SELECT cust, COUNT(*) AS n, SUM(amt) AS total FROM open_orders GROUP BY cust"
    create_views(shop, views)
    kept = ["v_kept", "v_kept_rows", "v_parts", "v_open"]
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        for n, ddl in enumerate([
            "ALTER TABLE kept ADD COLUMN d int",
            "ALTER TABLE kept ADD COLUMN e varchar(5) NOT NULL DEFAULT 'e'",
            "ALTER TABLE kept DROP COLUMN c",  # a column no view reads
            "ALTER TABLE kept MODIFY d bigint",
            "ALTER TABLE kept MODIFY b varchar(20) NOT NULL",
            "ALTER TABLE kept ADD CONSTRAINT a_small CHECK (a < 100)",
            "ALTER TABLE kept DROP CONSTRAINT a_small",
            "ALTER TABLE kept DROP PRIMARY KEY, ADD PRIMARY KEY (id, a)",
            "ALTER TABLE kept ADD INDEX by_a (a)",
            "ALTER TABLE parts REORGANIZE PARTITION p2 INTO (PARTITION p2 VALUES LESS THAN (30), "
            "PARTITION p3 VALUES LESS THAN MAXVALUE)",
        ]):
            cur.execute(ddl)
            cur.execute("INSERT INTO kept (id, a, b) VALUES (%s, %s, 'new')", (100 + n, n % 3))
            cur.execute("UPDATE kept SET a = a + 1, b = CONCAT(b, 'u') WHERE id = %s", (1 + n,))
            cur.execute("DELETE FROM kept WHERE id = %s", (12 - n % 5,))
            cur.execute("UPDATE parts SET region = region + 7 WHERE id = %s", (n + 1,))
        run_transactions(shop, random.Random(4), 10, [300])
        wait_until_fresh(shop, kept)
        for table, (ddl, message) in failing.items():
            cur.execute(ddl)
            if table in ("f_drop", "f_type", "f_rename_col"):
                cur.execute(f"INSERT INTO {table} (id) VALUES (99)")
            error = wait_failed(shop, f"v_{table}")
            assert message in error and error.startswith("freshview: "), (table, error)
        cur.execute("UPDATE kept SET a = 3 WHERE id < 6")
        wait_until_fresh(shop, kept)
        for table, (ddl, now, reads) in renamed.items():
            cur.execute(ddl)
            column = "bb" if "RENAME COLUMN" in ddl else "b2" if "CHANGE" in ddl else "b"
            cur.execute(f"INSERT INTO {now} (id, a, {column}) VALUES (99, 1, 'renamed')")
            cur.execute(f"UPDATE {now} SET {column} = CONCAT({column}, 'x'), a = a + 1 WHERE id < 4")
            wait_sql(shop, f"v_{table}", reads)
        wait_until_fresh(shop, [*kept, *(f"v_{t}" for t in renamed)])


def test_schema_changes_under_writes_keep_views_running_without_a_snapshot(shop, start_service):
    """Issue 24 on MariaDB: ADD COLUMN (instant, with a default) and its backfill, columns renamed (RENAME
    COLUMN, CHANGE), the table renamed, unread columns dropped and retyped: the views keep running with no
    snapshot while writes go on, their SQL rewritten; a dropped column that one view reads fails it alone."""
    from freshview.service.service import ServiceOptions

    snapshots: list[str] = []

    def start():
        return start_service(options=ServiceOptions(poll_s=0.05, catalog_check_s=0.5),
                             snapshot_progress=lambda t, d, e, f: snapshots.append(t) if f else None)

    service = start()
    views = {"totals": "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer",
             "big": "SELECT o.id, o.amount, c.region FROM orders o JOIN customers c ON o.customer = c.id "
                    "WHERE o.amount > 500",
             "by_status": "SELECT status, COUNT(*) AS n, MAX(amount) AS top FROM orders GROUP BY status"}
    create_views(shop, views)
    followed = list(snapshots)
    names = {"table": "orders", "amount": "amount"}
    go, idle, stop = threading.Event(), threading.Event(), threading.Event()
    go.set()

    def writer() -> None:
        rng, next_id = random.Random(24), [1000]
        with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
            while not stop.is_set():
                if not go.is_set():
                    idle.set()
                    go.wait(0.1)
                    continue
                idle.clear()
                table, amount = names["table"], names["amount"]
                try:
                    if rng.random() < 0.5:
                        next_id[0] += 1
                        cur.execute(f"INSERT INTO {table} (id, customer, {amount}, status) VALUES (%s, %s, %s, %s)",
                                    (next_id[0], rng.randint(1, 34), rng.randint(1, 99_999) / 100,
                                     rng.choice(STATUSES)))
                    else:
                        cur.execute(f"UPDATE {table} SET {amount} = {amount} + %s WHERE id = %s",
                                    (rng.randint(-300, 300), rng.randint(1, next_id[0])))
                except pymysql.err.MySQLError:
                    pass  # renamed meanwhile: the next write uses the new names

    def fresh(names_: list[str]) -> None:
        go.clear()
        idle.wait(10)
        try:
            wait_until_fresh(shop, names_)
        finally:
            go.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("ALTER TABLE orders ADD COLUMN extra int NOT NULL DEFAULT 7, ALGORITHM=INSTANT")
            cur.execute("UPDATE orders SET extra = id % 5")  # the backfill
            fresh(list(views))
            cur.execute("ALTER TABLE orders RENAME COLUMN amount TO amount_due")
            names["amount"] = "amount_due"
            for view in views:
                wait_sql(shop, view, "`amount_due`")
            fresh(list(views))
            cur.execute("ALTER TABLE orders CHANGE status state varchar(10) NOT NULL")
            wait_sql(shop, "by_status", "`state` AS status")
            fresh(list(views))
            cur.execute("RENAME TABLE orders TO orders_v2")
            names["table"] = "orders_v2"
            for view in views:
                wait_sql(shop, view, "orders_v2")
            fresh(list(views))
            service.stop()  # a restart keeps following the renamed table (the names kept with the engine's state)
            cur.execute("UPDATE orders_v2 SET amount_due = amount_due + 2 WHERE id < 20")
            service = start()
            cur.execute("ALTER TABLE orders_v2 DROP COLUMN note")
            cur.execute("ALTER TABLE orders_v2 MODIFY extra bigint NOT NULL")
            cur.execute("UPDATE orders_v2 SET amount_due = amount_due + 1 WHERE id < 50")
            fresh(list(views))
            assert snapshots == followed, "a rename or an unread column's change took a snapshot"
            cur.execute("TRUNCATE customers")
            cur.executemany("INSERT INTO customers VALUES (%s, %s)", [(i, "west") for i in range(1, 20)])
            fresh(list(views))
            cur.execute("ALTER TABLE orders_v2 DROP COLUMN state")
            error = wait_failed(shop, "by_status")
            assert "column state of" in error and "`ALTER TABLE orders_v2 DROP COLUMN state`" in error, error
            fresh(["totals", "big"])
    finally:
        stop.set()
        go.set()
        thread.join(10)
