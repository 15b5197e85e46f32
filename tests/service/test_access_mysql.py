"""Access on MariaDB, end to end: a view runs with its requester's rights, not the service's.

Requesters are accounts ``'fv_acc_…'@'%'`` with EXECUTE on the procedures
(``setup.user_grant_sql``) and the SELECT grants each test gives; the service
runs as root.  ``create_view`` plans the query as the caller (MariaDB's own
message); the service checks the account's grants again, at creation (also
when the caller skips the probe by calling ``_request`` itself), at every
rebuild and periodically.
"""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterator

import pymysql
import pytest

from freshview.connectors.mysql import control
from freshview.connectors.mysql.setup import user_grant_sql
from freshview.service.core import ServiceOptions
from tests.support.service import ThreadedService

USERS = ("fv_acc_nobody", "fv_acc_cols", "fv_acc_reader", "fv_acc_roleuser")


def connect(args: dict, **extra: Any) -> pymysql.Connection:
    return pymysql.connect(**{**args, "charset": "utf8mb4", "autocommit": True, **extra})


def as_user(args: dict, user: str) -> pymysql.Connection:
    return connect(args, user=user, password="pw", database=None)  # it may have no right on the database itself


def run(conn: pymysql.Connection, statement: str, args: Any = None) -> tuple:
    with conn.cursor() as cur:
        cur.execute(statement, args)
        return cur.fetchall() if cur.description else ()


