"""The freshview database in MariaDB: procedures that enqueue a request and wait for a (fake) service."""

from __future__ import annotations

import threading
import time

import pymysql
import pytest

from freshview.connectors.mysql import control


class FakeService:
    """Serves requests with the control functions on its own connection, like ``freshview run`` would."""

    def __init__(self, connect_args: dict, *, delay: float = 0.0, fail: str | None = None) -> None:
        self.conn = pymysql.connect(**connect_args)
        self.delay, self.fail = delay, fail
        self.served: list[control.Request] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            request = control.next_request(self.conn)
            if request is None:
                time.sleep(0.01)
                continue
            time.sleep(self.delay)  # the caller polls meanwhile: each poll must see the final update
            self.served.append(request)
            if self.fail:
                control.finish_request(self.conn, request.id, self.fail)
            elif request.action == "create":
                control.set_view_status(self.conn, request.name, "active", sql=request.sql)
                control.set_view_rows(self.conn, request.name, 3, position="0-1-7")
                control.finish_request(self.conn, request.id)
            else:
                control.delete_view(self.conn, request.name)
                control.finish_request(self.conn, request.id)

    def __enter__(self) -> "FakeService":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)
        self.conn.close()


def call(conn, procedure, *args):
    with conn.cursor() as cur:
        cur.execute(f"CALL freshview.{procedure}({', '.join(['%s'] * len(args))})", args)


def query(conn, sql, args=()):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        rows = cur.fetchall()
    conn.commit()
    return rows


def test_install_is_idempotent(fv):
    assert control.is_installed(fv)
    control.install(fv)
    assert control.is_installed(fv)
    with fv.cursor() as cur:
        cur.execute("DROP PROCEDURE freshview._request")
    assert not control.is_installed(fv)


def test_create_view_returns_when_the_service_answers(fv, mariadb):
    with FakeService(mariadb, delay=0.3) as service:
        call(fv, "create_view", "app.totals", "SELECT 1 AS one")  # autocommit off: REPEATABLE READ snapshots
        assert query(fv, "SELECT name, `sql`, status, error, `rows`, position FROM freshview.views") == (
            ("app.totals", "SELECT 1 AS one", "active", None, 3, "0-1-7"),)
        call(fv, "drop_view_timeout", "app.totals", 5)
        assert query(fv, "SELECT COUNT(*) FROM freshview.views") == ((0,),)
    assert [(r.action, r.name, r.sql) for r in service.served] == [
        ("create", "app.totals", "SELECT 1 AS one"), ("drop", "app.totals", None)]
    assert service.served[0].requested_by.startswith("root@")
    assert query(fv, "SELECT state FROM freshview.requests ORDER BY id") == (("done",), ("done",))


def test_the_service_error_is_the_sql_error(fv, mariadb):
    message = "freshview: column amount does not exist (line 1, column 8)"
    with FakeService(mariadb, fail=message):
        with pytest.raises(pymysql.err.OperationalError) as caught:
            call(fv, "create_view", "app.bad", "SELECT amount FROM orders")
    assert caught.value.args == (1644, message)  # ER_SIGNAL_EXCEPTION, SQLSTATE 45000
    assert query(fv, "SELECT state, error FROM freshview.requests") == (("failed", message),)


def test_no_service_times_out_clearly_and_cancels(fv):
    started = time.monotonic()
    with pytest.raises(pymysql.err.OperationalError, match=r"no freshview service answered within 0.3 s; "
                       r"is `freshview run` running against this database\? \(request \d+ cancelled\)"):
        call(fv, "create_view_timeout", "app.v", "SELECT 1", 0.3)
    assert 0.3 <= time.monotonic() - started < 5
    assert query(fv, "SELECT state, finished_at IS NOT NULL FROM freshview.requests") == (("cancelled", 1),)
    assert control.next_request(fv) is None  # a service starting later does not run it
    with pytest.raises(pymysql.err.OperationalError, match="timeout_s must be a positive number"):
        call(fv, "create_view_timeout", "app.v", "SELECT 1", 0)


def test_a_request_the_service_is_working_on_is_not_cancelled(fv, mariadb):
    other = pymysql.connect(**mariadb)
    try:
        def claim():
            while control.next_request(other) is None:
                time.sleep(0.01)
        claimer = threading.Thread(target=claim)
        claimer.start()
        with pytest.raises(pymysql.err.OperationalError, match=r"still working on request \d+ after 0.5 s"):
            call(fv, "create_view_timeout", "app.v", "SELECT 1", 0.5)
        claimer.join(5)
        assert query(fv, "SELECT state FROM freshview.requests") == (("running",),)
        control.requeue_running(other)  # a restarted service takes it up again
        assert control.next_request(other).name == "app.v"
    finally:
        other.close()


