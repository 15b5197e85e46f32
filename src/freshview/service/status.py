"""What ``freshview status`` reports: the service, its replication slot, every view."""

from __future__ import annotations

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
    if row and service["status"] != "stopped" and (service["heartbeat_age_s"] or 1e9) > 10:
        service["status"] = f"not running (last heartbeat {service['heartbeat_age_s']:.0f} s ago)"
    cur = conn.execute(_SLOT, (slot,))
    slot_row = cur.fetchone()
    slot_info = dict(zip([d.name for d in cur.description], slot_row)) if slot_row else None
    cur = conn.execute("SELECT name, status, rows, lag_ms, last_lsn::text, error, updated_at "
                       "FROM freshview.views ORDER BY name")
    names = [d.name for d in cur.description]
    return Status(service, slot_info, [dict(zip(names, r)) for r in cur.fetchall()])


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
