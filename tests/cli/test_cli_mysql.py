"""``freshview setup`` / ``status`` / ``run`` with a ``mysql://`` DSN, against the test MariaDB."""

from __future__ import annotations

import pymysql
import pytest
from typer.testing import CliRunner

from freshview.cli.app import app, redact


def dsn_of(args: dict, password: str = "", scheme: str = "mysql") -> str:
    return f"{scheme}://{args['user']}:{password}@{args['host']}:{args['port']}/{args['database']}"


def test_redact_removes_the_mysql_password():
    assert redact("mysql://svc:s3cret@db:3307/app") == "mysql://svc@db:3307/app"
    assert "s3cret" not in redact("mariadb://svc:s3cret@db/app")


@pytest.mark.parametrize("scheme", ["mysql", "mariadb"])
def test_setup_installs_the_control_database_and_prints_grants(mysql_database, scheme):
    dsn = dsn_of(mysql_database, mysql_database.get("password") or "", scheme)
    result = CliRunner().invoke(app, ["setup", "--dsn", dsn, "--role", "fv_svc"])
    assert result.exit_code == 0, result.output
    assert "freshview database installed" in result.output
    assert "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'fv_svc'@'%'" in result.output
    assert f"GRANT SELECT ON `{mysql_database['database']}`.* TO 'fv_svc'@'%'" in result.output
    assert "GRANT EXECUTE ON PROCEDURE freshview.create_view" in result.output
    assert "<a password of your choice>" in result.output  # never a real one
    with pymysql.connect(**mysql_database) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'freshview' "
                    "AND ROUTINE_NAME = 'create_view'")
        assert cur.fetchone()[0] == 1


def test_setup_never_prints_the_password(mysql_database):
    result = CliRunner().invoke(app, ["setup", "--dsn", dsn_of(mysql_database, "wrong-s3cret")])
    assert result.exit_code == 1
    assert "wrong-s3cret" not in result.output
    assert "cannot connect" in result.output


def test_status_without_a_service(mysql_database):
    dsn = dsn_of(mysql_database, mysql_database.get("password") or "")
    assert CliRunner().invoke(app, ["setup", "--dsn", dsn]).exit_code == 0
    result = CliRunner().invoke(app, ["status", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    assert "service:" in result.output and "views" in result.output
    as_json = CliRunner().invoke(app, ["status", "--dsn", dsn, "--json"])
    assert as_json.exit_code == 0 and '"views": []' in as_json.output


def test_run_with_a_mysql_dsn_starts_the_mysql_service(monkeypatch, tmp_path):
    seen = {}

    class FakeService:
        def __init__(self, dsn, directory, **kwargs):
            seen["dsn"], seen["directory"] = dsn, directory

        def run(self):
            pass

        def stop(self):
            pass

    monkeypatch.setattr("freshview.service.service.Service", FakeService)
    monkeypatch.setenv("HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["run", "--dsn", "mysql://svc:pw@db:3306/app", "--quiet"])
    assert result.exit_code == 0, result.output
    assert seen["directory"].name == "mysql_db_3306_app"
