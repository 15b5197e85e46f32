"""Which psycopg errors are faults, and which: the rule behind PostgreSQL's edge (``connectors.edge``).

* ``ConnectionLost`` (retry after reconnecting): errors without an SQLSTATE
  (psycopg's own: the server closed the connection, a timeout, the connection
  is closed) unless the server refused us at connect; SQLSTATE classes 08
  (connection exception), 57 (operator intervention: terminated, crash or
  admin shutdown, the server starting up; not 57014, a cancelled statement,
  which a retry would repeat), 53 (insufficient resources: too many
  connections, the server's disk full), 58 (system error); serialization
  failures, deadlocks, lock and idle timeouts (a retry succeeds), and a
  read-only server (a failover not finished).
* ``Permanent``: the server refused the connection for good -- bad
  credentials (class 28, or a connect-time FATAL such as "password
  authentication failed", "role … does not exist", "no pg_hba.conf entry"),
  the database does not exist (3D000), no CONNECT privilege ("permission
  denied for database").
* anything else is the statement's error (None): left to the caller.

A connect-time refusal carries no SQLSTATE in psycopg, only the server's
message ("FATAL:  …"); those the server sends while starting, stopping or
full are transient, every other one is permanent.
"""

from __future__ import annotations

import psycopg

from freshview.errors import ConnectionLost, Permanent

_LOST_CLASSES = ("08", "53", "57", "58")
_RETRIED = frozenset(("40001", "40P01", "55P03", "25P03", "25006"))  # (25006: read-only, a standby)
_NOT_LOST = frozenset(("57014",))  # query_canceled: statement_timeout; retrying would repeat it
_TRANSIENT_FATAL = ("starting up", "shutting down", "in recovery mode", "not yet accepting connections",
                    "not accepting connections", "too many clients", "too many connections",
                    "connection slots are reserved", "terminating connection", "out of memory")


def classify(exc: BaseException) -> ConnectionLost | Permanent | None:
    """The fault ``exc`` is (see the module docstring), or None."""
    if not isinstance(exc, psycopg.Error):
        return None
    text = " ".join(str(exc).split())
    state = getattr(exc, "sqlstate", None)
    if state is None:
        if not isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return None
        if "FATAL:" in text and not any(marker in text for marker in _TRANSIENT_FATAL):
            return Permanent(f"the database refused the connection: {text}")
        return ConnectionLost(text)
    if state.startswith("28") or state == "3D000":
        return Permanent(f"the database refused the connection: {text}")
    if state in _NOT_LOST:
        return None
    if state[:2] in _LOST_CLASSES or state in _RETRIED:
        return ConnectionLost(text)
    return None
