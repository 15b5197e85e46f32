"""Access on PostgreSQL, end to end: a view runs with its requester's rights, not the service's.

Each requester is a LOGIN role connecting as itself (``session_user`` is what
the request records; ``SET ROLE`` would not change it).  The service runs as
the test cluster's superuser, so it could read everything: these tests show
that it computes nothing a requester could not read, and that what it
computes is readable by exactly the requester and the roles that are members
of it.
"""

from __future__ import annotations

import psycopg
import psycopg.conninfo
import pytest

from freshview.service.core import ServiceOptions
from tests.support.service import wait_for_status

ROLES = ("fv_acc_nobody", "fv_acc_cols", "fv_acc_reader", "fv_acc_member", "fv_acc_owner")

SCHEMA = """
CREATE TABLE secret (id int PRIMARY KEY, a int, b text);
INSERT INTO secret SELECT g, g % 3, 'b' || g FROM generate_series(1, 20) g;
REVOKE ALL ON secret FROM PUBLIC;
GRANT SELECT (id, a) ON secret TO fv_acc_cols;
GRANT SELECT ON secret TO fv_acc_reader;
CREATE VIEW secret_names AS SELECT id, b FROM secret;        -- a plain view, with its owner's rights
GRANT SELECT ON secret_names TO fv_acc_nobody;
CREATE TABLE guarded (id int PRIMARY KEY, who text);
INSERT INTO guarded VALUES (1, 'fv_acc_reader'), (2, 'someone else');
ALTER TABLE guarded ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_rows ON guarded USING (who = current_user);
GRANT SELECT ON guarded TO fv_acc_reader;
ALTER TABLE guarded OWNER TO fv_acc_owner;
"""


