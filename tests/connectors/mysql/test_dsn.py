"""mysql:// and mariadb:// DSNs."""

from __future__ import annotations

import pytest

from freshview.connectors.mysql.dsn import DsnError, is_mysql_dsn, parse_dsn


def test_parse():
    dsn = parse_dsn("mysql://freshview:s%40cret@db.example:3307/app?connect_timeout=5")
    assert dsn.connect_args() == {"host": "db.example", "port": 3307, "user": "freshview", "password": "s@cret",
                                  "database": "app", "connect_timeout": 5}
    assert parse_dsn("mariadb://admin@db/app") == parse_dsn("mysql://admin@db:3306/app")
    assert parse_dsn("mysql://db").connect_args() == {"host": "db", "port": 3306}
    assert parse_dsn("mysql://u@[::1]:3308/x").host == "::1"
    assert is_mysql_dsn("MariaDB://x") and not is_mysql_dsn("postgresql://x")


def test_the_password_is_never_shown():
    dsn = parse_dsn("mysql://freshview:hunter2@db:3306/app")
    assert "hunter2" not in repr(dsn) and "hunter2" not in dsn.redacted()
    assert dsn.redacted() == "mysql://freshview@db:3306/app"
    with pytest.raises(DsnError) as caught:
        parse_dsn("mysql://u:hunter2@db:notaport/app")
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("text, message", [
    ("postgresql://u@h/db", "scheme must be mysql:// or mariadb://"),
    ("mysql://u@h/a/b", "one database name"),
    ("mysql://u@h/db?sslmode=require", "unknown MySQL DSN parameter 'sslmode'"),
    ("mysql://u@h/db?connect_timeout=soon", "is not a number"),
])
def test_bad_dsns(text, message):
    with pytest.raises(DsnError, match=message):
        parse_dsn(text)
