"""The ``freshview`` schema inside the user's database: status tables, requests, procedures.

This is how a database user talks to the service without leaving SQL.
``CALL freshview.create_view(name, sql)`` inserts a request, commits (so the
service can see it), then polls until the service marks it done or failed and
re-raises the service's message; after ``timeout_s`` seconds without an
answer it cancels the request and says that no service seems to run.
``freshview.views`` is the user-facing status of every view and
``freshview.progress`` the service's position in the change stream (the LSN
whose effects are in the result tables, committed with them).

Who may drop a view (``drop_refusal``): the role that created it (recorded
as the view's ``owner``), a member of that role, a superuser, or a member of
the role owning the ``freshview`` schema (the administrator who ran
``freshview setup``).  Requests carry ``session_user``, set by a SECURITY
DEFINER function, so a caller cannot claim to be someone else.

Callers need no rights on the request table: the queue is reached through
SECURITY DEFINER functions with a fixed search_path, as PostgreSQL's
documentation asks (the procedures cannot be SECURITY DEFINER themselves,
since such procedures may not COMMIT).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import psycopg
import psycopg.conninfo

from freshview.connectors.base import Request
from freshview.connectors.edge import guarded
from freshview.connectors.postgres import faults

SCHEMA = "freshview"
INTERRUPTED_ALTER = ("freshview: the service stopped while an alter_view swapped this view's definition; it is "
                     "rebuilt from the definition stored here")
PUBLICATION = "freshview"


def slot_name(dsn: str) -> str:
    """Slots are cluster-wide, so each database's service has its own: ``freshview_<database>``."""
    database = psycopg.conninfo.conninfo_to_dict(dsn).get("dbname") or "postgres"
    return "freshview_" + "".join(ch if ch.isalnum() else "_" for ch in str(database).lower())