def as_role(dsn: str, role: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["user"] = role
    return psycopg.conninfo.make_conninfo(**params)


@pytest.fixture
def secrets(database: str) -> str:
    with psycopg.connect(database, autocommit=True) as admin:
        for role in ROLES:
            admin.execute(f"DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN "
                          f"CREATE ROLE {role} LOGIN; END IF; END$$")
        admin.execute("GRANT fv_acc_reader TO fv_acc_member")
        admin.execute(SCHEMA)
    return database


def create(dsn: str, role: str, name: str, sql: str) -> None:
    with psycopg.connect(as_role(dsn, role), autocommit=True) as conn:
        conn.execute("CALL freshview.create_view(%s, %s, 60)", (name, sql))


def refused(dsn: str, role: str, name: str, sql: str) -> str:
    """The CALL's error; and nothing was made."""
    with pytest.raises(psycopg.Error) as caught:
        create(dsn, role, name, sql)
    with psycopg.connect(dsn, autocommit=True) as admin:
        assert admin.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is None
        assert admin.execute("SELECT count(*) FROM freshview.views WHERE name = %s", (name,)).fetchone()[0] == 0
    return caught.value.diag.message_primary or str(caught.value)


def can_read(dsn: str, role: str, table: str) -> bool:
    with psycopg.connect(as_role(dsn, role), autocommit=True) as conn:
        try:
            conn.execute(f"SELECT * FROM {table}").fetchall()
            return True
        except psycopg.errors.InsufficientPrivilege:
            return False


def test_a_view_is_refused_what_its_requester_cannot_read(secrets, start_service):
    start_service()
    # no privilege on the table: the database's own check names the table, the service the columns
    message = refused(secrets, "fv_acc_nobody", "public.leak", "SELECT * FROM secret")
    assert message == ("freshview: permission denied for view public.leak: role fv_acc_nobody may not SELECT "
                       "columns a, b, id of table public.secret")
    assert refused(secrets, "fv_acc_nobody", "public.leak", "SELECT COUNT(*) AS n FROM secret").endswith(
        "role fv_acc_nobody may not SELECT table public.secret")  # counting rows needs some column
    # a column it may not read, even one only filtered on or joined on
    assert refused(secrets, "fv_acc_cols", "public.leak", "SELECT id, b FROM secret").endswith(
        "role fv_acc_cols may not SELECT column b of table public.secret")
    assert refused(secrets, "fv_acc_cols", "public.leak", "SELECT id FROM secret WHERE b = 'b1'").endswith(
        "column b of table public.secret")
    # the columns it may read are fine, and the table is its to read
    create(secrets, "fv_acc_cols", "public.mine", "SELECT a, COUNT(*) AS n FROM secret GROUP BY a")
    assert can_read(secrets, "fv_acc_cols", "public.mine")
    # through a plain view over a table it cannot read: refused, whatever the view's owner may read
    refused(secrets, "fv_acc_nobody", "public.leak", "SELECT id, b FROM secret_names")
    # through another freshview view: its result table is its requester's, not everybody's
    create(secrets, "fv_acc_reader", "public.all_secrets", "SELECT id, a, b FROM secret")
    assert refused(secrets, "fv_acc_cols", "public.leak", "SELECT a FROM all_secrets").endswith(
        "role fv_acc_cols may not SELECT column a of table public.all_secrets")
    create(secrets, "fv_acc_member", "public.via_member", "SELECT b FROM all_secrets")  # a member of its requester
    assert can_read(secrets, "fv_acc_member", "public.via_member")
    # row-level security: freshview cannot apply a policy per reader, so only who bypasses it may
    message = refused(secrets, "fv_acc_reader", "public.leak", "SELECT * FROM guarded")
    assert "table public.guarded has row-level security enabled" in message
    assert "role fv_acc_reader does not bypass it" in message
    create(secrets, "fv_acc_owner", "public.owned", "SELECT who FROM guarded")  # the owner bypasses it ...
    with psycopg.connect(secrets, autocommit=True) as admin:
        assert admin.execute("SELECT count(*) FROM public.owned").fetchone()[0] == 2
        admin.execute("ALTER TABLE guarded FORCE ROW LEVEL SECURITY")
    assert "row-level security" in refused(secrets, "fv_acc_owner", "public.leak", "SELECT who FROM guarded")  # ... unless FORCEd


def test_the_database_checks_its_own_rules_as_the_caller(secrets, start_service):
    with psycopg.connect(secrets, autocommit=True) as admin:
        admin.execute("REVOKE EXECUTE ON FUNCTION upper(text) FROM PUBLIC")  # this database's copy only
    with psycopg.connect(as_role(secrets, "fv_acc_nobody"), autocommit=True) as conn:
        # no service runs: the CALL still says why, from the database's own check
        with pytest.raises(psycopg.errors.InsufficientPrivilege,
                           match="permission denied for view public.leak: permission denied for table secret"):
            conn.execute("CALL freshview.create_view('public.leak', 'SELECT * FROM secret', 0.5)")
    start_service()
    # a rule only the database knows (EXECUTE on a function): the service's column check passes, the probe does not
    message = refused(secrets, "fv_acc_reader", "public.leak", "SELECT upper(b) AS b FROM secret;")
    assert message == ("freshview: permission denied for view public.leak: the database refused role "
                       "fv_acc_reader's query: permission denied for function upper")
    create(secrets, "fv_acc_reader", "public.fine", "SELECT lower(b) AS b FROM secret -- a comment\n;")


def test_a_revoke_after_creation_fails_the_view_and_a_rebuild_keeps_the_grant(secrets, start_service, tmp_path):
    svc = start_service(options=ServiceOptions(poll_s=0.05, access_check_s=0.2))
    create(secrets, "fv_acc_cols", "public.cols_view", "SELECT id, a FROM secret")
    create(secrets, "fv_acc_reader", "public.reader_view", "SELECT a, COUNT(*) AS n FROM secret GROUP BY a")
    with psycopg.connect(as_role(secrets, "fv_acc_cols"), autocommit=True) as cols:  # shared on by its requester
        cols.execute("GRANT SELECT ON public.cols_view TO fv_acc_nobody")
    assert can_read(secrets, "fv_acc_nobody", "public.cols_view")
    with psycopg.connect(secrets, autocommit=True) as admin:
        admin.execute("REVOKE SELECT (a) ON secret FROM fv_acc_cols")
        status, error = wait_for_status(admin, "public.cols_view", "failed", timeout=30)
        assert status == "failed"
        assert error == ("freshview: permission denied for view public.cols_view: role fv_acc_cols may not SELECT "
                         "column a of table public.secret")
        assert not can_read(secrets, "fv_acc_cols", "public.cols_view")  # what it held is no longer its to read
        assert not can_read(secrets, "fv_acc_nobody", "public.cols_view")  # nor theirs it shared it with
        assert admin.execute("SELECT status FROM freshview.views WHERE name = 'public.reader_view'").fetchone()[0] \
            == "active"
        svc.stop()
        # a lost state directory: every view is rebuilt, with its requester's rights and grant
        admin.execute("REVOKE SELECT ON secret FROM fv_acc_reader")
        admin.execute("GRANT SELECT (a) ON secret TO fv_acc_reader")
        quiet = ServiceOptions(poll_s=0.05, access_check_s=3600)  # only the rebuild checks
        svc = start_service(state_dir=tmp_path / "second-state", options=quiet)
        assert wait_for_status(admin, "public.reader_view", "active", timeout=60)[0] == "active"
        assert can_read(secrets, "fv_acc_reader", "public.reader_view")
        svc.stop()
        admin.execute("REVOKE SELECT (a) ON secret FROM fv_acc_reader")
        start_service(state_dir=tmp_path / "third-state", options=quiet)
        status, error = wait_for_status(admin, "public.reader_view", "failed", timeout=60)
        assert status == "failed" and "role fv_acc_reader may not SELECT column a of table public.secret" in error
        assert not can_read(secrets, "fv_acc_reader", "public.reader_view")


def test_the_result_table_is_readable_by_exactly_the_requester_and_its_members(secrets, start_service):
    with psycopg.connect(secrets, autocommit=True) as admin:  # the service's default privileges would give it away
        admin.execute("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO PUBLIC")
        admin.execute("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO fv_acc_nobody")
    start_service()
    create(secrets, "fv_acc_reader", "public.readers", "SELECT a, COUNT(*) AS n FROM secret GROUP BY a")
    with psycopg.connect(secrets, autocommit=True) as admin:
        owner, acl = admin.execute("SELECT pg_get_userbyid(relowner), relacl::text[] FROM pg_class "
                                   "WHERE oid = 'public.readers'::regclass").fetchone()
        service_role = admin.info.user
    assert owner == service_role
    assert sorted(acl) == sorted([f"{service_role}=arwdDxt/{service_role}", f"fv_acc_reader=r*/{service_role}"])
    assert can_read(secrets, "fv_acc_reader", "public.readers")
    assert can_read(secrets, "fv_acc_member", "public.readers")  # a member of the requester's role
    assert not can_read(secrets, "fv_acc_nobody", "public.readers")
    assert not can_read(secrets, "fv_acc_cols", "public.readers")
    with psycopg.connect(as_role(secrets, "fv_acc_reader"), autocommit=True) as reader:  # the requester shares it
        reader.execute("GRANT SELECT ON public.readers TO fv_acc_cols")
    assert can_read(secrets, "fv_acc_cols", "public.readers")
    assert not can_read(secrets, "fv_acc_nobody", "public.readers")
