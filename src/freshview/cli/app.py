"""The ``freshview`` command: setup, run, status, demo.

Every command that talks to a database takes ``--dsn`` or reads
``FRESHVIEW_DSN``; a DSN is shown only with its password removed.
"""

from __future__ import annotations

import logging
import signal
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="freshview: incremental materialized views for PostgreSQL, on Apache Spark.")
console = Console(stderr=True)

DSN_HELP = ("PostgreSQL connection string, or mysql://user:password@host:port/database (also mariadb://) "
            "(or set FRESHVIEW_DSN).")


def _is_mysql(dsn: str) -> bool:
    from freshview.connectors.mysql.dsn import is_mysql_dsn

    return is_mysql_dsn(dsn)


def redact(dsn: str) -> str:
    """The DSN without its password, for messages and logs."""
    import psycopg.conninfo

    if _is_mysql(dsn):
        from freshview.cli import mysql

        return mysql.redact(dsn)
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except Exception:
        return "<unparsable DSN>"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**params) or "(defaults)"


def _require_dsn(dsn: Optional[str]) -> str:
    if not dsn:
        console.print("[red]no database given[/]: pass --dsn or set FRESHVIEW_DSN")
        raise typer.Exit(2)
    return dsn


def _connect(dsn: str):
    import psycopg

    try:
        return psycopg.connect(dsn, autocommit=True)
    except psycopg.Error as exc:
        console.print(f"[red]cannot connect to {redact(dsn)}[/]: {str(exc).strip()}")
        raise typer.Exit(1)


@app.command()
def setup(
    dsn: Optional[str] = typer.Option(None, envvar="FRESHVIEW_DSN", help=DSN_HELP),
    role: str = typer.Option("freshview", help="Name of the role (MySQL: user) the service runs as."),
    account_host: str = typer.Option("%", help="MySQL/MariaDB: the host part of the service's account."),
    apply_role: bool = typer.Option(False, "--apply-role", help="Create the role and grant its privileges now."),
    tables: list[str] = typer.Option([], "--table", help="Publish this table now (repeatable); lets a "
                                     "least-privilege service follow tables it does not own."),
    full: list[str] = typer.Option([], "--replica-identity-full", help="Set REPLICA IDENTITY FULL on this table "
                                   "(repeatable): for tables without a primary key."),
) -> None:
    """Install the freshview schema and publication; check settings; print the role it needs."""
    from freshview.errors import FreshviewError
    from freshview.service.setup import setup as run_setup

    dsn = _require_dsn(dsn)
    if _is_mysql(dsn):
        from freshview.cli import mysql

        return mysql.setup(dsn, role, account_host)
    with _connect(dsn) as conn:
        try:
            report = run_setup(conn, role=role, publish=tables, full_identity=full, apply_role=apply_role)
        except FreshviewError as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(1)
    out = Console()
    out.print(f"[green]freshview schema and publication installed[/] in {redact(dsn)}")
    for line in report.applied:
        out.print(f"  applied: {line}", markup=False, soft_wrap=True)
    for problem in report.problems:
        out.print("problem: " + problem, style="red", markup=False, soft_wrap=True)
    for advice in report.advice:
        out.print("advice: " + advice, style="yellow", markup=False, soft_wrap=True)
    if report.tables:
        table = Table(title="Tables and their REPLICA IDENTITY", show_lines=False)
        for col in ("table", "followable", "what it costs"):
            table.add_column(col)
        for t in report.tables:
            table.add_row(t.name, "yes" if t.followable else "[red]no[/]", t.verdict)
        out.print(table)
    out.print("\nThe service's least-privilege role (REPLICATION, SELECT on published tables, owner of "
              "its result tables):" + ("  [green]applied[/]" if apply_role else ""))
    for statement in report.role_sql:
        out.print(f"  {statement};", markup=False, soft_wrap=True)
    out.print("  -- then set its password, e.g. \\password " + role)
    out.print("Tables a view reads are added to the publication by the service when it may; otherwise "
              "publish them here with --table.")
    if report.problems:
        raise typer.Exit(1)


class Execution(str, Enum):
    auto = "auto"
    spark = "spark"
    local = "local"