SCHEMA_SQL = r"""
CREATE SCHEMA IF NOT EXISTS freshview;

CREATE TABLE IF NOT EXISTS freshview.views (
    name        text PRIMARY KEY,          -- the result table, schema-qualified
    sql         text NOT NULL,
    status      text NOT NULL,             -- populating | active | failed | sink error | rebuilding
    error       text,
    rows        bigint,
    lag_ms      double precision,          -- source commit to result commit, last change
    last_lsn    pg_lsn,                    -- source position whose effects the table holds
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
-- the role that created the view (requests.requested_by): it may drop it (see control.drop_refusal)
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS owner text;
-- while populating (service.population): reading | computing | catching up | ready, rows read of the
-- estimated total, seconds since the population started; updated about every 0.5 s
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS phase text;
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS rows_read bigint;
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS rows_total bigint;
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS elapsed_s double precision;
-- result row changes written to the view's table by steps since it was created
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS changes_applied bigint NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS freshview.requests (
    id           bigserial PRIMARY KEY,
    action       text NOT NULL CHECK (action IN ('create', 'drop')),
    name         text NOT NULL,
    sql          text,
    state        text NOT NULL DEFAULT 'pending',   -- pending | running | done | failed | cancelled
    error        text,
    requested_by text,                              -- gets SELECT on the result table
    requested_at timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);
-- how many times a service started working on the request (service.requests.after_crash)
ALTER TABLE freshview.requests ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0;
-- the database's refusal when create_view planned the query as the caller (see create_view)
ALTER TABLE freshview.requests ADD COLUMN IF NOT EXISTS denied text;
-- false: nobody waits for the answer (create_view_async, create_view(..., block_until_running => false));
-- a failure then shows in freshview.views
ALTER TABLE freshview.requests ADD COLUMN IF NOT EXISTS blocking boolean NOT NULL DEFAULT true;

-- verify_view (service.verify): requests to verify a view (and alter_view's), the answer besides an error
ALTER TABLE freshview.requests DROP CONSTRAINT IF EXISTS requests_action_check;
ALTER TABLE freshview.requests ADD CONSTRAINT requests_action_check
    CHECK (action IN ('create', 'drop', 'alter', 'verify'));
ALTER TABLE freshview.requests ADD COLUMN IF NOT EXISTS result text;   -- verify: 'equal at <position>'
-- the last verification of the view (verify_view, or freshview run --verify-every): when, equal | different |
-- error, and what it said ('equal at <position>', or the first differing rows, or why it could not verify)
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS verified_at timestamptz;
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS verify_result text;
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS verify_detail text;
-- each step that ran the view: delta rows it read (changes received; changes_applied: result rows written),
-- when, how long, on which executor (local | spark)
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS changes_received bigint NOT NULL DEFAULT 0;
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS last_step_at timestamptz;
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS last_step_ms double precision;
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS executor text;

-- use_existing_table (create_view): fill the table the user made (connectors/postgres/existing.py).  The
-- procedure says so through a transaction-local setting read by the column's default, so the queue's
-- functions stay as they are; views.existing keeps it for rebuilds and drop_view (which leaves such a table)
ALTER TABLE freshview.requests ADD COLUMN IF NOT EXISTS existing boolean NOT NULL
    DEFAULT coalesce(current_setting('freshview.use_existing_table', true), '') = 'on';
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS existing boolean NOT NULL DEFAULT false;
-- alter_view: when the view's definition was last changed (its new SQL swapped in with its rows)
ALTER TABLE freshview.views ADD COLUMN IF NOT EXISTS altered_at timestamptz;

CREATE TABLE IF NOT EXISTS freshview.progress (
    slot          text PRIMARY KEY,
    lsn           pg_lsn NOT NULL DEFAULT '0/0',
    steps         bigint NOT NULL DEFAULT 0,
    changes       bigint NOT NULL DEFAULT 0,   -- source row changes applied since setup
    lag_ms        double precision,
    changes_per_s double precision,
    status        text NOT NULL DEFAULT 'stopped',
    heartbeat_at  timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- The request queue is reached through SECURITY DEFINER functions so callers need no rights on it.
-- The procedures themselves cannot be SECURITY DEFINER: such procedures may not COMMIT, and they must,
-- or the service would never see the request.
DROP FUNCTION IF EXISTS freshview._submit(text, text, text);  -- before requests carried the probe's refusal
DROP FUNCTION IF EXISTS freshview._submit(text, text, text, text);  -- before non-blocking requests
CREATE OR REPLACE FUNCTION freshview._submit(action text, view_name text, query text, denied text,
                                             blocking boolean DEFAULT true)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    INSERT INTO freshview.requests (action, name, sql, requested_by, denied, blocking)
    VALUES (action, view_name, query, session_user, denied, blocking) RETURNING id
$fn$;

CREATE OR REPLACE FUNCTION freshview._poll(req bigint, OUT state text, OUT error text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT r.state, r.error FROM freshview.requests r WHERE r.id = req
$fn$;

CREATE OR REPLACE FUNCTION freshview._cancel(req bigint) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    UPDATE freshview.requests SET state = CASE WHEN state = 'pending' THEN 'cancelled' ELSE state END,
           finished_at = CASE WHEN state = 'pending' THEN now() ELSE finished_at END
    WHERE id = req RETURNING state
$fn$;

DROP PROCEDURE IF EXISTS freshview._request(text, text, text, double precision);
CREATE OR REPLACE PROCEDURE freshview._request(action text, view_name text, query text, timeout_s double precision,
                                               denied text)
LANGUAGE plpgsql AS $proc$
DECLARE
    req bigint;
    st text;
    err text;
    deadline timestamptz;
BEGIN
    req := freshview._submit(action, view_name, query, denied);
    COMMIT;  -- the service must see the request: this is why CALL cannot run inside BEGIN ... COMMIT
    deadline := clock_timestamp() + make_interval(secs => timeout_s);
    LOOP
        SELECT p.state, p.error INTO st, err FROM freshview._poll(req) p;
        EXIT WHEN st IN ('done', 'failed');
        IF clock_timestamp() > deadline THEN
            st := freshview._cancel(req);
            COMMIT;
            IF st = 'cancelled' AND denied IS NOT NULL THEN
                RAISE EXCEPTION 'freshview: permission denied for view %: %', view_name, denied
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF st = 'cancelled' THEN
                RAISE EXCEPTION 'freshview: no freshview service answered within % s; is `freshview run` running against this database? (request % cancelled)', timeout_s, req;
            END IF;
            RAISE EXCEPTION 'freshview: the service is still working on request % after % s%; see freshview.views and freshview.requests', req, timeout_s,
                COALESCE((SELECT format(' (%s is %s: %s, %s rows read%s, %s s)', v.name,
                                        CASE WHEN v.status = 'active' THEN 'being altered' ELSE 'populating' END,
                                        v.phase,
                                        COALESCE(v.rows_read, 0),
                                        COALESCE(' of ~' || v.rows_total, ''), round(v.elapsed_s::numeric, 1))
                          FROM freshview.views v WHERE v.name = freshview._qualified(view_name)
                          AND (v.status = 'populating' OR (v.status = 'active' AND v.phase IS NOT NULL))), '');
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
    IF st = 'failed' THEN
        RAISE EXCEPTION '%', err;
    END IF;
END
$proc$;

-- The probe: the query planned as the caller, so the database checks its own rules (table and column
-- privileges, schema USAGE, EXECUTE on functions) before the service computes anything with its rights.
-- The cursor is opened and closed without a fetch: PostgreSQL checks privileges when the executor
-- starts, and no row, function call or subquery is evaluated (planning alone folds immutable functions
-- of constants).  A cursor takes exactly one query, and wrapped in SELECT * FROM (...) it can only be a
-- SELECT (a data-modifying WITH must be at the top).
-- Other errors (bad SQL) are left to the service, whose messages give line and column.
-- A view's name as the service qualifies it (a bare name is the caller's current schema's, as the service's
-- default schema is public): what freshview.views is keyed by, for the timeout's progress message.
CREATE OR REPLACE FUNCTION freshview._qualified(view_name text) RETURNS text
LANGUAGE sql STABLE AS $fn$
    SELECT CASE WHEN position('.' IN view_name) > 0 THEN view_name ELSE 'public.' || view_name END
$fn$;

CREATE OR REPLACE FUNCTION freshview._probe(query text) RETURNS text
LANGUAGE plpgsql AS $fn$
DECLARE
    probe refcursor;
BEGIN
    OPEN probe FOR EXECUTE format(E'SELECT * FROM (%s\n) AS freshview_probe LIMIT 0',
                                  regexp_replace(query, '[\s;]+$', ''));
    CLOSE probe;
    RETURN NULL;
EXCEPTION
    WHEN insufficient_privilege THEN RETURN SQLERRM;
    WHEN OTHERS THEN RETURN NULL;
END
$fn$;

-- block_until_running => false (Epsio's name): return once the request is queued, the population going on;
-- its progress, then its status (active, or failed with the error) are in freshview.views.
DROP PROCEDURE IF EXISTS freshview.create_view(text, text, double precision);  -- before block_until_running
DROP PROCEDURE IF EXISTS freshview.create_view(text, text, double precision, boolean);  -- before use_existing_table
-- use_existing_table => true: fill the table named view_name, which the user made (see existing.py)
CREATE OR REPLACE PROCEDURE freshview.create_view(view_name text, query text, timeout_s double precision DEFAULT 120,
                                                  block_until_running boolean DEFAULT true,
                                                  use_existing_table boolean DEFAULT false)
LANGUAGE plpgsql AS $proc$
DECLARE
    denied text;
BEGIN
    denied := freshview._probe(query);
    PERFORM set_config('freshview.use_existing_table', CASE WHEN use_existing_table THEN 'on' ELSE '' END, true);
    IF NOT block_until_running THEN
        CALL freshview.create_view_async(view_name, query);
        RETURN;
    END IF;
    CALL freshview._request('create', view_name, query, timeout_s, denied);
END
$proc$;

CREATE OR REPLACE PROCEDURE freshview.create_view_async(view_name text, query text)
LANGUAGE plpgsql AS $proc$
DECLARE
    denied text;
BEGIN
    denied := freshview._probe(query);
    IF denied IS NOT NULL THEN  -- (a blocking CALL says so once no service answers: here, at once)
        RAISE EXCEPTION 'freshview: permission denied for view %: %', view_name, denied
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM freshview._submit('create', view_name, query, denied, false);
    COMMIT;  -- the service must see the request
END
$proc$;

-- alter_view(name, sql): the view's new definition, checked as create_view's, populated beside the old one
-- (which goes on) and swapped into its table in one transaction (README: alter_view)
CREATE OR REPLACE PROCEDURE freshview.alter_view(view_name text, query text, timeout_s double precision DEFAULT 120)
LANGUAGE plpgsql AS $proc$
BEGIN
    CALL freshview._request('alter', view_name, query, timeout_s, freshview._probe(query));
END
$proc$;

CREATE OR REPLACE PROCEDURE freshview.drop_view(view_name text, timeout_s double precision DEFAULT 60)
LANGUAGE plpgsql AS $proc$
BEGIN
    CALL freshview._request('drop', view_name, NULL, timeout_s, NULL);
END
$proc$;

-- verify_view(name): the service compares the view's result table with its SQL computed by the database at
-- one position (service.verify); raises with the first differing rows, or returns 'equal at <position>'.
-- The caller must be able to read the result table (the differences show its rows and the SQL's).
CREATE OR REPLACE FUNCTION freshview._answer(view_name text) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT r.result FROM freshview.requests r WHERE r.action = 'verify' AND r.name = view_name
        AND r.requested_by = session_user AND r.state = 'done' ORDER BY r.id DESC LIMIT 1
$fn$;

CREATE OR REPLACE PROCEDURE freshview.verify_view(view_name text, timeout_s double precision DEFAULT 300,
                                                  INOUT result text DEFAULT NULL)
LANGUAGE plpgsql AS $proc$
BEGIN
    IF to_regclass(view_name) IS NOT NULL AND NOT has_table_privilege(view_name, 'SELECT') THEN
        RAISE EXCEPTION 'freshview: permission denied to verify view %: verifying shows its rows, and you may not '
            'SELECT from it', view_name USING ERRCODE = 'insufficient_privilege';
    END IF;
    CALL freshview._request('verify', view_name, NULL, timeout_s, NULL);
    result := freshview._answer(view_name);
    RAISE NOTICE '%', result;
END
$proc$;

GRANT USAGE ON SCHEMA freshview TO PUBLIC;
GRANT SELECT ON freshview.views, freshview.progress TO PUBLIC;
"""


