"""Which PyMySQL errors are faults, and which: the rule behind MySQL/MariaDB's edge (``connectors.edge``).

* ``ConnectionLost`` (retry after reconnecting): the client's connection
  errors (2002/2003 cannot connect, 2006 gone away, 2013 lost during a query,
  2055 lost at the handshake), the server shutting down (1053), the
  connection killed (1927) or timed out (4031), too many connections (1040),
  network read/write errors (1158-1161), a lock wait timeout or deadlock (a
  retry succeeds), a read-only server (1290, a failover not finished); and
  ``InterfaceError`` -- PyMySQL's answer to any use of a connection it
  closed after an error, the ``(0, '')`` that would otherwise hide the
  error that closed it.
* ``Permanent``: access denied (1044, 1045, 1698: bad credentials or no
  rights on the database), the database does not exist (1049), the host not
  allowed (1130) or blocked (1129).
* anything else is the statement's error (None): left to the caller.

``rollback_quietly`` is how cleanup after a failure talks to a connection
that may be dead: it never raises over the error being handled.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pymysql

from freshview.errors import ConnectionLost, Permanent

LOST = frozenset((1040, 1053, 1158, 1159, 1160, 1161, 1205, 1213, 1290, 1927, 2002, 2003, 2006, 2013, 2055, 4031))
PERMANENT = frozenset((1044, 1045, 1049, 1129, 1130, 1698))


def classify(exc: BaseException) -> ConnectionLost | Permanent | None:
    """The fault ``exc`` is (see the module docstring), or None."""
    if isinstance(exc, pymysql.err.InterfaceError):
        return ConnectionLost(f"the connection is closed ({exc})")
    if isinstance(exc, (ConnectionError, TimeoutError)):  # a socket error the driver did not wrap
        return ConnectionLost(str(exc) or type(exc).__name__)
    if not isinstance(exc, pymysql.err.MySQLError):
        return None
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    text = " ".join(str(exc.args[1] if len(exc.args) > 1 else exc).split())
    if code in PERMANENT:
        return Permanent(f"the database refused the connection: ({code}) {text}")
    if code in LOST:
        return ConnectionLost(f"({code}) {text}")
    return None


def rollback_quietly(conn: Any) -> None:
    """Roll back the connection's transaction if it can; a dead connection has none left to roll back
    (the server ends it), and the error that killed it is the one to report."""
    with contextlib.suppress(pymysql.err.MySQLError, OSError):
        conn.rollback()
