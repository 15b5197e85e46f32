"""One exception tree for everything freshview raises on purpose.

SQL errors carry where in the view's text the problem is (line, column and a
caret under the offending construct) so that a user sees "GROUP BY ... ROLLUP
is not supported at line 3, column 12", never a Spark stack trace.
"""

from __future__ import annotations

from dataclasses import dataclass


class FreshviewError(Exception):
    """Base class of every error freshview raises deliberately.

    ``view`` and ``source`` name what a failed step blames, when one is to blame: the view whose
    operator raised it, or the source whose change was refused (set by the engine, ``runtime.engine``;
    the service stops that view, or the views reading that source)."""

    view: str | None = None
    source: str | None = None


class SchemaError(FreshviewError):
    """A source schema, a delta or a type is malformed."""


class DeltaError(FreshviewError):
    """A delta given to ``tick`` does not fit its source (columns, weights, keys)."""


class CatalogError(FreshviewError):
    """A source or view name is unknown, taken, or its definition conflicts."""


class StateError(FreshviewError):
    """The state directory is unreadable or belongs to an incompatible flow."""


class ExecutionError(FreshviewError):
    """A step failed while running (e.g. division by zero); the step was rolled back."""


class ExecutorEnvironmentError(FreshviewError):
    """A cluster's executors cannot run freshview's code: a package missing or too old on the worker nodes."""


# ---------------------------------------------------------------------- connectors
# What a connector (``freshview.connectors``) says about its database's changes and stream.


class ChangeError(FreshviewError):
    """A change freshview cannot turn into a correct delta (a missing old row, an unknown table, a column
    gone ...); ``table``: the source table (schema-qualified) whose changes are unusable, when one is."""

    def __init__(self, message: str, table: str | None = None) -> None:
        super().__init__(message)
        self.table = table


class StreamError(FreshviewError):
    """The change stream broke (connection lost ...): reconnect from the position acknowledged."""


class PositionLost(StreamError):
    """The source can no longer deliver changes from the stored position (PostgreSQL: the slot is
    invalidated or gone; MariaDB: the binlog was purged): every view is rebuilt from a new snapshot."""


class SinkError(FreshviewError):
    """A view's result table refused the step's rows: it was changed by hand (a constraint or a trigger that
    rejects them, a column dropped or retyped, the table dropped).  ``table``: the result table (qualified);
    that view stops with status ``sink error`` and is rebuilt into its table later, the others go on."""

    def __init__(self, message: str, table: str) -> None:
        super().__init__(message)
        self.table = table


class UnsupportedTypeError(CatalogError):
    """A source column whose type freshview does not maintain."""


# ---------------------------------------------------------------------- faults
# Failures of what freshview runs on (the database, the network, the disk), not of its input.
# Connectors and the state store raise these, mapping their drivers' and the OS's errors (the
# driver's classes never reach the service); ``service.outage`` decides what the service does.


class Fault(FreshviewError):
    """Something freshview depends on failed: the database, the connection to it, the state disk."""


class Transient(Fault):
    """A fault that passes: retried (with back-off), the same work succeeds later."""


class ConnectionLost(Transient):
    """A connection to the database broke, timed out or could not be opened: the server restarts or
    fails over, the connection was killed, the network is down.  Nothing the failed call did counts
    unless the database says so (positions are read back after reconnecting)."""


class DiskFull(Transient, StateError):
    """The state directory has no space left (ENOSPC, EDQUOT); the commit that hit it did not happen."""


class Permanent(Fault):
    """A fault a restart cannot fix: the database refuses the credentials, the database is gone, the
    state directory was written by a newer freshview."""


class StateTooNew(Permanent, StateError):
    """The state directory holds state of a newer format than this freshview reads (kept as it is)."""


class StateInUse(Permanent, StateError):
    """Another process has the state directory open (its lock is held): never touched."""


@dataclass
class SqlLocation:
    line: int
    column: int
    snippet: str = ""

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}"


class SqlError(FreshviewError):
    """A view's SQL is invalid or uses something freshview cannot maintain."""

    def __init__(self, message: str, location: SqlLocation | None = None, sql: str | None = None):
        self.message = message
        self.location = location
        self.sql = sql
        super().__init__(self._render())

    def _render(self) -> str:
        if self.location is None:
            return self.message
        text = f"{self.message} (at {self.location})"
        if self.sql:
            lines = self.sql.splitlines() or [self.sql]
            if 1 <= self.location.line <= len(lines):
                src = lines[self.location.line - 1]
                caret = " " * max(self.location.column - 1, 0) + "^"
                text += f"\n  {src}\n  {caret}"
        return text


class UnsupportedSqlError(SqlError):
    """A construct that freshview does not (yet) maintain incrementally."""


class UnknownTableError(SqlError):
    """A table or view name that is neither a registered source nor a view."""


class UnknownColumnError(SqlError):
    """A column reference that no table in scope provides (or several do)."""


class SqlTypeError(SqlError):
    """An expression whose operand types do not fit (e.g. SUM of text)."""