@pytest.fixture
def secrets(mysql_database: dict) -> Iterator[dict]:
    db = mysql_database["database"]
    with connect(mysql_database) as admin:
        control.install(admin)
        run(admin, "CREATE TABLE secret (id int PRIMARY KEY, a int, b varchar(20))")
        run(admin, "INSERT INTO secret VALUES (1, 1, 'x'), (2, 1, 'y'), (3, 2, 'z')")
        for user in USERS:
            run(admin, f"DROP USER IF EXISTS '{user}'@'%'")
            run(admin, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
            for grant in user_grant_sql(f"'{user}'@'%'"):
                run(admin, grant)
        run(admin, f"GRANT SELECT (id, a) ON `{db}`.secret TO 'fv_acc_cols'@'%'")
        run(admin, f"GRANT SELECT ON `{db}`.secret TO 'fv_acc_reader'@'%'")
        run(admin, "DROP ROLE IF EXISTS fv_acc_role")
        run(admin, "CREATE ROLE fv_acc_role")
        run(admin, f"GRANT SELECT ON `{db}`.* TO fv_acc_role")
        run(admin, "GRANT fv_acc_role TO 'fv_acc_roleuser'@'%'")
        run(admin, "SET DEFAULT ROLE fv_acc_role FOR 'fv_acc_roleuser'@'%'")
    yield mysql_database
    with connect(mysql_database) as admin:
        for user in USERS:
            run(admin, f"DROP USER IF EXISTS '{user}'@'%'")
        run(admin, "DROP ROLE IF EXISTS fv_acc_role")


@pytest.fixture
def start_service(spark: Any, secrets: dict, tmp_path: Path) -> Iterator[Callable[..., ThreadedService]]:
    running: list[ThreadedService] = []
    dsn = (f"mysql://root:{urllib.parse.quote(secrets.get('password') or '', safe='')}@{secrets['host']}:"
           f"{secrets['port']}/{secrets['database']}")

    def start(**kwargs: Any) -> ThreadedService:
        svc = ThreadedService(dsn, tmp_path / "state", spark, **kwargs)
        running.append(svc)
        return svc

    yield start
    for svc in running:
        if svc.thread.is_alive():
            svc.stop()


def create(args: dict, user: str, name: str, sql: str) -> None:
    with as_user(args, user) as conn:
        run(conn, "CALL freshview.create_view_timeout(%s, %s, 60)", (f"{args['database']}.{name}", sql))


def refused(args: dict, user: str, name: str, sql: str, *, direct: bool = False) -> str:
    """The CALL's error (``direct``: through ``_request``, skipping the probe); and nothing was made."""
    with as_user(args, user) as conn, pytest.raises(pymysql.err.MySQLError) as caught:
        if direct:
            run(conn, "CALL freshview._request('create', %s, %s, 60, CURRENT_USER())", (f"{args['database']}.{name}", sql))
        else:
            run(conn, "CALL freshview.create_view_timeout(%s, %s, 60)", (f"{args['database']}.{name}", sql))
    with connect(args) as admin:
        assert run(admin, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s AND "
                          "table_name = %s", (args["database"], name)) == ((0,),)
    return caught.value.args[1]


def can_read(args: dict, user: str, name: str) -> bool:
    with as_user(args, user) as conn:
        try:
            run(conn, f"SELECT * FROM `{args['database']}`.`{name}`")
            return True
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in (1142, 1143):
                raise
            return False


def status(args: dict, name: str, wanted: str, timeout: float = 30) -> tuple:
    deadline = time.monotonic() + timeout
    with connect(args) as admin:
        while True:
            row = run(admin, "SELECT status, error FROM freshview.views WHERE name = %s", (f"{args['database']}.{name}",))
            if (row and row[0][0] == wanted) or time.monotonic() > deadline:
                return row[0] if row else (None, None)
            time.sleep(0.2)


def test_a_view_is_refused_what_its_requester_cannot_read(secrets, start_service):
    db = secrets["database"]
    start_service()
    # the caller's own plan of the query: MariaDB's message, naming the table or the column (inside the
    # procedure only names with their database are the view's)
    message = refused(secrets, "fv_acc_nobody", "leak", f"SELECT * FROM {db}.secret")
    assert message.startswith(f"freshview: permission denied for view {db}.leak: SELECT command denied to user "
                              "'fv_acc_nobody'") and f"`{db}`.`secret`" in message
    assert "for column 'b' in table 'secret'" in refused(secrets, "fv_acc_cols", "leak",
                                                         f"SELECT id, b FROM {db}.secret")
    # bare names are the service's database's: the service's own check names table and column
    assert refused(secrets, "fv_acc_nobody", "leak", "SELECT * FROM secret") == (
        f"freshview: permission denied for view {db}.leak: account 'fv_acc_nobody'@'%' may not SELECT columns "
        f"a, b, id of table {db}.secret")
    # skipping the probe does not help: the service checks the account's grants itself
    assert refused(secrets, "fv_acc_cols", "leak", "SELECT id FROM secret WHERE b = 'x'", direct=True) == (
        f"freshview: permission denied for view {db}.leak: account 'fv_acc_cols'@'%' may not SELECT column b "
        f"of table {db}.secret")
    assert refused(secrets, "fv_acc_nobody", "leak", "SELECT COUNT(*) AS n FROM secret", direct=True).endswith(
        f"account 'fv_acc_nobody'@'%' may not SELECT table {db}.secret")
    # what it may read, it gets, and only it (and whoever may read the whole database)
    create(secrets, "fv_acc_cols", "mine", "SELECT a, COUNT(*) AS n FROM secret GROUP BY a")
    assert can_read(secrets, "fv_acc_cols", "mine") and not can_read(secrets, "fv_acc_nobody", "mine")
    assert can_read(secrets, "fv_acc_roleuser", "mine")  # its default role may read every table of the database
    # a view over another view reads that view's result table, which is its requester's
    create(secrets, "fv_acc_reader", "all_secrets", "SELECT id, a, b FROM secret")
    assert "all_secrets" in refused(secrets, "fv_acc_cols", "leak", "SELECT a FROM all_secrets")
    assert refused(secrets, "fv_acc_cols", "leak", "SELECT a FROM all_secrets", direct=True).endswith(
        f"account 'fv_acc_cols'@'%' may not SELECT column a of table {db}.all_secrets")
    # rights through a (default) role count
    create(secrets, "fv_acc_roleuser", "by_role", "SELECT b FROM secret")
    assert can_read(secrets, "fv_acc_roleuser", "by_role")


def test_a_revoke_after_creation_fails_the_view(secrets, start_service):
    db = secrets["database"]
    start_service(options=ServiceOptions(poll_s=0.05, access_check_s=0.2))
    create(secrets, "fv_acc_cols", "cols_view", "SELECT id, a FROM secret")
    create(secrets, "fv_acc_reader", "reader_view", "SELECT a, COUNT(*) AS n FROM secret GROUP BY a")
    assert can_read(secrets, "fv_acc_cols", "cols_view")
    with as_user(secrets, "fv_acc_cols") as cols:  # shared on by its requester
        run(cols, f"GRANT SELECT ON `{db}`.cols_view TO 'fv_acc_nobody'@'%'")
    assert can_read(secrets, "fv_acc_nobody", "cols_view")
    with connect(secrets) as admin:
        run(admin, f"REVOKE SELECT (a) ON `{db}`.secret FROM 'fv_acc_cols'@'%'")
    found = status(secrets, "cols_view", "failed")
    assert found == ("failed", f"freshview: permission denied for view {db}.cols_view: account 'fv_acc_cols'@'%' "
                               f"may not SELECT column a of table {db}.secret")
    assert not can_read(secrets, "fv_acc_cols", "cols_view")
    assert not can_read(secrets, "fv_acc_nobody", "cols_view")  # MySQL's REVOKE does not cascade: freshview's does
    assert status(secrets, "reader_view", "active")[0] == "active"


def test_the_result_table_is_granted_to_exactly_its_requester(secrets, start_service):
    db = secrets["database"]
    start_service()

    def grantees(name: str) -> list:
        with connect(secrets) as admin:
            return sorted(run(admin, "SELECT User, Host, Table_priv FROM mysql.tables_priv WHERE Db = %s AND "
                                     "Table_name = %s", (db, name)))

    create(secrets, "fv_acc_reader", "shared_name", "SELECT id, b FROM secret")
    assert grantees("shared_name") == [("fv_acc_reader", "%", "Select,Grant")]
    with as_user(secrets, "fv_acc_reader") as conn:
        run(conn, "CALL freshview.drop_view(%s)", (f"{db}.shared_name",))
    assert grantees("shared_name") == []  # MySQL keeps a dropped table's grants: freshview revokes them
    with connect(secrets) as admin:  # a grant left on the name by someone else
        run(admin, f"CREATE TABLE `{db}`.shared_name (k int)")
        run(admin, f"GRANT SELECT ON `{db}`.shared_name TO 'fv_acc_nobody'@'%'")
        run(admin, f"DROP TABLE `{db}`.shared_name")
    create(secrets, "fv_acc_cols", "shared_name", "SELECT id, a FROM secret")
    assert grantees("shared_name") == [("fv_acc_cols", "%", "Select,Grant")]
    assert can_read(secrets, "fv_acc_cols", "shared_name")
    assert not can_read(secrets, "fv_acc_nobody", "shared_name") and not can_read(secrets, "fv_acc_reader", "shared_name")