@app.command()
def run(
    dsn: Optional[str] = typer.Option(None, envvar="FRESHVIEW_DSN", help=DSN_HELP),
    state_dir: Optional[Path] = typer.Option(None, help="Where the engine keeps its state "
                                             "(default: ~/.local/state/freshview/<slot>)."),
    execution: Execution = typer.Option(Execution.auto, help="How the engine runs steps: auto chooses per step "
                                        "(small ones in-process, large ones on Spark), spark or local always."),
    quiet: bool = typer.Option(False, "--quiet", help="Log warnings and errors only."),
    verbose: bool = typer.Option(False, "--verbose", help="Log every step."),
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Serve Prometheus metrics on this "
                                               "port (/metrics): per view lag, steps, rows, step time; WAL kept."),
    metrics_addr: str = typer.Option("0.0.0.0", "--metrics-addr", help="Address the metrics endpoint listens on."),
    verify_every: Optional[str] = typer.Option(None, "--verify-every", help="Verify every view against its SQL "
                                               "this often (e.g. 1h, 30min), staggered over the period; results in "
                                               "freshview.views (verified_at, verify_result, verify_detail) and the "
                                               "metrics."),
) -> None:
    """Run the service in the foreground: follow changes, keep every view fresh (SIGTERM stops it).

    It rides out what passes (the database restarting, a connection killed, the network down, a full
    state directory) and exits, with one line `freshview stopped: <reason>` and status 1, only for what
    a restart cannot fix.  freshview's own lines go to the terminal; tracebacks, library warnings, Spark's
    and the JVM's output go to <state-dir>/freshview.log (printed at start)."""
    from freshview.cli.logs import LOG_NAME, route_output
    from freshview.connectors.postgres import control

    dsn = _require_dsn(dsn)
    if _is_mysql(dsn):
        from freshview.cli.mysql import state_name
    else:
        state_name = control.slot_name
    directory = state_dir or Path.home() / ".local" / "state" / "freshview" / state_name(dsn)
    directory.mkdir(parents=True, exist_ok=True)
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    with route_output(directory / LOG_NAME, console, level) as log_path:
        console.print(f"logs: {log_path}", markup=False, highlight=False, soft_wrap=True)
        _run_service(dsn, directory, execution, quiet, metrics_port, metrics_addr, log_path, verify_every)