@dataclass(frozen=True)
class DropRights:
    """What the database says about the role asking to drop a view (``drop_rights``)."""

    requester: str | None
    owner: str | None  # the view's creator; None for views created before owners were recorded
    superuser: bool = False
    member_of_owner: bool = False  # pg_has_role(requester, owner, 'MEMBER'): the creator itself included
    schema_admin: bool = False  # member of the role owning the freshview schema


def drop_refusal(view: str, rights: DropRights) -> str | None:
    """Why ``rights.requester`` may not drop ``view``, or None when it may."""
    if rights.superuser or rights.schema_admin or rights.member_of_owner:
        return None
    if rights.owner is not None and rights.requester == rights.owner:
        return None
    who = (f"the role that created it ({rights.owner}), a member of that role" if rights.owner
           else "no creator is recorded for it, so only")
    return (f"freshview: permission denied to drop view {view} for role {rights.requester or '(unknown)'}: "
            f"{who}, a superuser or the freshview schema's owner may drop it")


def drop_rights(conn: psycopg.Connection, requester: str | None, owner: str | None) -> DropRights:
    """Ask the database about ``requester``: superuser, member of ``owner``, member of the schema's owner."""
    if requester is None:
        return DropRights(None, owner)
    row = conn.execute(
        "SELECT r.rolsuper, "
        " CASE WHEN %(owner)s::text IS NULL OR NOT EXISTS (SELECT 1 FROM pg_roles o WHERE o.rolname = %(owner)s) "
        "   THEN false ELSE pg_has_role(r.oid, (SELECT o.oid FROM pg_roles o WHERE o.rolname = %(owner)s), "
        "   'MEMBER') END, "
        " pg_has_role(r.oid, (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = %(schema)s), 'MEMBER') "
        "FROM pg_roles r WHERE r.rolname = %(requester)s",
        {"requester": requester, "owner": owner, "schema": SCHEMA}).fetchone()
    if row is None:  # the role is gone
        return DropRights(requester, owner)
    return DropRights(requester, owner, bool(row[0]), bool(row[1]), bool(row[2]))


