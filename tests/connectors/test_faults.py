"""The connectors' edge: which driver errors are faults (and which), raised as freshview's own classes."""

from __future__ import annotations

import contextlib

import psycopg
import pymysql
import pytest

from freshview.connectors.edge import guarded
from freshview.connectors.mysql import faults as mysql_faults
from freshview.connectors.postgres import faults as pg_faults
from freshview.errors import ConnectionLost, Permanent

lookup = psycopg.errors.lookup


@pytest.mark.parametrize("exc, kind", [
    (psycopg.OperationalError("server closed the connection unexpectedly"), ConnectionLost),
    (psycopg.OperationalError("the connection is closed"), ConnectionLost),
    (psycopg.OperationalError('connection failed: connection to server at "127.0.0.1", port 5 failed: '
                              "Connection refused"), ConnectionLost),
    (psycopg.OperationalError("connection failed: FATAL:  the database system is starting up"), ConnectionLost),
    (psycopg.OperationalError("connection failed: FATAL:  sorry, too many clients already"), ConnectionLost),
    (lookup("57P01")("terminating connection due to administrator command"), ConnectionLost),
    (lookup("57P02")("terminating connection because of crash of another server process"), ConnectionLost),
    (lookup("08006")("connection failure"), ConnectionLost),
    (lookup("53100")("could not extend file: No space left on device"), ConnectionLost),
    (lookup("40P01")("deadlock detected"), ConnectionLost),
    (lookup("25006")("cannot execute UPDATE in a read-only transaction"), ConnectionLost),
    (psycopg.OperationalError('connection failed: FATAL:  password authentication failed for user "fv"'), Permanent),
    (psycopg.OperationalError('connection failed: FATAL:  database "shop" does not exist'), Permanent),
    (psycopg.OperationalError('connection failed: FATAL:  role "fv" does not exist'), Permanent),
    (lookup("28P01")("password authentication failed"), Permanent),
    (lookup("3D000")('database "shop" does not exist'), Permanent),
    (lookup("57014")("canceling statement due to statement timeout"), None),
    (lookup("42501")("permission denied for table orders"), None),
    (lookup("22012")("division by zero"), None),
    (ValueError("not psycopg's"), None),
])
def test_postgres_errors(exc, kind):
    fault = pg_faults.classify(exc)
    assert (type(fault) if fault is not None else None) is kind
    if fault is not None:
        assert "\n" not in str(fault)


@pytest.mark.parametrize("exc, kind", [
    (pymysql.err.OperationalError(2013, "Lost connection to server during query"), ConnectionLost),
    (pymysql.err.OperationalError(2006, "MySQL server has gone away"), ConnectionLost),
    (pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1'"), ConnectionLost),
    (pymysql.err.OperationalError(1927, "Connection was killed"), ConnectionLost),
    (pymysql.err.OperationalError(1053, "Server shutdown in progress"), ConnectionLost),
    (pymysql.err.InterfaceError(0, ""), ConnectionLost),
    (ConnectionResetError(104, "Connection reset by peer"), ConnectionLost),
    (pymysql.err.OperationalError(1045, "Access denied for user 'fv'@'localhost'"), Permanent),
    (pymysql.err.OperationalError(1049, "Unknown database 'shop'"), Permanent),
    (pymysql.err.ProgrammingError(1146, "Table 'shop.x' doesn't exist"), None),
    (pymysql.err.DataError(1264, "Out of range value"), None),
    (ValueError("not PyMySQL's"), None),
])
def test_mysql_errors(exc, kind):
    fault = mysql_faults.classify(exc)
    assert (type(fault) if fault is not None else None) is kind


def test_a_cleanup_on_a_dead_connection_does_not_hide_the_error_being_handled():
    class Dead:
        def rollback(self):
            raise pymysql.err.InterfaceError(0, "")

    with pytest.raises(pymysql.err.OperationalError, match="Lost connection"):
        try:
            raise pymysql.err.OperationalError(2013, "Lost connection to server during query")
        except pymysql.err.OperationalError:
            mysql_faults.rollback_quietly(Dead())
            raise


@guarded(pg_faults.classify)
class Sink:
    """Stands in for a connector class: methods, a generator, a context manager."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def write(self) -> None:
        raise self.error

    def rows(self):
        yield 1
        raise self.error

    @contextlib.contextmanager
    def snapshot(self):
        yield self
        raise self.error

    def _private(self) -> None:
        raise self.error


def test_guarded_methods_raise_faults_chained_and_leave_other_errors_alone():
    lost = lookup("57P01")("terminating connection due to administrator command")
    with pytest.raises(ConnectionLost) as caught:
        Sink(lost).write()
    assert caught.value.__cause__ is lost
    with pytest.raises(ConnectionLost):
        list(Sink(lost).rows())
    with pytest.raises(ConnectionLost):
        with Sink(lost).snapshot():
            pass
    with pytest.raises(ConnectionLost):  # an error of the with-block itself, from the same driver
        with Sink(ValueError("unused")).snapshot():
            raise lost
    with pytest.raises(psycopg.errors.AdminShutdown):
        Sink(lost)._private()  # only the public surface is the edge
    statement = lookup("22012")("division by zero")
    with pytest.raises(psycopg.errors.DivisionByZero):
        Sink(statement).write()
