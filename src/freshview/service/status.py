"""What ``freshview status`` reports: the service, its replication slot, every view.

The service's own line comes from its row in ``freshview.progress``: the
status it last wrote (``running``, ``rebuilding``, ``state disk full`` while a
full state directory pauses stepping, ``stopped``) and how old its heartbeat
is (one a second).  A stale heartbeat means the service is not running or
cannot reach the database (``describe``; the service's log says which, and
since when).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import psycopg

from freshview.connectors.postgres import control


@dataclass
class Status:
    service: dict[str, Any]
    slot: dict[str, Any] | None
    views: list[dict[str, Any]] = field(default_factory=list)


_SLOT = """
SELECT slot_name, active, wal_status,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint AS retained_wal_bytes,
       pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint AS unconfirmed_bytes,
       safe_wal_size
FROM pg_replication_slots WHERE slot_name = %s
"""


def read_status(conn: psycopg.Connection, dsn: str) -> Status:
    if not control.is_installed(conn):
        raise control_missing()
    slot = control.slot_name(dsn)
    cur = conn.execute("SELECT status, lsn::text, steps, changes, lag_ms, changes_per_s, "
                       "extract(epoch FROM now() - heartbeat_at) AS heartbeat_age_s, updated_at "
                       "FROM freshview.progress WHERE slot = %s", (slot,))
    row = cur.fetchone()
    service = dict(zip([d.name for d in cur.description], row)) if row else {"status": "never started"}
    service["status"] = describe(service)
    cur = conn.execute(_SLOT, (slot,))
    slot_row = cur.fetchone()
    slot_info = dict(zip([d.name for d in cur.description], slot_row)) if slot_row else None
    cur = conn.execute("SELECT name, status, phase, rows_read, rows_total, elapsed_s, rows, lag_ms, "
                       "changes_applied, last_lsn::text, error, created_at, updated_at "
                       "FROM freshview.views ORDER BY name")
    names = [d.name for d in cur.description]
    return Status(service, slot_info, [dict(zip(names, r)) for r in cur.fetchall()])


STALE_HEARTBEAT_S = 10.0  # the service beats once a second: this much older, it is not there


def describe(service: dict[str, Any]) -> str:
    """The service's status as ``freshview status`` shows it, from its progress row (``status``,
    ``heartbeat_age_s``, ``updated_at``: the last step)."""
    status = str(service.get("status") or "never started")
    if status in ("stopped", "never started"):
        return status
    age = service.get("heartbeat_age_s")
    if age is None or float(age) > STALE_HEARTBEAT_S:
        seen = "no heartbeat yet" if age is None else f"last heartbeat {float(age):.0f} s ago"
        return f"not running, or cannot reach the database ({seen})"
    if status == "state disk full":
        last = service.get("updated_at")
        when = f" since {last:%Y-%m-%d %H:%M:%S}" if isinstance(last, dt.datetime) else ""
        return f"paused: its state directory is full (no step committed{when}); it resumes when there is room"
    return status


def view_status(view: dict[str, Any]) -> str:
    """A view's status as ``freshview status`` shows it: a populating (or rebuilding) one with its phase
    and progress; an active one being altered (``alter_view``: a phase on an active view) likewise."""
    status = str(view.get("status") or "-")
    if status not in ("populating", "rebuilding", "active") or not view.get("phase"):
        return status
    if status == "active":
        status = "active, altering"
    read = view.get("rows_read") or 0
    total = view.get("rows_total")
    elapsed = view.get("elapsed_s")
    return (f"{status}: {view['phase']}, {read} rows read" + (f" of ~{total}" if total else "")
            + (f", {float(elapsed):.0f} s" if elapsed is not None else ""))


def retained_wal_bytes(conn: psycopg.Connection, slot: str) -> int | None:
    """WAL the slot keeps on the server, in bytes (None: no such slot)."""
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots "
                       "WHERE slot_name = %s", (slot,)).fetchone()
    return None if row is None else row[0]


def control_missing() -> Exception:
    from freshview.errors import CatalogError

    return CatalogError("the freshview schema is missing in this database: run `freshview setup` first")


def format_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"