def install(conn: psycopg.Connection) -> None:
    """Create or upgrade the freshview schema and the (initially empty) publication."""
    with conn.transaction():
        conn.execute(SCHEMA_SQL)
        exists = conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (PUBLICATION,)).fetchone()
        # a partitioned table's changes are published as its root's, the table freshview follows
        if not exists:
            conn.execute(f"CREATE PUBLICATION {PUBLICATION} WITH (publish_via_partition_root = true)")
        elif not exists[0]:
            conn.execute(f"ALTER PUBLICATION {PUBLICATION} SET (publish_via_partition_root = true)")


def is_installed(conn: psycopg.Connection) -> bool:
    """The schema is there, at this version (an older one is upgraded by ``freshview setup``)."""
    return conn.execute("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('freshview.requests') "
                        "AND attname = 'blocking') AND EXISTS (SELECT 1 FROM pg_attribute WHERE "
                        "attrelid = to_regclass('freshview.views') AND attname = 'phase')").fetchone()[0]


def is_verifiable(conn: psycopg.Connection) -> bool:
    """The schema has verify_view's columns, use_existing_table's and alter_view's (an older one is upgraded by
    ``freshview setup``)."""
    return conn.execute("SELECT count(*) = 2 FROM pg_attribute WHERE attrelid = to_regclass('freshview.views') "
                        "AND attname IN ('existing', 'altered_at') AND NOT attisdropped").fetchone()[0]