def test_a_user_with_only_execute_can_call(fv, mariadb):
    with fv.cursor() as cur:
        cur.execute("DROP USER IF EXISTS 'fv_caller'@'%'")
        cur.execute("CREATE USER 'fv_caller'@'%' IDENTIFIED BY 'secret-pw'")
        for procedure in control.USER_PROCEDURES:
            cur.execute(f"GRANT EXECUTE ON PROCEDURE freshview.{procedure} TO 'fv_caller'@'%'")
    user = pymysql.connect(**{**mariadb, "user": "fv_caller", "password": "secret-pw"})
    try:
        with FakeService(mariadb) as service:
            call(user, "create_view", "app.mine", "SELECT 2")
            call(user, "drop_view", "app.mine")
        # the caller's account as GRANTs name it (CURRENT_USER() as the invoker), not the definer nor the login
        assert [r.requested_by for r in service.served] == ["fv_caller@%", "fv_caller@%"]
        with pytest.raises(pymysql.err.OperationalError, match="denied"):
            query(user, "SELECT * FROM freshview.requests")
        with pytest.raises(pymysql.err.OperationalError, match="denied"):
            query(user, "INSERT INTO freshview.requests (action, name) VALUES ('create', 'app.x')")
        # _request is reachable (the procedures run as the caller), but only under the caller's own account
        for someone_else in ("root@localhost", "root@%", "fv_caller2@%", "fv_call@%", "fv_caller@localhost", None):
            with pytest.raises(pymysql.err.OperationalError, match="is not the one of this session"):
                call(user, "_request", "create", "app.x", "SELECT 1", 1, someone_else)
        assert query(fv, "SELECT COUNT(*) FROM freshview.requests WHERE name = 'app.x'") == ((0,),)
    finally:
        user.close()
        with fv.cursor() as cur:
            cur.execute("DROP USER 'fv_caller'@'%'")


def test_queue_order_and_claims(fv, mariadb):
    for name in ("app.a", "app.b"):
        query(fv, "INSERT INTO freshview.requests (action, name, `sql`) VALUES ('create', %s, 'SELECT 1')", (name,))
    other = pymysql.connect(**mariadb)
    try:
        first = control.next_request(fv)
        assert first.name == "app.a"
        assert control.next_request(other).name == "app.b"
        assert control.next_request(other) is None
        control.finish_request(fv, first.id)
        control.requeue_running(fv)
        assert query(fv, "SELECT name, state FROM freshview.requests ORDER BY id") == (
            ("app.a", "done"), ("app.b", "pending"))
    finally:
        other.close()


def test_heartbeat_and_position(fv):
    assert control.read_position(fv, "app") is None
    control.heartbeat(fv, "app", "starting")
    assert query(fv, "SELECT position, status, heartbeat_at IS NOT NULL FROM freshview.progress") == (
        (None, "starting", 1),)
    control.set_view_status(fv, "app.v", "active", sql="SELECT 1")
    control.write_step(fv, "app", "0-1-42", added={"app.v": 5}, changes=9, lag_ms=1.5)
    fv.commit()
    assert control.read_position(fv, "app") == "0-1-42"
    assert query(fv, "SELECT `rows`, lag_ms, position FROM freshview.views") == ((5, 1.5, "0-1-42"),)
    control.set_view_status(fv, "app.v", "failed", error="column x was dropped")
    assert query(fv, "SELECT `sql`, status, error FROM freshview.views") == (
        ("SELECT 1", "failed", "column x was dropped"),)


def test_only_the_creator_or_an_administrator_may_drop_a_view():
    from freshview.connectors.mysql.control import drop_refusal

    admins = ("root", "freshview")
    assert drop_refusal("app.v", "alice@10.0.0.5", "alice@127.0.0.1", admins) is None  # the creator, any host
    assert drop_refusal("app.v", "root@localhost", "alice@127.0.0.1", admins) is None
    assert drop_refusal("app.v", "freshview@127.0.0.1", "alice@127.0.0.1", admins) is None
    refusal = drop_refusal("app.v", "bob@127.0.0.1", "alice@127.0.0.1", admins)
    assert refusal is not None and "bob" in refusal and "alice" in refusal
    assert drop_refusal("app.v", "bob@127.0.0.1", None, admins) is not None
