"""``freshview setup`` on MySQL/MariaDB: server checks (the test server, and bad variable sets) and GRANTs."""

from __future__ import annotations

import pymysql
import pytest

from freshview.connectors.base import ReadRights
from freshview.connectors.mysql import control
from freshview.connectors.mysql.access import MySqlGrants
from freshview.connectors.mysql.setup import (
    PASSWORD_PLACEHOLDER, check_server, grant_sql, server_info, setup)

GOOD_MARIADB = {"version": "10.11.6-MariaDB-0+deb12u1-log", "version_comment": "Debian 12", "log_bin": "ON",
                "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL", "server_id": "1",
                "expire_logs_days": "7.000000", "binlog_expire_logs_seconds": "604800"}
GOOD_MYSQL = {"version": "8.0.36", "version_comment": "MySQL Community Server - GPL", "log_bin": "ON",
              "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL", "server_id": "1",
              "binlog_expire_logs_seconds": "2592000", "gtid_mode": "ON", "enforce_gtid_consistency": "ON"}


def check(variables, **changes):
    return check_server(server_info({**variables, **changes}))


def test_good_servers_have_no_problems():
    assert check(GOOD_MARIADB) == ([], [])
    assert check(GOOD_MYSQL) == ([], [])
    assert server_info(GOOD_MARIADB).flavour == "mariadb" and server_info(GOOD_MARIADB).version == (10, 11, 6)
    assert server_info(GOOD_MYSQL).flavour == "mysql"


def test_each_bad_setting_names_its_fix():
    problems, _ = check(GOOD_MARIADB, log_bin="OFF", binlog_format="STATEMENT", binlog_row_image="MINIMAL",
                        binlog_row_metadata="NO_LOG")
    assert len(problems) == 4
    assert "log_bin = binlog in the [mariadb] section" in problems[0] and "restart" in problems[0]
    assert "binlog_format is STATEMENT" in problems[1] and "SET GLOBAL binlog_format = 'ROW';" in problems[1]
    assert "SET GLOBAL binlog_row_image = 'FULL';" in problems[2]
    assert "SET GLOBAL binlog_row_metadata = 'FULL';" in problems[3]
    mysql_problems, _ = check(GOOD_MYSQL, binlog_row_image="MINIMAL", gtid_mode="OFF", enforce_gtid_consistency="WARN")
    assert "SET PERSIST binlog_row_image = 'FULL';" in mysql_problems[0]
    assert "enforce_gtid_consistency is WARN" in mysql_problems[1]
    assert "gtid_mode is OFF" in mysql_problems[2] and "ON_PERMISSIVE" in mysql_problems[2]
    old = {k: v for k, v in GOOD_MARIADB.items() if k != "binlog_row_metadata"}
    problems, _ = check(old, version="10.3.39-MariaDB")
    assert "too old" in problems[0] and "no binlog_row_metadata setting" in problems[1]
    assert "server_id is 0" in check(GOOD_MYSQL, server_id="0")[0][0]


def test_retention_advice():
    _, forever = check(GOOD_MARIADB, expire_logs_days="0.000000", binlog_expire_logs_seconds="0")
    assert "never expire" in forever[0] and "binlog_expire_logs_seconds = '604800'" in forever[0]
    _, short = check(GOOD_MYSQL, binlog_expire_logs_seconds="3600")
    assert "kept only 3600 s" in short[0] and "rebuilds every view" in short[0]


def test_grants():
    assert grant_sql("mariadb", "freshview", "%", "app") == [
        f"CREATE USER IF NOT EXISTS 'freshview'@'%' IDENTIFIED BY '{PASSWORD_PLACEHOLDER}'",
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'freshview'@'%'",
        "GRANT SELECT ON `app`.* TO 'freshview'@'%'",
        "GRANT ALL PRIVILEGES ON `freshview`.* TO 'freshview'@'%'",
        "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP ON `app`.* TO 'freshview'@'%' WITH GRANT OPTION",
        "GRANT SELECT (User, Host, Select_priv, is_role, default_role) ON `mysql`.`user` TO 'freshview'@'%'",
        "GRANT SELECT ON `mysql`.`db` TO 'freshview'@'%'",
        "GRANT SELECT ON `mysql`.`tables_priv` TO 'freshview'@'%'",
        "GRANT SELECT ON `mysql`.`columns_priv` TO 'freshview'@'%'",
        "GRANT SELECT ON `mysql`.`roles_mapping` TO 'freshview'@'%'"]
    mysql = grant_sql("mysql", "o'brien", "10.0.0.%", "app", ["app_views"])
    assert mysql[1] == "GRANT REPLICATION SLAVE, REPLICATION CLIENT, RELOAD ON *.* TO 'o''brien'@'10.0.0.%'"
    assert "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP ON `app_views`.* TO 'o''brien'@'10.0.0.%' " \
           "WITH GRANT OPTION" in mysql
    assert mysql[-1] == "GRANT SELECT ON `mysql`.`columns_priv` TO 'o''brien'@'10.0.0.%'"  # no MariaDB roles
    assert "GRANT SELECT (User, Host, Select_priv) ON `mysql`.`user` TO 'o''brien'@'10.0.0.%'" in mysql


def test_setup_on_the_test_server(my, mysql_database, mariadb):
    with my.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS freshview")
    report = setup(my, user="fv_service", host="%")
    assert report.server.flavour == "mariadb" and report.problems == []
    assert control.is_installed(my)
    text = "\n".join(report.grants + report.problems + report.advice)
    assert PASSWORD_PLACEHOLDER in report.grants[0] and "secret" not in text
    # the statements are valid on the server, and give the service what it needs
    with my.cursor() as cur:
        cur.execute("DROP USER IF EXISTS 'fv_service'@'%'")
        try:
            for statement in report.grants + [g.replace("'app_user'@'%'", "'fv_service'@'%'")
                                              for g in report.user_grants]:
                cur.execute(statement.replace(PASSWORD_PLACEHOLDER, "secret"))
            service = pymysql.connect(**{**mysql_database, "user": "fv_service", "password": "secret"})
            try:
                with service.cursor() as scur:
                    scur.execute("SHOW BINLOG STATUS")  # BINLOG MONITOR
                    assert scur.fetchone()
                    scur.execute("CREATE TABLE fv_result (k int)")
                    scur.execute("GRANT SELECT ON fv_result TO 'fv_service'@'%'")  # to a view's requester
                    scur.execute("REVOKE SELECT ON fv_result FROM 'fv_service'@'%'")
                    scur.execute("DROP TABLE fv_result")
                assert control.next_request(service) is None
                # the requesters' grants (access.py)
                assert MySqlGrants(service).read_rights("fv_service@%", {f"{mysql_database['database']}.t": frozenset(
                    {"a"})}) == {f"{mysql_database['database']}.t": ReadRights()}
                with service.cursor() as scur, pytest.raises(pymysql.err.OperationalError, match="denied"):
                    scur.execute("SELECT authentication_string FROM mysql.user")  # no password hashes
            finally:
                service.close()
        finally:
            cur.execute("DROP USER IF EXISTS 'fv_service'@'%'")


def test_setup_needs_a_database(mariadb):
    conn = pymysql.connect(**mariadb)
    try:
        with pytest.raises(ValueError, match="no database to follow"):
            setup(conn)
    finally:
        conn.close()