def next_request(conn: psycopg.Connection) -> Request | None:
    """Claim the oldest pending request (marks it running, counts the attempt, commits)."""
    with conn.transaction():
        row = conn.execute(
            "UPDATE freshview.requests SET state = 'running', attempts = attempts + 1 WHERE id = ("
            " SELECT id FROM freshview.requests WHERE state = 'pending' ORDER BY id LIMIT 1"
            " FOR UPDATE SKIP LOCKED) RETURNING id, action, name, sql, requested_by, attempts, blocking").fetchone()
    return Request(*row) if row else None


def finish_request(conn: psycopg.Connection, request_id: int, error: str | None = None) -> None:
    conn.execute("UPDATE freshview.requests SET state = %s, error = %s, finished_at = now() WHERE id = %s",
                 ("failed" if error else "done", error, request_id))


def interrupted_requests(conn: psycopg.Connection) -> list[Request]:
    """Requests a killed service was working on (``running``), oldest first."""
    return [Request(*row) for row in conn.execute(
        "SELECT id, action, name, sql, requested_by, attempts, blocking FROM freshview.requests WHERE state = 'running' "
        "ORDER BY id").fetchall()]


def requeue_request(conn: psycopg.Connection, request_id: int) -> None:
    conn.execute("UPDATE freshview.requests SET state = 'pending' WHERE id = %s AND state = 'running'",
                 (request_id,))


