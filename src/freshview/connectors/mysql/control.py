"""The ``freshview`` database inside MySQL/MariaDB: status tables, the request queue, procedures.

This is how a database user talks to the service without leaving SQL, as on
PostgreSQL (``connectors/postgres/control.py``)::

    CALL freshview.create_view('app.customer_totals', 'SELECT ...');
    CALL freshview.create_view_timeout('app.customer_totals', 'SELECT ...', 600);
    SELECT * FROM freshview.views;
    CALL freshview.drop_view('app.customer_totals');

``create_view`` inserts a request, commits (so the service can see it),
then polls until the service marks it done or failed and raises the
service's message as ``SQLSTATE '45000'``; after the timeout without an
answer it cancels the request and says that no service seems to run.  Like
DDL, the CALL commits the caller's open transaction.  Under REPEATABLE READ
a transaction reads one snapshot, so each poll is followed by a COMMIT: the
next poll starts a new transaction and sees the service's update.

**The timeout argument.**  MariaDB 10.11 (and MySQL) has no default values
for procedure parameters (MariaDB adds them only in 11.8) nor overloading by
arity, so ``create_view(name, sql)`` waits 120 s (``drop_view(name)``: 60 s)
and ``create_view_timeout(name, sql, timeout_s)`` / ``drop_view_timeout(name,
timeout_s)`` take the timeout: a separate, clearly named procedure rather
than a mandatory third argument everybody would have to type.

**Whose rights.**  A view runs with its requester's rights (``service.access``),
so the procedures a user calls are SQL SECURITY INVOKER: ``create_view_timeout``,
still running as the caller, plans the query (``SELECT COUNT(*) INTO … FROM
(SELECT 1 FROM (query) LIMIT 0)``: prepared and executed, no row read), so a
missing privilege fails the CALL with MariaDB's own message, which names the
table or column; and it names the caller's account, ``CURRENT_USER()`` (the
account GRANTs name, ``bob@%``), to ``_request``.  ``_request`` is SQL SECURITY
DEFINER (the administrator who ran ``freshview setup``): it alone may write
the queue, and it checks that the account named matches the session's login
(``USER()``: same user name, the login host matches the account's host
pattern), so a caller reaching it directly can name no one else.  Callers need
EXECUTE on the procedures of ``USER_PROCEDURES`` and no other right on
``freshview``.  ``requested_by`` (views made before: the login) is the view's
``owner``.

``progress`` holds, per followed database (``source``), the position whose
effects the result tables hold, written in the same transaction as the
results (``write_step``); ``views.position`` the same per view.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from freshview.connectors.base import Request
from freshview.connectors.edge import guarded
from freshview.connectors.mysql import faults
from freshview.connectors.mysql.catalog import parse_table_name, quote, spell, split_table_name

DATABASE = "freshview"
CREATE_TIMEOUT_S = 120
INTERRUPTED_ALTER = ("freshview: the service stopped while an alter_view swapped this view's definition; it is "
                     "rebuilt from the definition stored here")
DROP_TIMEOUT_S = 60
VERIFY_TIMEOUT_S = 300
MESSAGE_CHARS = 512  # MariaDB's limit on SIGNAL's MESSAGE_TEXT

TABLES_SQL = (
    "CREATE DATABASE IF NOT EXISTS freshview CHARACTER SET utf8mb4",
    """CREATE TABLE IF NOT EXISTS freshview.views (
        name        varchar(255) NOT NULL PRIMARY KEY,   -- the result table, database-qualified
        `sql`       longtext NOT NULL,
        status      varchar(16) NOT NULL,                -- populating | active | failed | sink error | rebuilding
        error       text,
        `rows`      bigint,
        lag_ms      double,                              -- source commit to result commit, last change
        position    text,                                -- source position whose effects the table holds
        created_at  datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        updated_at  datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    # the account that created the view (its requester): it may drop it (``drop_refusal``), the view runs with
    # its rights (``service.access``) and its result table is granted to it (views made before: USER())
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS owner varchar(400)",
    # while populating (service.population): reading | computing | catching up | ready, rows read of the
    # estimated total, seconds since it started; result row changes written since the view was created
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS phase varchar(16)",
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS rows_read bigint",
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS rows_total bigint",
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS elapsed_s double",
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS changes_applied bigint NOT NULL DEFAULT 0",
    """CREATE TABLE IF NOT EXISTS freshview.requests (
        id           bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
        action       varchar(8) NOT NULL CHECK (action IN ('create', 'drop')),
        name         varchar(255) NOT NULL,
        `sql`        longtext,
        state        varchar(16) NOT NULL DEFAULT 'pending',  -- pending | running | done | failed | cancelled
        error        text,
        requested_by varchar(400),                            -- the caller's account, user@host
        requested_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        finished_at  datetime(6),
        KEY requests_state (state, id)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    # how many times a service started working on the request (service.requests.after_crash)
    "ALTER TABLE freshview.requests ADD COLUMN IF NOT EXISTS attempts int NOT NULL DEFAULT 0",
    # false: nobody waits for the answer (create_view_async); a failure then shows in freshview.views
    "ALTER TABLE freshview.requests ADD COLUMN IF NOT EXISTS blocking bool NOT NULL DEFAULT TRUE",
    # verify_view (service.verify): requests to verify a view (and alter_view's); the answer besides an error
    "ALTER TABLE freshview.requests MODIFY action varchar(8) NOT NULL "
    "CHECK (action IN ('create', 'drop', 'alter', 'verify'))",
    "ALTER TABLE freshview.requests ADD COLUMN IF NOT EXISTS result text",
    # the view's last verification: when, equal | different | error, and what it said
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS verified_at datetime(6)",
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS verify_result varchar(16)",
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS verify_detail text",
    # each step that ran the view: delta rows it read, when, how long, on which executor (local | spark)
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS changes_received bigint NOT NULL DEFAULT 0",
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS last_step_at datetime(6)",
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS last_step_ms double",
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS executor varchar(8)",
    # alter_view: when the view's definition was last changed (its new SQL swapped in with its rows)
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS altered_at datetime(6)",
    # create_view_use_existing_table: fill the table the user made (connectors/mysql/existing.py); the view keeps
    # the choice for rebuilds and drop_view (which leaves such a table), set when it starts (a service killed
    # before its table is filled must not drop it: ``start``)
    "ALTER TABLE freshview.requests ADD COLUMN IF NOT EXISTS existing bool NOT NULL DEFAULT FALSE",
    "ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS existing bool NOT NULL DEFAULT FALSE",
    """CREATE TABLE IF NOT EXISTS freshview.progress (
        source       varchar(64) NOT NULL PRIMARY KEY,   -- the followed database
        position     text,                               -- NULL: no step committed yet
        steps        bigint NOT NULL DEFAULT 0,
        changes      bigint NOT NULL DEFAULT 0,          -- source row changes applied
        lag_ms       double,
        status       varchar(16) NOT NULL DEFAULT 'stopped',
        heartbeat_at datetime(6),
        updated_at   datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
)

_REQUEST_PROC = r"""
CREATE OR REPLACE PROCEDURE freshview._request(p_action varchar(8), p_name varchar(255), p_sql longtext,
                                               p_timeout double, p_account varchar(400))
    MODIFIES SQL DATA SQL SECURITY DEFINER
    COMMENT 'freshview: enqueue a request and wait for the service to answer it'
body: BEGIN
    DECLARE req bigint;
    DECLARE st varchar(16);
    DECLARE err text;
    DECLARE msg varchar(512);
    DECLARE deadline datetime(6);
    DECLARE login varchar(400) DEFAULT USER();
    DECLARE login_host varchar(400) DEFAULT SUBSTRING_INDEX(login, '@', -1);
    DECLARE account_host varchar(400) DEFAULT SUBSTRING_INDEX(p_account, '@', -1);
    -- create_view_async sets @freshview_blocking = FALSE around its call (no optional arguments in MariaDB)
    DECLARE p_blocking bool DEFAULT p_action <> 'create' OR @freshview_blocking IS NULL OR @freshview_blocking;
    -- create_view_use_existing_table sets @freshview_existing = TRUE around its call (the service checks that the
    -- caller may write the table, and that it can hold the view: connectors/mysql/existing.py)
    DECLARE p_existing bool DEFAULT p_action = 'create' AND COALESCE(@freshview_existing, FALSE);
    IF p_account IS NULL OR LOCATE('@', p_account) = 0
       OR BINARY LEFT(p_account, CHAR_LENGTH(p_account) - CHAR_LENGTH(account_host) - 1)
          <> BINARY LEFT(login, CHAR_LENGTH(login) - CHAR_LENGTH(login_host) - 1)
       OR NOT (login_host LIKE account_host) THEN
        SET msg = LEFT(CONCAT('freshview: the account ', COALESCE(p_account, 'NULL'), ' is not the one of this ',
                              'session (', login, '); call freshview.create_view or freshview.drop_view'), 512);
        SIGNAL SQLSTATE '42000' SET MESSAGE_TEXT = msg;
    END IF;
    IF p_timeout IS NULL OR p_timeout <= 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'freshview: timeout_s must be a positive number of seconds';
    END IF;
    INSERT INTO freshview.requests (action, name, `sql`, requested_by, blocking, existing)
        VALUES (p_action, p_name, p_sql, p_account, p_blocking, p_existing);
    SET req = LAST_INSERT_ID();
    COMMIT;  -- the service must see the request
    IF NOT p_blocking THEN  -- create_view_async: the population goes on; freshview.views shows it
        LEAVE body;
    END IF;
    SET deadline = SYSDATE(6) + INTERVAL ROUND(p_timeout * 1000000) MICROSECOND;
    poll: LOOP
        SELECT state, error INTO st, err FROM freshview.requests WHERE id = req;
        COMMIT;  -- REPEATABLE READ: the next poll starts a new transaction with a fresh snapshot
        IF st IN ('done', 'failed') THEN
            LEAVE poll;
        END IF;
        IF SYSDATE(6) > deadline THEN
            UPDATE freshview.requests SET state = 'cancelled', finished_at = SYSDATE(6)
                WHERE id = req AND state = 'pending';
            IF ROW_COUNT() > 0 THEN
                COMMIT;
                SET msg = CONCAT('freshview: no freshview service answered within ', p_timeout,
                                 ' s; is `freshview run` running against this database? (request ', req,
                                 ' cancelled)');
            ELSE
                COMMIT;
                SET msg = LEFT(CONCAT('freshview: the service is still working on request ', req, ' after ',
                                      p_timeout, ' s', COALESCE((SELECT CONCAT(' (', name, ' is ',
                                      IF(status = 'active', 'being altered', 'populating'), ': ', phase,
                                      ', ', COALESCE(rows_read, 0), ' rows read',
                                      COALESCE(CONCAT(' of ~', rows_total), ''), ', ', ROUND(elapsed_s, 1), ' s)')
                                      FROM freshview.views WHERE (status = 'populating' OR
                                      (status = 'active' AND phase IS NOT NULL)) AND
                                      name = IF(LOCATE('.', p_name) > 0, p_name, CONCAT(DATABASE(), '.', p_name))
                                      LIMIT 1), ''), '; see freshview.views and freshview.requests'), 512);
            END IF;
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
        END IF;
        DO SLEEP(0.02);
    END LOOP;
    IF st = 'failed' THEN
        SET msg = LEFT(COALESCE(err, 'freshview: the request failed'), 512);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg;
    END IF;
END
"""


# The query planned as the caller, so MariaDB checks its own rules (table and column privileges) before the
# service computes anything with its rights: prepared and executed inside two derived tables, the inner one
# LIMIT 0, so no row is read (the optimizer may still evaluate a constant subquery, which the caller could
# run anyway), a statement can only be one SELECT, and no result set reaches the client (COUNT(*) always
# yields one row for INTO).  A privilege error fails the CALL with MariaDB's message (naming the table or
# column); other errors (bad SQL) are left to the service, whose messages say more.  The probe sees only
# tables named with their database (see below); the service's check (access.py) sees every table.
_PROBE_PROC = r"""
CREATE OR REPLACE PROCEDURE freshview.create_view_timeout(view_name varchar(255), query longtext, timeout_s double)
    MODIFIES SQL DATA SQL SECURITY INVOKER
    COMMENT 'freshview: create a view and fill its table, waiting up to timeout_s seconds'
BEGIN
    DECLARE code int DEFAULT 0;
    DECLARE denied text;
    DECLARE prepared bool DEFAULT FALSE;
    BEGIN
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION
            IF code = 0 THEN
                GET DIAGNOSTICS CONDITION 1 denied = MESSAGE_TEXT, code = MYSQL_ERRNO;
            END IF;
        SET @freshview_probe = CONCAT('SELECT COUNT(*) INTO @freshview_probe FROM (SELECT 1 FROM (',
                                      REGEXP_REPLACE(query, '[[:space:];]+$', ''),
                                      CHAR(10 USING utf8mb4), ') AS freshview_query LIMIT 0) AS freshview_probe');
        PREPARE freshview_probe FROM @freshview_probe;
        IF code = 0 THEN
            SET prepared = TRUE;
            EXECUTE freshview_probe;
        END IF;
        IF prepared THEN
            DEALLOCATE PREPARE freshview_probe;
        END IF;
        SET @freshview_probe = NULL;
    END;
    -- Inside a routine a bare table name is the routine's database's (freshview's), not the view's: a denial
    -- there says nothing (the service's own check covers bare names); MariaDB names the table's database.
    IF code = 1143 OR code = 1370 OR (code = 1142 AND LOCATE('for table `', denied) > 0
                                     AND LOCATE('for table `freshview`.', denied) = 0)
       OR (code = 1044 AND LOCATE('to database ''freshview''', denied) = 0) THEN
        SET denied = LEFT(CONCAT('freshview: permission denied for view ', view_name, ': ', denied), 512);
        SIGNAL SQLSTATE '42000' SET MESSAGE_TEXT = denied, MYSQL_ERRNO = code;
    END IF;
    CALL freshview._request('create', view_name, query, timeout_s, CURRENT_USER());
END
"""


# alter_view_timeout: the same probe as create_view_timeout's, then an 'alter' request
_ALTER_PROC = _PROBE_PROC.replace("freshview.create_view_timeout(", "freshview.alter_view_timeout(").replace(
    "'freshview: create a view and fill its table, waiting up to timeout_s seconds'",
    "'freshview: change a view''s SQL (populated beside it, then swapped in), waiting up to timeout_s seconds'").replace(
    "CALL freshview._request('create',", "CALL freshview._request('alter',")
assert "alter_view_timeout" in _ALTER_PROC and "_request('alter'" in _ALTER_PROC


# Epsio's non-blocking form: the same probe (create_view_timeout), then the request queued without waiting.
# ``_request`` is told through a session variable (MariaDB procedures take no optional arguments, and
# ``_request``'s arguments stay as they were: callers reach it directly too).
_ASYNC_PROC = r"""
CREATE OR REPLACE PROCEDURE freshview.create_view_async(view_name varchar(255), query longtext)
    MODIFIES SQL DATA SQL SECURITY INVOKER
    COMMENT 'freshview: create a view without waiting: freshview.views shows its population, then its status'
BEGIN
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET @freshview_blocking = NULL;
        RESIGNAL;
    END;
    SET @freshview_blocking = FALSE;
    CALL freshview.create_view_timeout(view_name, query, 1);
    SET @freshview_blocking = NULL;
END
"""


# use_existing_table: create_view_timeout's request, marked (through a session variable, as create_view_async's)
# to fill the table the user made, named view_name, instead of creating one.
_EXISTING_PROC = r"""
CREATE OR REPLACE PROCEDURE freshview.create_view_use_existing_table_timeout(view_name varchar(255), query longtext,
                                                                             timeout_s double)
    MODIFIES SQL DATA SQL SECURITY INVOKER
    COMMENT 'freshview: create a view filling the table view_name, which the caller made, waiting up to timeout_s s'
BEGIN
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET @freshview_existing = NULL;
        RESIGNAL;
    END;
    SET @freshview_existing = TRUE;
    CALL freshview.create_view_timeout(view_name, query, timeout_s);
    SET @freshview_existing = NULL;
END
"""


# verify_view: the caller must be able to read the result table (the differences show its rows and the SQL's):
# a probe as the caller, as create_view_timeout's, fails the CALL with MariaDB's own message.  The name must
# carry its database (inside a routine a bare name is freshview's).  The answer ('equal at <position>') is
# the CALL's result set; a difference fails the CALL with the first differing rows (512 characters at most:
# freshview.views.verify_detail holds them all).
_VERIFY_PROC = r"""
CREATE OR REPLACE PROCEDURE freshview.verify_view_timeout(view_name varchar(255), timeout_s double)
    MODIFIES SQL DATA SQL SECURITY INVOKER
    COMMENT 'freshview: verify a view against its SQL at one position, waiting up to timeout_s seconds'
BEGIN
    IF LOCATE('.', view_name) = 0 THEN
        SIGNAL SQLSTATE '42000' SET MESSAGE_TEXT = 'freshview: verify_view takes the view with its database (db.view)';
    END IF;
    SET @freshview_probe = CONCAT('SELECT COUNT(*) INTO @freshview_probe FROM (SELECT 1 FROM `',
                                  REPLACE(SUBSTRING_INDEX(view_name, '.', 1), '`', ''), '`.`',
                                  REPLACE(SUBSTRING(view_name, LOCATE('.', view_name) + 1), '`', ''),
                                  '` LIMIT 0) AS freshview_probe');
    PREPARE freshview_probe FROM @freshview_probe;
    EXECUTE freshview_probe;
    DEALLOCATE PREPARE freshview_probe;
    SET @freshview_probe = NULL;
    CALL freshview._request('verify', view_name, NULL, timeout_s, CURRENT_USER());
    CALL freshview._answer(view_name, CURRENT_USER());
END
"""

_ANSWER_PROC = r"""
CREATE OR REPLACE PROCEDURE freshview._answer(p_name varchar(255), p_account varchar(400))
    READS SQL DATA SQL SECURITY DEFINER
    COMMENT 'freshview: the answer to the caller''s last verify_view of a view'
SELECT result AS verify_view FROM freshview.requests WHERE action = 'verify' AND name = p_name
    AND requested_by = p_account AND state = 'done' ORDER BY id DESC LIMIT 1
"""


def _wrapper(name: str, params: str, call: str, comment: str) -> str:
    """A procedure the user calls, running as the user (the account it names is ``CURRENT_USER()``)."""
    return (f"CREATE OR REPLACE PROCEDURE freshview.{name}({params}) MODIFIES SQL DATA SQL SECURITY INVOKER "
            f"COMMENT '{comment}' CALL freshview.{call}")


PROCEDURES_SQL = (
    _REQUEST_PROC,
    _PROBE_PROC,
    _wrapper("create_view", "view_name varchar(255), query longtext",
             f"create_view_timeout(view_name, query, {CREATE_TIMEOUT_S})",
             f"freshview: create a view and fill its table (waits up to {CREATE_TIMEOUT_S} s)"),
    _wrapper("drop_view", "view_name varchar(255)", f"drop_view_timeout(view_name, {DROP_TIMEOUT_S})",
             f"freshview: drop a view and its table (waits up to {DROP_TIMEOUT_S} s)"),
    _wrapper("drop_view_timeout", "view_name varchar(255), timeout_s double",
             "_request('drop', view_name, NULL, timeout_s, CURRENT_USER())",
             "freshview: drop a view and its table, waiting up to timeout_s seconds"),
    _ASYNC_PROC,
    _ALTER_PROC,
    _wrapper("alter_view", "view_name varchar(255), query longtext",
             f"alter_view_timeout(view_name, query, {CREATE_TIMEOUT_S})",
             f"freshview: change a view''s SQL (populated beside it, then swapped in; waits up to {CREATE_TIMEOUT_S} s)"),
    _EXISTING_PROC,
    _wrapper("create_view_use_existing_table", "view_name varchar(255), query longtext",
             f"create_view_use_existing_table_timeout(view_name, query, {CREATE_TIMEOUT_S})",
             f"freshview: create a view filling the table view_name, which the caller made (waits up to "
             f"{CREATE_TIMEOUT_S} s)"),
    _ANSWER_PROC,
    _VERIFY_PROC,
    _wrapper("verify_view", "view_name varchar(255)", f"verify_view_timeout(view_name, {VERIFY_TIMEOUT_S})",
             f"freshview: verify a view against its SQL at one position (waits up to {VERIFY_TIMEOUT_S} s)"),
)

#: The procedures a user needs EXECUTE on to manage views from SQL.
USER_PROCEDURES = ("create_view", "create_view_timeout", "create_view_async", "drop_view", "drop_view_timeout",
                   "_request", "verify_view", "verify_view_timeout", "_answer", "alter_view", "alter_view_timeout",
                   "create_view_use_existing_table", "create_view_use_existing_table_timeout")


#: The rows of one service: its followed database's views (``db.view``) and requests (``db.view`` or a bare
#: ``view``, which the service puts into its database).  Several services may share one server's
#: ``freshview`` database, one per followed database.
#: ``_OWNED`` takes ``spell(database)`` (the first part of a qualified name), ``_OWNED_REQUEST`` the
#: ``_request_owner`` pair (a request's name is the caller's text: the database bare or in backticks).
_OWNED = "SUBSTRING_INDEX(name, '.', 1) = %s"
_OWNED_REQUEST = "(LOCATE('.', name) = 0 OR SUBSTRING_INDEX(TRIM(name), '.', 1) IN (%s, %s))"


def _request_owner(source: str) -> tuple[str, str]:
    return spell(source), quote(source)


def _run(conn: Any, statement: str, params: Any = None) -> Any:
    with conn.cursor() as cur:
        cur.execute(statement, params)
        return cur.fetchall() if cur.description else cur.rowcount


def _account(user: str | None) -> str | None:
    """The account name of ``USER()`` / ``CURRENT_USER()`` text (``app@10.0.0.5`` -> ``app``)."""
    return None if user is None else user.rpartition("@")[0] or user


def drop_refusal(view: str, requester: str | None, owner: str | None, admins: tuple[str | None, ...]) -> str | None:
    """Why ``requester`` (``USER()`` text) may not drop ``view``, or None when it may: the account that
    created it (same user name, from any host), ``root`` or the service's own account may."""
    who = _account(requester)
    if who is not None and (who in admins or who == _account(owner)):
        return None
    creator = f"the account that created it ({_account(owner)})" if owner else "no creator is recorded for it, so only"
    return (f"freshview: permission denied to drop view {view} for {who or '(unknown)'}: {creator}, root or "
            "the freshview service's account may drop it")


def install(conn: Any) -> None:
    """Create or upgrade the ``freshview`` database: tables (kept if present) and procedures (replaced)."""
    for statement in TABLES_SQL + PROCEDURES_SQL:
        _run(conn, statement)
    conn.commit()


def is_installed(conn: Any) -> bool:
    rows = _run(conn, "SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = 'freshview' "
                      "AND routine_name = '_request'")
    tables = _run(conn, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'freshview' "
                        "AND table_name IN ('views', 'requests', 'progress')")
    current = _run(conn, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = 'freshview' "
                         "AND table_name = 'requests' AND column_name IN ('blocking', 'existing')")  # else: setup
    verifiable = _run(conn, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = 'freshview' "
                            "AND table_name = 'views' AND column_name IN ('verify_detail', 'altered_at')")
    conn.commit()
    return rows[0][0] == 1 and tables[0][0] == 3 and current[0][0] == 2 and verifiable[0][0] == 2


def next_request(conn: Any, source: str | None = None) -> Request | None:
    """Claim the oldest pending request (of ``source``'s views, if given; marks it running, commits)."""
    conn.begin()
    try:
        mine = f" AND {_OWNED_REQUEST}" if source is not None else ""
        rows = _run(conn, "SELECT id, action, name, `sql`, requested_by, attempts + 1, blocking <> 0 FROM freshview.requests "
                          f"WHERE state = 'pending'{mine} ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
                    _request_owner(source) if source is not None else None)
        if rows:
            _run(conn, "UPDATE freshview.requests SET state = 'running', attempts = attempts + 1 WHERE id = %s",
                 (rows[0][0],))
        conn.commit()
    except BaseException:
        faults.rollback_quietly(conn)
        raise
    return Request(*rows[0]) if rows else None


def finish_request(conn: Any, request_id: int, error: str | None = None) -> None:
    """Mark a request done (or failed with ``error``, which the caller's CALL raises); commits."""
    _run(conn, "UPDATE freshview.requests SET state = %s, error = %s, finished_at = CURRENT_TIMESTAMP(6) "
               "WHERE id = %s", ("failed" if error else "done", error, request_id))
    conn.commit()


def interrupted_requests(conn: Any, source: str | None = None) -> list[Request]:
    """Requests a killed service was working on (of ``source``'s views, if given), oldest first."""
    mine = f" AND {_OWNED_REQUEST}" if source is not None else ""
    rows = _run(conn, "SELECT id, action, name, `sql`, requested_by, attempts, blocking <> 0 FROM freshview.requests "
                      f"WHERE state = 'running'{mine} ORDER BY id",
                _request_owner(source) if source is not None else None)
    conn.commit()
    return [Request(*row) for row in rows]


def requeue_request(conn: Any, request_id: int) -> None:
    """An interrupted request goes back to the queue; commits."""
    _run(conn, "UPDATE freshview.requests SET state = 'pending' WHERE id = %s AND state = 'running'", (request_id,))
    conn.commit()


def requeue_running(conn: Any, source: str | None = None) -> None:
    """Requests a killed service was working on (of ``source``'s views, if given) go back to the queue;
    commits."""
    mine = f" AND {_OWNED_REQUEST}" if source is not None else ""
    _run(conn, f"UPDATE freshview.requests SET state = 'pending' WHERE state = 'running'{mine}",
         _request_owner(source) if source is not None else None)
    conn.commit()


def set_view_status(conn: Any, name: str, status: str, *, sql: str | None = None, error: str | None = None) -> None:
    """Create or update a view's row in ``freshview.views``; commits."""
    _run(conn, "INSERT INTO freshview.views (name, `sql`, status, error) VALUES (%s, COALESCE(%s, ''), %s, %s) "
               "ON DUPLICATE KEY UPDATE `sql` = COALESCE(%s, `sql`), status = VALUES(status), phase = NULL, "
               "error = VALUES(error), updated_at = CURRENT_TIMESTAMP(6)", (name, sql, status, error, sql))
    conn.commit()


def set_view_rows(conn: Any, name: str, rows: int, *, position: str | None = None) -> None:
    """A view's row count (after its table was filled) and the position it holds; commits."""
    _run(conn, "UPDATE freshview.views SET `rows` = %s, position = COALESCE(%s, position), "
               "updated_at = CURRENT_TIMESTAMP(6) WHERE name = %s", (rows, position, name))
    conn.commit()


def set_view_lag(conn: Any, name: str, lag_ms: float) -> None:
    _run(conn, "UPDATE freshview.views SET lag_ms = %s WHERE name = %s", (lag_ms, name))
    conn.commit()


def delete_view(conn: Any, name: str) -> None:
    """Forget a dropped view; commits."""
    _run(conn, "DELETE FROM freshview.views WHERE name = %s", (name,))
    conn.commit()


def heartbeat(conn: Any, source: str, status: str = "running") -> None:
    """The service is alive (and in ``status``); commits."""
    _run(conn, "INSERT INTO freshview.progress (source, status, heartbeat_at) VALUES (%s, %s, CURRENT_TIMESTAMP(6)) "
               "ON DUPLICATE KEY UPDATE status = VALUES(status), heartbeat_at = VALUES(heartbeat_at)",
         (source, status))
    conn.commit()


def write_step(conn: Any, source: str, position: str, *, added: Mapping[str, int] | None = None, changes: int = 0,
               lag_ms: float | None = None) -> None:
    """Record a committed step IN THE CALLER'S TRANSACTION (no commit): ``step_statements``."""
    for statement, params in step_statements(source, position, added=added, changes=changes, lag_ms=lag_ms):
        _run(conn, statement, params)


def step_statements(source: str, position: str, *, added: Mapping[str, int] | None = None, changes: int = 0,
                    lag_ms: float | None = None, written: Mapping[str, int] | None = None,
                    ran: Mapping[str, tuple[int, float, str | None]] | None = None) -> list[tuple[str, list]]:
    """The statements (SQL, parameters) that record a step: the position reached by ``source`` (also on
    every active view), rows added and result row changes written per changed view, and the lag of those views;
    per view that ran (``ran``: delta rows read, milliseconds, executor), its changes received and last step."""
    out: list[tuple[str, list]] = []
    if ran:
        names = list(ran)
        cases = " ".join(["WHEN %s THEN %s"] * len(names))
        out.append((f"UPDATE freshview.views SET changes_received = changes_received + CASE name {cases} ELSE 0 END, "
                    f"last_step_ms = CASE name {cases} ELSE last_step_ms END, "
                    f"executor = CASE name {cases} ELSE executor END, last_step_at = CURRENT_TIMESTAMP(6) "
                    f"WHERE name IN ({', '.join(['%s'] * len(names))})",
                    [v for i in range(3) for n in names for v in (n, ran[n][i])] + names))
    added = dict(added or {})
    if added:
        names = list(added)
        done = {n: (written or {}).get(n, 0) for n in names}
        marks = ", ".join(["%s"] * len(names))
        cases = " ".join(["WHEN %s THEN %s"] * len(names))
        out.append((f"UPDATE freshview.views SET `rows` = COALESCE(`rows`, 0) + CASE name {cases} ELSE 0 END, "
                    f"changes_applied = changes_applied + CASE name {cases} ELSE 0 END, "
                    f"lag_ms = %s, updated_at = CURRENT_TIMESTAMP(6) WHERE name IN ({marks})",
                    [v for n in names for v in (n, added[n])] + [v for n in names for v in (n, done[n])]
                    + [lag_ms] + names))
    out.append((f"UPDATE freshview.views SET position = %s WHERE status = 'active' AND {_OWNED}",
                [position, spell(source)]))
    out.append(("INSERT INTO freshview.progress (source, position, steps, changes, lag_ms, status, heartbeat_at) "
                "VALUES (%s, %s, 1, %s, %s, 'running', CURRENT_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "
                "position = VALUES(position), steps = steps + 1, changes = changes + VALUES(changes), "
                "lag_ms = VALUES(lag_ms), status = 'running', heartbeat_at = VALUES(heartbeat_at), "
                "updated_at = CURRENT_TIMESTAMP(6)", [source, position, changes, lag_ms]))
    return out


def activate_view(conn: Any, name: str, sql: str, rows: int, position: str | None) -> None:
    """A view's table is filled: it is active, holds ``rows`` rows at ``position``.  IN THE CALLER'S
    TRANSACTION (no commit)."""
    _run(conn, "INSERT INTO freshview.views (name, `sql`, status, `rows`, position) VALUES (%s, %s, 'active', %s, %s) "
               "ON DUPLICATE KEY UPDATE `sql` = VALUES(`sql`), status = 'active', error = NULL, phase = NULL, "
               "`rows` = VALUES(`rows`), position = VALUES(position), updated_at = CURRENT_TIMESTAMP(6)",
         (name, sql, rows, position))


def record_position(conn: Any, source: str, position: str) -> None:
    """A position reached without result changes (transactions of no followed table); commits."""
    _run(conn, "INSERT INTO freshview.progress (source, position) VALUES (%s, %s) "
               "ON DUPLICATE KEY UPDATE position = VALUES(position), updated_at = CURRENT_TIMESTAMP(6)",
         (source, position))
    _run(conn, f"UPDATE freshview.views SET position = %s WHERE status = 'active' AND {_OWNED}", (position, spell(source)))
    conn.commit()


def read_position(conn: Any, source: str) -> str | None:
    """The position whose effects the result tables hold (``None``: no step committed yet)."""
    rows = _run(conn, "SELECT position FROM freshview.progress WHERE source = %s", (source,))
    conn.commit()  # end the read's transaction: the next read sees newer commits
    return rows[0][0] if rows else None


def read_status(conn: Any, source: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What ``freshview status`` shows: the service's progress row (with ``heartbeat_age_s``; the CLI
    words it, ``service.status.describe``) and its views."""
    def rows(statement: str, params: Any) -> list[dict[str, Any]]:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    found = rows("SELECT status, position, steps, changes, lag_ms, "
                 "TIMESTAMPDIFF(MICROSECOND, heartbeat_at, CURRENT_TIMESTAMP(6)) / 1e6 AS heartbeat_age_s, "
                 "updated_at FROM freshview.progress WHERE source = %s", (source,))
    service = found[0] if found else {"status": "never started"}
    views = rows(f"SELECT name, status, phase, rows_read, rows_total, elapsed_s, `rows`, lag_ms, changes_applied, "
                 f"position, error, created_at, updated_at FROM freshview.views "
                 f"WHERE {_OWNED} ORDER BY name", (spell(source),))
    conn.commit()
    return service, views


@guarded(faults.classify)
class MySqlControl:
    """``base.ControlSchema`` on the connector's autocommit connection; ``source``: the followed database."""

    def __init__(self, conn: Any, source: str) -> None:
        self.conn = conn
        self.source = source

    def is_installed(self) -> bool:
        return is_installed(self.conn)

    def start(self) -> None:
        """A view left ``creating`` is forgotten, with its table if one was made (MySQL's CREATE TABLE
        commits on its own); its request, still running, is retried or failed (service.requests.recover)."""
        heartbeat(self.conn, self.source, "starting")
        for name, existing in _run(self.conn, "SELECT name, existing FROM freshview.views WHERE status IN "
                                              f"('creating', 'populating') AND {_OWNED}", (spell(self.source),)):
            if not existing:  # (a table the user made stays)
                _run(self.conn, f"DROP TABLE IF EXISTS {parse_table_name(name).quoted}")
            delete_view(self.conn, name)
        # an alter_view interrupted: before its swap the old view goes on; during it, the view is rebuilt
        _run(self.conn, "UPDATE freshview.views SET status = IF(phase = 'swapping', 'rebuilding', status), "
                        "error = IF(phase = 'swapping', %s, error), phase = NULL "
                        f"WHERE status = 'active' AND phase IS NOT NULL AND {_OWNED}",
             (INTERRUPTED_ALTER, spell(self.source)))
        # (an alter of a failed view: it stays failed until its request, retried, swaps it in)
        _run(self.conn, "UPDATE freshview.views SET phase = NULL WHERE status IN ('failed', 'sink error') "
                        f"AND phase IS NOT NULL AND {_OWNED}", (spell(self.source),))
        self.conn.commit()

    def interrupted_requests(self) -> list[Request]:
        return interrupted_requests(self.conn, self.source)

    def requeue_request(self, request_id: int) -> None:
        requeue_request(self.conn, request_id)

    def next_request(self) -> Request | None:
        return next_request(self.conn, self.source)

    def finish_request(self, request_id: int, error: str | None = None) -> None:
        finish_request(self.conn, request_id, error)

    def views(self) -> list[tuple[str, str, str]]:
        return [tuple(r) for r in _run(self.conn, f"SELECT name, `sql`, status FROM freshview.views WHERE {_OWNED} "
                                                  "ORDER BY created_at, name", (spell(self.source),))]

    def view(self, name: str) -> tuple[str, str] | None:
        rows = _run(self.conn, "SELECT `sql`, status FROM freshview.views WHERE name = %s", (name,))
        return tuple(rows[0]) if rows else None

    def relation_exists(self, name: str) -> bool:
        database, table = split_table_name(name)
        return bool(_run(self.conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                                    "TABLE_NAME = %s", (database, table)))

    def begin_create(self, name: str, sql: str, owner: str | None = None, existing: bool = False) -> None:
        _run(self.conn, "INSERT IGNORE INTO freshview.views (name, `sql`, status, owner, phase, existing) VALUES "
                        "(%s, %s, 'populating', %s, 'reading', %s)", (name, sql, owner, existing))
        self.conn.commit()

    def drop_refusal(self, name: str, requester: str | None) -> str | None:
        row = _run(self.conn, "SELECT owner FROM freshview.views WHERE name = %s", (name,))
        service = _run(self.conn, "SELECT CURRENT_USER()")[0][0]
        return drop_refusal(name, requester, row[0][0] if row else None, admins=("root", _account(service)))

    def owners(self) -> dict[str, str | None]:
        rows = _run(self.conn, f"SELECT name, owner FROM freshview.views WHERE {_OWNED}", (spell(self.source),))
        self.conn.commit()
        return {name: owner for name, owner in rows}

    def denial(self, request_id: int) -> str | None:
        return None  # create_view's probe fails the CALL itself, with MariaDB's message naming the column

    def abandon_create(self, name: str) -> None:
        _run(self.conn, "DELETE FROM freshview.views WHERE name = %s AND status IN ('creating', 'populating')",
             (name,))
        self.conn.commit()

    def mark_rebuilding(self, reason: str, names: Sequence[str] | None = None) -> None:
        if names is not None and not names:
            return
        only = "" if names is None else f" AND name IN ({', '.join(['%s'] * len(names))})"
        _run(self.conn, "UPDATE freshview.views SET status = 'rebuilding', error = %s, "
                        f"updated_at = CURRENT_TIMESTAMP(6) WHERE status = 'active' AND {_OWNED}{only}",
             (reason, spell(self.source), *(names or ())))
        self.conn.commit()

    def mark_failed(self, name: str, error: str, status: str = "failed") -> None:
        set_view_status(self.conn, name, status, error=error)

    def set_sql(self, name: str, sql: str) -> None:
        _run(self.conn, "UPDATE freshview.views SET `sql` = %s, updated_at = CURRENT_TIMESTAMP(6) WHERE name = %s",
             (sql, name))
        self.conn.commit()

    def show_population(self, name: str, phase: str, rows_read: int, rows_total: int | None,
                        elapsed_s: float) -> None:
        _run(self.conn, "UPDATE freshview.views SET phase = %s, rows_read = %s, rows_total = %s, elapsed_s = %s, "
                        "updated_at = CURRENT_TIMESTAMP(6) WHERE name = %s AND "
                        "(status IN ('populating', 'rebuilding') OR (status IN ('active', 'failed', 'sink error') "
                        "AND phase IS NOT NULL))",
             (phase, rows_read, rows_total, elapsed_s, name))
        self.conn.commit()

    def show_alter(self, name: str, phase: str | None) -> None:
        _run(self.conn, "UPDATE freshview.views SET phase = %s, rows_read = NULL, rows_total = NULL, "
                        "elapsed_s = NULL WHERE name = %s AND status IN ('active', 'failed', 'sink error')",
             (phase, name))
        self.conn.commit()

    def uses_existing_table(self, request_id: int) -> bool:
        """The request asked to fill a table the user made (``create_view_use_existing_table``)."""
        rows = _run(self.conn, "SELECT existing FROM freshview.requests WHERE id = %s", (request_id,))
        return bool(rows and rows[0][0])

    def record_verification(self, name: str, result: str, detail: str, request_id: int | None) -> None:
        """A verification's outcome on the view's row and as its request's answer, in one transaction."""
        try:
            _run(self.conn, "UPDATE freshview.views SET verified_at = CURRENT_TIMESTAMP(6), verify_result = %s, "
                            "verify_detail = %s WHERE name = %s", (result, detail, name))
            if request_id is not None:
                equal = result == "equal"
                _run(self.conn, "UPDATE freshview.requests SET state = %s, error = %s, result = %s, "
                                "finished_at = CURRENT_TIMESTAMP(6) WHERE id = %s",
                     ("done" if equal else "failed", None if equal else detail, detail if equal else None,
                      request_id))
            self.conn.commit()
        except BaseException:
            faults.rollback_quietly(self.conn)
            raise

    def heartbeat(self, status: str) -> None:
        heartbeat(self.conn, self.source, status)

    def close(self) -> None:
        self.conn.close()


__all__ = ["MySqlControl", "read_status", "activate_view", "record_position", "Request", "install", "is_installed", "next_request", "finish_request", "requeue_running",
           "interrupted_requests", "requeue_request",
           "set_view_status", "set_view_rows", "set_view_lag", "delete_view", "heartbeat", "write_step",
           "read_position", "USER_PROCEDURES", "DATABASE"]
