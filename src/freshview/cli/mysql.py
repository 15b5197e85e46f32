"""``freshview setup`` and ``freshview status`` for ``mysql://`` / ``mariadb://`` DSNs (``freshview run``
needs nothing of its own: ``Service`` picks the connector).  Printing only: the checks, GRANTs and
status come from ``connectors.mysql`` (``setup``, ``control.read_status``).  No password is printed."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

console = Console(stderr=True)


def redact(dsn: str) -> str:
    from freshview.connectors.mysql.dsn import DsnError, parse_dsn

    try:
        return parse_dsn(dsn).redacted()
    except DsnError:
        return "<unparsable DSN>"


def state_name(dsn: str) -> str:
    """The default state directory's name: ``mysql_<host>_<port>_<database>``."""
    from freshview.connectors.mysql.dsn import parse_dsn

    parsed = parse_dsn(dsn)
    return "".join(ch if ch.isalnum() else "_" for ch in f"mysql_{parsed.host}_{parsed.port}_{parsed.database}")


def connect(dsn: str) -> Any:
    import pymysql

    from freshview.connectors.mysql.dsn import DsnError, parse_dsn

    try:
        parsed = parse_dsn(dsn)
        return pymysql.connect(**parsed.connect_args(), autocommit=True, charset="utf8mb4")
    except DsnError as exc:
        console.print(f"[red]{exc}[/]")
    except pymysql.err.MySQLError as exc:
        console.print(f"[red]cannot connect to {redact(dsn)}[/]: {exc}")
    raise typer.Exit(1)


def setup(dsn: str, user: str, host: str) -> None:
    import pymysql

    from freshview.connectors.mysql.setup import setup as run_setup

    conn = connect(dsn)
    try:
        report = run_setup(conn, user=user, host=host)
    except (ValueError, pymysql.err.MySQLError) as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1)
    finally:
        conn.close()
    out = Console()
    version = ".".join(map(str, report.server.version))
    out.print(f"[green]freshview database installed[/] on {redact(dsn)} ({report.server.flavour} {version})")
    for problem in report.problems:
        out.print("problem: " + problem, style="red", markup=False, soft_wrap=True)
    for advice in report.advice:
        out.print("advice: " + advice, style="yellow", markup=False, soft_wrap=True)
    out.print("\nThe service's least-privilege account (REPLICATION SLAVE reveals every table's row images "
              "in the binlog):")
    for statement in report.grants:
        out.print(f"  {statement};", markup=False, soft_wrap=True)
    out.print("\nUsers who create and drop views from SQL need only:")
    for statement in report.user_grants:
        out.print(f"  {statement};", markup=False, soft_wrap=True)
    if report.problems:
        raise typer.Exit(1)


def status(dsn: str, as_json: bool) -> None:
    from freshview.connectors.mysql import control
    from freshview.connectors.mysql.dsn import parse_dsn
    from freshview.service.status import describe, view_status

    conn = connect(dsn)
    try:
        if not control.is_installed(conn):
            console.print("[red]the freshview database is missing on this server: run `freshview setup` first[/]")
            raise typer.Exit(1)
        service, views = control.read_status(conn, parse_dsn(dsn).database or "")
    finally:
        conn.close()
    service["status"] = describe(service)
    if as_json:
        print(json.dumps({"service": service, "views": views}, default=str, indent=2))
        return
    out = Console()
    lag = service.get("lag_ms")
    out.print(f"service: [bold]{service.get('status')}[/]  position {service.get('position') or '-'}  "
              f"steps {service.get('steps', 0)}  changes {service.get('changes', 0)}  "
              f"lag {'-' if lag is None else f'{lag:.0f} ms'}")
    table = Table(title="views")
    for col in ("name", "status", "rows", "lag", "position", "error"):
        table.add_column(col)
    for v in views:
        table.add_row(v["name"], view_status(v), "-" if v["rows"] is None else str(v["rows"]),
                      "-" if v["lag_ms"] is None else f"{v['lag_ms']:.0f} ms", v["position"] or "-",
                      (v["error"] or "")[:120])
    out.print(table)