@guarded(faults.classify)
class PostgresControl:
    """``base.ControlSchema`` on one autocommit connection (the service's)."""

    def __init__(self, conn: psycopg.Connection, slot: str) -> None:
        self.conn = conn
        self.slot = slot

    def is_installed(self) -> bool:
        return is_installed(self.conn) and is_verifiable(self.conn)

    def start(self) -> None:
        self.conn.execute("INSERT INTO freshview.progress (slot) VALUES (%s) ON CONFLICT DO NOTHING", (self.slot,))
        # their requests are still running: retried or failed (service.requests.recover)
        self.conn.execute("DELETE FROM freshview.views WHERE status IN ('creating', 'populating')")
        # an alter_view interrupted: before its swap the old view goes on; during it, the view is rebuilt
        self.conn.execute("UPDATE freshview.views SET status = CASE WHEN phase = 'swapping' THEN 'rebuilding' "
                          "ELSE status END, error = CASE WHEN phase = 'swapping' THEN %s ELSE error END, "
                          "phase = NULL WHERE status = 'active' AND phase IS NOT NULL", (INTERRUPTED_ALTER,))
        # (an alter of a failed view: it stays failed until its request, retried, swaps it in)
        self.conn.execute("UPDATE freshview.views SET phase = NULL WHERE status IN ('failed', 'sink error') "
                          "AND phase IS NOT NULL")

    def interrupted_requests(self) -> list[Request]:
        return interrupted_requests(self.conn)

    def requeue_request(self, request_id: int) -> None:
        requeue_request(self.conn, request_id)

    def next_request(self) -> Request | None:
        return next_request(self.conn)

    def finish_request(self, request_id: int, error: str | None = None) -> None:
        with self.conn.transaction():
            finish_request(self.conn, request_id, error)

    def views(self) -> list[tuple[str, str, str]]:
        return self.conn.execute("SELECT name, sql, status FROM freshview.views ORDER BY created_at, name").fetchall()

    def view(self, name: str) -> tuple[str, str] | None:
        return self.conn.execute("SELECT sql, status FROM freshview.views WHERE name = %s", (name,)).fetchone()

    def relation_exists(self, name: str) -> bool:
        return self.conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None

    def begin_create(self, name: str, sql: str, owner: str | None = None, existing: bool = False) -> None:
        with self.conn.transaction():
            self.conn.execute("INSERT INTO freshview.views (name, sql, status, owner, phase, existing) VALUES (%s, %s, "
                              "'populating', %s, 'reading', %s) ON CONFLICT (name) DO NOTHING",
                              (name, sql, owner, existing))

    def drop_refusal(self, name: str, requester: str | None) -> str | None:
        row = self.conn.execute("SELECT owner FROM freshview.views WHERE name = %s", (name,)).fetchone()
        return drop_refusal(name, drop_rights(self.conn, requester, row[0] if row else None))

    def owners(self) -> dict[str, str | None]:
        return dict(self.conn.execute("SELECT name, owner FROM freshview.views").fetchall())

    def denial(self, request_id: int) -> str | None:
        row = self.conn.execute("SELECT denied FROM freshview.requests WHERE id = %s", (request_id,)).fetchone()
        return row[0] if row else None

    def abandon_create(self, name: str) -> None:
        self.conn.execute("DELETE FROM freshview.views WHERE name = %s AND status IN ('creating', 'populating')",
                          (name,))

    def mark_rebuilding(self, reason: str, names: Sequence[str] | None = None) -> None:
        with self.conn.transaction():
            self.conn.execute("UPDATE freshview.views SET status = 'rebuilding', error = %s, updated_at = now() "
                              "WHERE status = 'active' AND (%s::text[] IS NULL OR name = ANY(%s::text[]))",
                              (reason, *[None if names is None else list(names)] * 2))

    def mark_failed(self, name: str, error: str, status: str = "failed") -> None:
        self.conn.execute("UPDATE freshview.views SET status = %s, error = %s, phase = NULL, updated_at = now() "
                          "WHERE name = %s", (status, error, name))

    def set_sql(self, name: str, sql: str) -> None:
        self.conn.execute("UPDATE freshview.views SET sql = %s, updated_at = now() WHERE name = %s", (sql, name))

    def show_population(self, name: str, phase: str, rows_read: int, rows_total: int | None,
                        elapsed_s: float) -> None:
        self.conn.execute("UPDATE freshview.views SET phase = %s, rows_read = %s, rows_total = %s, elapsed_s = %s, "
                          "updated_at = now() WHERE name = %s AND (status IN ('populating', 'rebuilding') "
                          "OR (status IN ('active', 'failed', 'sink error') AND phase IS NOT NULL))",
                          (phase, rows_read, rows_total, elapsed_s, name))

    def show_alter(self, name: str, phase: str | None) -> None:
        self.conn.execute("UPDATE freshview.views SET phase = %s, rows_read = NULL, rows_total = NULL, "
                          "elapsed_s = NULL WHERE name = %s AND status IN ('active', 'failed', 'sink error')",
                          (phase, name))

    def record_verification(self, name: str, result: str, detail: str, request_id: int | None) -> None:
        """A verification's outcome (``service.verify``): on the view's row, and as its request's answer (an
        error unless equal)."""
        with self.conn.transaction():
            self.conn.execute("UPDATE freshview.views SET verified_at = now(), verify_result = %s, "
                              "verify_detail = %s WHERE name = %s", (result, detail, name))
            if request_id is not None:
                equal = result == "equal"
                self.conn.execute("UPDATE freshview.requests SET state = %s, error = %s, result = %s, "
                                  "finished_at = now() WHERE id = %s",
                                  ("done" if equal else "failed", None if equal else detail,
                                   detail if equal else None, request_id))

    def uses_existing_table(self, request_id: int) -> bool:
        """The request asked to fill a table the user made (``create_view(..., use_existing_table => true)``)."""
        row = self.conn.execute("SELECT existing FROM freshview.requests WHERE id = %s", (request_id,)).fetchone()
        return bool(row and row[0])

    def heartbeat(self, status: str) -> None:
        self.conn.execute("UPDATE freshview.progress SET heartbeat_at = now(), status = %s WHERE slot = %s",
                          (status, self.slot))

    def close(self) -> None:
        self.conn.close()
