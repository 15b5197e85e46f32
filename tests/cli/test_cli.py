"""The administrator's commands: setup, status, and run refusing a database that was not set up."""

from __future__ import annotations

import psycopg
import psycopg.conninfo
import pytest
from typer.testing import CliRunner

from freshview.cli.app import app, redact
from tests.support.service import fresh_database


def with_password(dsn: str, password: str = "s3cret-pw") -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["password"] = password  # the test server trusts every local connection; it must not leak
    return psycopg.conninfo.make_conninfo(**params)


@pytest.fixture
def bare_database(pg):
    """A database without the freshview schema."""
    with fresh_database(pg) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA freshview CASCADE")
            conn.execute("DROP PUBLICATION freshview")
        yield dsn


def test_redact_removes_the_password():
    assert "s3cret" not in redact("postgresql://u:s3cret@h:5/db")
    assert "s3cret" not in redact("host=h password=s3cret dbname=db")


def test_setup_installs_the_schema_and_advises(bare_database):
    with psycopg.connect(bare_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE keyed (id int PRIMARY KEY, v int)")
        conn.execute("CREATE TABLE loose (a int, b int)")
        conn.execute("CREATE TABLE wide (a int, b int)")
    dsn = with_password(bare_database)
    result = CliRunner().invoke(app, ["setup", "--replica-identity-full", "wide", "--table", "keyed"],
                                env={"FRESHVIEW_DSN": dsn, "COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "s3cret-pw" not in result.output
    assert "CREATE ROLE freshview LOGIN REPLICATION" in result.output
    assert "GRANT SELECT ON public.keyed TO freshview" in result.output
    assert "max_slot_wal_keep_size" in result.output
    assert "ALTER TABLE public.loose REPLICA IDENTITY FULL" in result.output  # the fix for an unfollowable table
    with psycopg.connect(bare_database, autocommit=True) as conn:
        assert conn.execute("SELECT to_regprocedure('freshview.create_view(text,text,double precision,boolean,boolean)')"
                            ).fetchone()[0] is not None
        assert conn.execute("SELECT to_regprocedure('freshview.create_view_async(text,text)')").fetchone()[0] is not None
        assert conn.execute("SELECT relreplident FROM pg_class WHERE relname = 'wide'").fetchone()[0] == "f"
        published = conn.execute("SELECT tablename FROM pg_publication_tables WHERE pubname = 'freshview'"
                                 ).fetchall()
        assert published == [("keyed",)]
    again = CliRunner().invoke(app, ["setup", "--dsn", dsn, "--apply-role", "--role", "fv_svc_test"])
    assert again.exit_code == 0, again.output
    with psycopg.connect(bare_database, autocommit=True) as conn:
        assert conn.execute("SELECT rolreplication FROM pg_roles WHERE rolname = 'fv_svc_test'").fetchone()[0]
        conn.execute("REASSIGN OWNED BY fv_svc_test TO CURRENT_USER")
        conn.execute("DROP OWNED BY fv_svc_test")
        conn.execute("DROP ROLE fv_svc_test")


def test_status_before_and_without_a_service(database):
    dsn = with_password(database)
    result = CliRunner().invoke(app, ["status", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    assert "never started" in result.output and "s3cret-pw" not in result.output
    as_json = CliRunner().invoke(app, ["status", "--dsn", dsn, "--json"])
    assert as_json.exit_code == 0 and '"views": []' in as_json.output


def test_commands_refuse_a_database_without_setup(bare_database):
    for command in (["status"], ["run", "--state-dir", "/tmp/fv-never-used"]):
        result = CliRunner().invoke(app, command + ["--dsn", with_password(bare_database)])
        assert result.exit_code == 1, result.output
        assert "freshview setup" in result.output and "s3cret-pw" not in result.output


def test_commands_need_a_dsn():
    result = CliRunner().invoke(app, ["status"], env={"FRESHVIEW_DSN": ""})
    assert result.exit_code == 2 and "FRESHVIEW_DSN" in result.output


class _FakeService:
    """Stands in for Service: records what ``freshview run`` built, returns from run() at once."""

    made: list["_FakeService"] = []

    def __init__(self, dsn, state_dir, **kwargs):
        self.dsn, self.state_dir, self.kwargs = dsn, state_dir, kwargs
        _FakeService.made.append(self)

    def run(self):
        pass

    def stop(self):
        pass


@pytest.mark.parametrize("args, expected", [(["--execution", "spark"], "spark"), ([], "auto"),
                                            (["--execution", "local"], "local")])
def test_run_passes_the_execution_mode_to_the_service(monkeypatch, tmp_path, args, expected):
    import freshview.service.service as service_module

    monkeypatch.setattr(service_module, "Service", _FakeService)
    _FakeService.made.clear()
    result = CliRunner().invoke(app, ["run", "--dsn", "dbname=none", "--state-dir", str(tmp_path), "--quiet"] + args)
    assert result.exit_code == 0, result.output
    [made] = _FakeService.made
    assert made.kwargs["options"].execution == expected


def test_run_refuses_an_unknown_execution_mode(tmp_path):
    result = CliRunner().invoke(app, ["run", "--dsn", "dbname=none", "--state-dir", str(tmp_path),
                                      "--execution", "gpu"])
    assert result.exit_code == 2 and "gpu" in result.output
