"""``mysql://user:password@host:port/database`` (and its synonym ``mariadb://``) → PyMySQL connect arguments.

The password is kept out of ``repr`` and of ``MySQLDsn.redacted()`` (what
logs and error messages show).  Query parameters: ``unix_socket``,
``charset``, ``connect_timeout``, ``read_timeout`` and ``write_timeout``
(seconds); anything else is refused by name.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any

SCHEMES = ("mysql", "mariadb")
DEFAULT_PORT = 3306
_QUERY = {"unix_socket": str, "charset": str, "connect_timeout": int, "read_timeout": int, "write_timeout": int}


class DsnError(ValueError):
    """A DSN that cannot be read; the message never contains the password."""


@dataclass(frozen=True)
class MySQLDsn:
    host: str
    port: int
    user: str | None
    database: str | None
    password: str | None = field(default=None, repr=False)
    options: tuple[tuple[str, Any], ...] = ()

    def connect_args(self, **extra: Any) -> dict[str, Any]:
        """Keyword arguments for ``pymysql.connect``."""
        args: dict[str, Any] = {"host": self.host, "port": self.port, **dict(self.options), **extra}
        if self.user is not None:
            args["user"] = self.user
        if self.password is not None:
            args["password"] = self.password
        if self.database is not None:
            args.setdefault("database", self.database)
        return args

    def redacted(self) -> str:
        """The DSN as it may be printed: ``mysql://user@host:port/db`` (no password)."""
        user = urllib.parse.quote(self.user, safe="") + "@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"mysql://{user}{host}:{self.port}/{self.database or ''}"


def is_mysql_dsn(dsn: str) -> bool:
    return urllib.parse.urlsplit(dsn).scheme.lower() in SCHEMES


def parse_dsn(dsn: str) -> MySQLDsn:
    """Read a ``mysql://`` or ``mariadb://`` DSN; user, password and database are percent-decoded."""
    try:
        parts = urllib.parse.urlsplit(dsn)
        port = parts.port
    except ValueError as exc:  # a bad port: the message quotes the port, not the password
        raise DsnError(f"cannot read the MySQL DSN: {exc}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise DsnError(f"not a MySQL DSN: the scheme must be mysql:// or mariadb://, not {parts.scheme or '(none)'}://")
    if parts.fragment:
        raise DsnError("a MySQL DSN has no #fragment")
    path = urllib.parse.unquote(parts.path.lstrip("/"))
    if "/" in path:
        raise DsnError(f"the DSN's path must be one database name, not {path!r}")
    options = []
    for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if name not in _QUERY:
            raise DsnError(f"unknown MySQL DSN parameter {name!r}; known: {', '.join(sorted(_QUERY))}")
        try:
            options.append((name, _QUERY[name](value)))
        except ValueError:
            raise DsnError(f"MySQL DSN parameter {name}={value!r} is not a number") from None
    unquote = urllib.parse.unquote
    return MySQLDsn(
        host=parts.hostname or "localhost",
        port=port or DEFAULT_PORT,
        user=unquote(parts.username) if parts.username else None,
        database=path or None,
        password=unquote(parts.password) if parts.password is not None else None,
        options=tuple(options),
    )


__all__ = ["MySQLDsn", "DsnError", "parse_dsn", "is_mysql_dsn", "SCHEMES"]
