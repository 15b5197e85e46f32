"""The API demo: an e-commerce flow kept fresh step by step, shown live in the terminal.

It needs nothing but this package: local Spark, state in a temporary
directory.  Sources are loaded with a progress bar, three views are
registered (one over another), then random transactions are ticked in and a
dashboard shows each view's rows, the last step's time and changes per second.
"""

from __future__ import annotations

import decimal
import time

import numpy as np
import pyarrow as pa
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

REGIONS = ["EMEA", "AMER", "APAC", "LATAM", "ANZ"]
STATUSES = ["open", "paid", "shipped", "returned"]
VIEWS = {
    "revenue_by_customer": "SELECT o_customer, COUNT(*) AS orders, SUM(o_amount) AS revenue, "
                           "MAX(o_amount) AS biggest FROM orders WHERE o_status <> 'returned' GROUP BY o_customer",
    "revenue_by_region": "SELECT c_region, COUNT(*) AS customers, SUM(revenue) AS revenue "
                         "FROM revenue_by_customer JOIN customers ON o_customer = c_id GROUP BY c_region",
    "monthly_status": "SELECT date_trunc('month', o_date) AS month, o_status, COUNT(*) AS n, AVG(o_amount) AS avg_amount "
                      "FROM orders GROUP BY date_trunc('month', o_date), o_status",
}


def _orders(rng: np.random.Generator, ids: np.ndarray, n_customers: int) -> pa.Table:
    n = len(ids)
    cents = rng.integers(100, 100_000, n)
    days = rng.integers(0, 3 * 365, n)
    base = np.datetime64("2024-01-01")
    return pa.table({
        "o_id": pa.array(ids, pa.int64()),
        "o_customer": pa.array(rng.integers(1, n_customers + 1, n), pa.int32()),
        "o_date": pa.array((base + days.astype("timedelta64[D]")).astype("datetime64[D]"), pa.date32()),
        "o_status": pa.array(rng.choice(STATUSES, n)),
        "o_amount": pa.array([decimal.Decimal(int(c)).scaleb(-2) for c in cents], pa.decimal128(12, 2)),
    })


def run_demo(duration: float, n_orders: int, changes_per_step: int, state_dir: str | None) -> None:
    console = Console()
    console.print("[bold]freshview API demo[/bold]: starting Spark (local[*]) ...")
    from freshview import IncrementalFlow

    flow = IncrementalFlow(state_dir=state_dir)
    rng = np.random.default_rng(7)
    n_customers = max(n_orders // 20, 10)
    try:
        flow.register_source("customers", "c_id INT, c_name TEXT, c_region TEXT", primary_key=["c_id"])
        flow.register_source("orders", "o_id BIGINT, o_customer INT, o_date DATE, o_status TEXT, "
                             "o_amount NUMERIC(12,2)", primary_key=["o_id"])
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"),
                      TimeElapsedColumn(), console=console) as progress:
            task = progress.add_task("loading customers", total=n_customers)
            ids = np.arange(1, n_customers + 1)
            flow.tick("customers", pa.table({
                "c_id": pa.array(ids, pa.int32()),
                "c_name": pa.array([f"customer {i}" for i in ids]),
                "c_region": pa.array(rng.choice(REGIONS, n_customers)),
                "_weight": pa.array(np.ones(n_customers, dtype=np.int64)),
            }))
            progress.update(task, completed=n_customers)
            task = progress.add_task("loading orders", total=n_orders)
            chunk = 50_000
            for start in range(0, n_orders, chunk):
                batch = _orders(rng, np.arange(start + 1, min(start + chunk, n_orders) + 1), n_customers)
                flow.tick("orders", batch.append_column("_weight", pa.array(np.ones(batch.num_rows, np.int64))))
                progress.update(task, completed=min(start + chunk, n_orders))
            task = progress.add_task("computing views", total=len(VIEWS))
            for name, sql in VIEWS.items():
                flow.register_view(name, sql)
                progress.advance(task)

        book = OrderBook(rng, n_customers, next_id=n_orders + 1)
        book.remember_range(1, n_orders, flow)
        steps, rows_total, started = 0, 0, time.perf_counter()
        with Live(console=console, refresh_per_second=4) as live:
            while duration <= 0 or time.perf_counter() - started < duration:
                last = flow.tick("orders", book.random_step(changes_per_step))
                steps += 1
                rows_total += last.rows_in
                live.update(_dashboard(flow, last, steps, rows_total, time.perf_counter() - started))
        kept = f"; state kept in {state_dir}" if state_dir else ""
        console.print(f"done: {steps} steps, {rows_total:,} row changes{kept}")
    except KeyboardInterrupt:
        console.print("stopped.")
    finally:
        flow.close()


class OrderBook:
    """The demo's own copy of the orders, so it can delete and update real rows."""

    def __init__(self, rng: np.random.Generator, n_customers: int, next_id: int) -> None:
        self.rng = rng
        self.n_customers = n_customers
        self.next_id = next_id
        self.rows: dict[int, dict] = {}
        self.ids: list[int] = []

    def remember_range(self, first: int, last: int, flow) -> None:
        snapshot = flow.snapshot("orders")
        for row in snapshot.to_pylist():
            self.rows[row["o_id"]] = row
        self.ids = list(self.rows)

    def random_step(self, n: int) -> pa.Table:
        """A third inserts, a third deletes, a third updates (old row -1, new row +1)."""
        n_ins = max(n // 3, 1)
        new = _orders(self.rng, np.arange(self.next_id, self.next_id + n_ins), self.n_customers)
        self.next_id += n_ins
        out_rows = [dict(r, _weight=1) for r in new.to_pylist()]
        for _ in range(min(n // 3, len(self.ids) - 1)):
            victim = self.ids.pop(int(self.rng.integers(0, len(self.ids))))
            out_rows.append(dict(self.rows.pop(victim), _weight=-1))
        for _ in range(n - 2 * (n // 3)):
            oid = self.ids[int(self.rng.integers(0, len(self.ids)))]
            old = self.rows[oid]
            updated = dict(old, o_status=str(self.rng.choice(STATUSES)),
                           o_amount=(old["o_amount"] + decimal.Decimal(int(self.rng.integers(-500, 500))).scaleb(-2)))
            if any(r["o_id"] == oid and r["_weight"] != 0 for r in out_rows):
                continue
            out_rows += [dict(old, _weight=-1), dict(updated, _weight=1)]
            self.rows[oid] = updated
        for r in new.to_pylist():
            self.rows[r["o_id"]] = r
            self.ids.append(r["o_id"])
        schema = new.schema.append(pa.field("_weight", pa.int64()))
        return pa.Table.from_pylist(out_rows, schema=schema)


def _dashboard(flow, last, steps: int, rows_total: int, elapsed: float):
    table = Table(title="views", expand=True)
    table.add_column("view")
    table.add_column("rows", justify="right")
    table.add_column("last step rows out", justify="right")
    table.add_column("last step ms", justify="right")
    for name in flow.views:
        info = last.views.get(name)
        table.add_row(name, f"{flow.snapshot(name).num_rows:,}",
                      str(info.rows_out if info else 0), f"{info.duration_ms:.0f}" if info and not info.skipped else "-")
    head = (f"step {last.step}  |  {last.rows_in} changes in {last.duration_ms:.0f} ms  |  "
            f"{steps} steps, {rows_total / max(elapsed, 1e-9):,.0f} changes/s")
    return Panel(Group(head, table), title="freshview demo (Ctrl-C to stop)")