def _run_service(dsn: str, directory: Path, execution: "Execution", quiet: bool, metrics_port: Optional[int],
                 metrics_addr: str, log_path: Path, verify_every: Optional[str] = None) -> None:
    from freshview.errors import FreshviewError
    from freshview.service import verify
    from freshview.service.service import Service, ServiceOptions

    try:
        every = verify.every(verify_every) if verify_every is not None else None
    except FreshviewError as exc:
        console.print(f"freshview: {exc}", style="red", markup=False, highlight=False)
        raise typer.Exit(2)

    progress = _SnapshotBars(enabled=not quiet)
    metrics = None
    if metrics_port is not None:
        from freshview.service.metrics import ServiceMetrics

        metrics = ServiceMetrics()
        try:
            metrics.serve(metrics_port, addr=metrics_addr)
        except OSError as exc:
            console.print(f"[red]cannot serve metrics on {metrics_addr}:{metrics_port}[/]: {exc}")
            raise typer.Exit(2)
        logging.getLogger("freshview").info("Prometheus metrics on http://%s:%d/metrics", metrics_addr, metrics_port)
    service = Service(dsn, directory, snapshot_progress=progress,
                      options=ServiceOptions(execution=execution.value, verify_every_s=every), metrics=metrics)

    def stop(signum, _frame):
        logging.getLogger("freshview").info("signal %s: stopping after the current step", signum)
        service.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logging.getLogger("freshview").info("freshview service for %s, state in %s", redact(dsn), directory)
    try:
        service.run()
    except Exception as exc:  # whatever ended it: one line here, the traceback in the log file
        reason = " ".join(str(exc).split())
        if not isinstance(exc, FreshviewError):
            reason = f"{type(exc).__name__}: {reason} (traceback in {log_path})"
        logging.getLogger("freshview").error("freshview stopped: %s", reason, exc_info=exc,
                                             extra={"file_only": True})
        progress.close()
        console.print(f"freshview stopped: {reason}", style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    finally:
        progress.close()


@app.command()
def status(
    dsn: Optional[str] = typer.Option(None, envvar="FRESHVIEW_DSN", help=DSN_HELP),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show the service, its replication slot (WAL it retains) and every view."""
    import json

    from freshview.errors import FreshviewError
    from freshview.service.status import format_bytes, read_status, view_status

    dsn = _require_dsn(dsn)
    if _is_mysql(dsn):
        from freshview.cli import mysql

        return mysql.status(dsn, as_json)
    with _connect(dsn) as conn:
        try:
            st = read_status(conn, dsn)
        except FreshviewError as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(1)
    if as_json:
        print(json.dumps({"service": st.service, "slot": st.slot, "views": st.views}, default=str, indent=2))
        return
    out = Console()
    s = st.service
    out.print(f"service: [bold]{s.get('status')}[/]  position {s.get('lsn', '-')}  steps {s.get('steps', 0)}  "
              f"changes {s.get('changes', 0)}  lag {_ms(s.get('lag_ms'))}  "
              f"{s.get('changes_per_s') or 0:.0f} changes/s")
    if st.slot:
        out.print(f"slot {st.slot['slot_name']}: active={st.slot['active']} wal_status={st.slot['wal_status']} "
                  f"retained WAL {format_bytes(st.slot['retained_wal_bytes'])}, not yet confirmed "
                  f"{format_bytes(st.slot['unconfirmed_bytes'])}"
                  + (f", {format_bytes(st.slot['safe_wal_size'])} until invalidation"
                     if st.slot.get("safe_wal_size") is not None else ""))
    else:
        out.print("slot: none yet (created when the service first runs)")
    table = Table(title="views")
    for col in ("name", "status", "rows", "lag", "last LSN", "error"):
        table.add_column(col)
    for v in st.views:
        table.add_row(v["name"], view_status(v), str(v["rows"] if v["rows"] is not None else "-"), _ms(v["lag_ms"]),
                      v["last_lsn"] or "-", (v["error"] or "")[:120])
    out.print(table)


@app.command()
def demo(
    duration: float = typer.Option(60.0, help="Seconds to run the workload (0 = until Ctrl-C)."),
    orders: int = typer.Option(250_000, help="Orders in the sample shop (with ~3 items each: ~1M rows in all)."),
    rate: float = typer.Option(200.0, help="Target source transactions per second."),
    data_dir: Optional[Path] = typer.Option(None, help="Keep the embedded database here (default: temporary)."),
    mysql: bool = typer.Option(False, "--mysql", help="Run it on a throwaway MariaDB (the machine's mariadbd) "
                                                      "instead of the embedded PostgreSQL."),
) -> None:
    """The live demo: embedded PostgreSQL (or MariaDB), sample shop, views created with CALL, a live dashboard.

    Library and server output goes to a log file (printed at start)."""
    import tempfile

    from freshview.cli.demo import run_demo
    from freshview.cli.logs import route_output
    from freshview.errors import FreshviewError
    from freshview.service.embedded import PostgresError
    from freshview.service.embedded_mariadb import MariaDBError

    log_path = (data_dir / "freshview.log") if data_dir else Path(tempfile.gettempdir()) / "freshview-demo.log"
    with route_output(log_path, console, logging.WARNING):  # the dashboard says what the service does
        console.print(f"logs: {log_path}", markup=False, highlight=False, soft_wrap=True)
        try:
            run_demo(duration=duration, n_orders=orders, rate=rate, data_dir=data_dir, mysql=mysql)
        except (FreshviewError, PostgresError, MariaDBError) as exc:  # no server binaries, a server that fails
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(1)


@app.command()
def version() -> None:
    """Print freshview's version."""
    import freshview

    typer.echo(freshview.__version__)


def _ms(value) -> str:
    return "-" if value is None else f"{value:.0f} ms"


class _SnapshotBars:
    """Rich progress bars for tables being snapshotted (one bar per table while it loads)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.progress = None
        self.tasks: dict[str, int] = {}

    def __call__(self, table: str, done: int, estimate: int | None, finished: bool) -> None:
        if not self.enabled:
            if finished:
                logging.getLogger("freshview").info("snapshot of %s: %d rows", table, done)
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if self.progress is None:
            self.progress = Progress(TextColumn("snapshot {task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=console, transient=False)
            self.progress.start()
        if table not in self.tasks:
            self.tasks[table] = self.progress.add_task(table, total=estimate)
        self.progress.update(self.tasks[table], completed=done, total=done if finished else estimate)
        if finished:
            self.tasks.pop(table)
            if not self.tasks:
                self.close()

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


from freshview.cli.pipeline import app as _pipeline_app  # noqa: E402

app.add_typer(_pipeline_app, name="pipeline")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
