"""What ``freshview setup --dsn mysql://…`` checks, installs and recommends on a MySQL/MariaDB server.

Run once as an administrator: it installs the ``freshview`` database
(``control.install``), reads the server settings the binlog reader needs, and
produces the exact statements to fix them and the least-privilege GRANTs for
the service's user.  As on PostgreSQL (``service/setup.py``) everything is
returned as data (``SetupReport``) for the CLI to print.  The decisions are
pure functions of the server's variables (``check_server``, ``grant_sql``);
only ``read_server`` and ``setup`` talk to the server.  No password is ever
printed: the CREATE USER statement carries a placeholder.

What freshview needs: the binary log on (``log_bin``), ``binlog_format=ROW``,
``binlog_row_image=FULL`` (whole old and new rows), ``binlog_row_metadata=FULL``
(column names travel with the rows: MariaDB ≥ 10.5, MySQL ≥ 8.0.1), a
non-zero ``server_id``, GTIDs (always on in MariaDB; MySQL needs
``gtid_mode=ON``), and binlogs kept long enough to outlive an outage of the
service (otherwise it rebuilds its views from a new snapshot).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from freshview.connectors.mysql import control

#: The server variables ``check_server`` reads.
VARIABLES = ("log_bin", "log_bin_basename", "binlog_format", "binlog_row_image", "binlog_row_metadata",
             "expire_logs_days", "binlog_expire_logs_seconds", "server_id", "gtid_mode", "enforce_gtid_consistency",
             "gtid_strict_mode", "version", "version_comment")

MIN_RETENTION_S = 24 * 3600
RECOMMENDED_RETENTION_S = 7 * 24 * 3600
PASSWORD_PLACEHOLDER = "<a password of your choice>"


@dataclass(frozen=True)
class ServerInfo:
    flavour: str  # mariadb | mysql
    version: tuple[int, ...]
    variables: Mapping[str, str]


@dataclass
class SetupReport:
    server: ServerInfo
    problems: list[str] = field(default_factory=list)  # freshview cannot follow this server until fixed
    advice: list[str] = field(default_factory=list)  # works, but consider
    grants: list[str] = field(default_factory=list)  # for the service's user
    user_grants: list[str] = field(default_factory=list)  # for users who create views from SQL


def server_info(variables: Mapping[str, str]) -> ServerInfo:
    """Flavour and version from ``version`` / ``version_comment`` (MariaDB says so in either)."""
    version = str(variables.get("version", ""))
    comment = str(variables.get("version_comment", ""))
    flavour = "mariadb" if "mariadb" in (version + " " + comment).lower() else "mysql"
    numbers = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return ServerInfo(flavour, tuple(int(n) for n in numbers.groups()) if numbers else (0, 0, 0),
                      {k.lower(): str(v) for k, v in variables.items()})


def _fix(flavour: str, name: str, value: str, *, dynamic: bool = True) -> str:
    section = "[mariadb]" if flavour == "mariadb" else "[mysqld]"
    persist = f"{name} = {value} in the {section} section of the server's configuration file"
    if not dynamic:
        return f"set {persist} and restart the server"
    if flavour == "mysql":
        return f"SET PERSIST {name} = '{value}';"
    return f"SET GLOBAL {name} = '{value}';  and {persist} (so it survives a restart)"


def check_server(info: ServerInfo) -> tuple[list[str], list[str]]:
    """(problems, advice) for a server with these variables; each problem says exactly what to change."""
    v, flavour = info.variables, info.flavour
    problems: list[str] = []
    advice: list[str] = []
    minimum = (10, 6, 0) if flavour == "mariadb" else (8, 0, 1)
    if info.version < minimum:
        problems.append(f"{flavour} {'.'.join(map(str, info.version))} is too old: freshview needs "
                        f"{'MariaDB 10.6' if flavour == 'mariadb' else 'MySQL 8.0.1'} or later")
    if v.get("log_bin", "OFF").upper() not in ("ON", "1"):
        problems.append("the binary log is off (log_bin=OFF); freshview reads changes from it: "
                        + _fix(flavour, "log_bin", "binlog", dynamic=False))
    if v.get("server_id", "0") == "0":
        problems.append("server_id is 0, which disables the binary log for replication: "
                        + _fix(flavour, "server_id", "1"))
    for name, want, why in (("binlog_format", "ROW", "freshview reads row events, not statements"),
                            ("binlog_row_image", "FULL", "updates and deletes must carry the whole old row"),
                            ("binlog_row_metadata", "FULL", "column names must travel with the rows")):
        have = v.get(name)
        if have is None:
            problems.append(f"the server has no {name} setting ({why}); upgrade the server")
        elif have.upper() != want:
            problems.append(f"{name} is {have}, freshview needs {want} ({why}): " + _fix(flavour, name, want)
                            + (" Sessions already connected keep the old format until they reconnect."
                               if name == "binlog_format" else ""))
    if flavour == "mysql":
        for name in ("enforce_gtid_consistency", "gtid_mode"):
            if v.get(name, "OFF").upper() != "ON":
                problems.append(f"{name} is {v.get(name, 'OFF')}; freshview follows MySQL by GTID: "
                                + (_fix(flavour, name, "ON") if name == "enforce_gtid_consistency" else
                                   "SET PERSIST gtid_mode = 'OFF_PERMISSIVE'; then 'ON_PERMISSIVE'; then 'ON'; "
                                   "(one step at a time, as MySQL requires)"))
    retention = _retention_s(v)
    if retention == 0:
        advice.append("binary logs never expire: they can fill the disk. Consider: "
                      + _fix(flavour, "binlog_expire_logs_seconds", str(RECOMMENDED_RETENTION_S)))
    elif retention is not None and retention < MIN_RETENTION_S:
        advice.append(f"binary logs are kept only {retention} s: if the freshview service is down longer, its "
                      "position is purged and it rebuilds every view from a new snapshot. Consider: "
                      + _fix(flavour, "binlog_expire_logs_seconds", str(RECOMMENDED_RETENTION_S)))
    return problems, advice


def _retention_s(v: Mapping[str, str]) -> int | None:
    """Seconds binlogs are kept (0: forever; None: unknown).  ``binlog_expire_logs_seconds`` wins when set."""
    seconds = v.get("binlog_expire_logs_seconds")
    if seconds not in (None, "", "0"):
        return int(float(seconds))
    days = v.get("expire_logs_days")
    if days is None:
        return None if seconds is None else 0
    return int(float(days) * 86400)


def quote_account(user: str, host: str) -> str:
    """``'user'@'host'`` with quotes escaped."""
    def q(s: str) -> str:
        return "'" + s.replace("\\", "\\\\").replace("'", "''") + "'"
    return f"{q(user)}@{q(host)}"


def _db(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def grant_sql(flavour: str, user: str, host: str, database: str,
              result_databases: Sequence[str] = ()) -> list[str]:
    """The service's least-privilege account: read the binlog, read the followed database, own ``freshview``,
    and manage result tables (in ``database`` unless ``result_databases`` says where)."""
    account = quote_account(user, host)
    server_rights = "REPLICATION SLAVE, BINLOG MONITOR" if flavour == "mariadb" else \
        "REPLICATION SLAVE, REPLICATION CLIENT, RELOAD"  # RELOAD: MySQL's snapshot needs FLUSH TABLES WITH READ LOCK
    statements = [
        f"CREATE USER IF NOT EXISTS {account} IDENTIFIED BY '{PASSWORD_PLACEHOLDER}'",
        f"GRANT {server_rights} ON *.* TO {account}",
        f"GRANT SELECT ON {_db(database)}.* TO {account}",
        f"GRANT ALL PRIVILEGES ON {_db(control.DATABASE)}.* TO {account}",
    ]
    for target in result_databases or (database,):  # GRANT OPTION: a result table is granted to its requester
        statements.append(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP ON {_db(target)}.* TO {account} "
                          "WITH GRANT OPTION")
    # the requesters' grants, to check that a view runs with its requester's rights (access.py); of mysql.user
    # only the columns it needs (not the password hashes)
    user_columns = "User, Host, Select_priv" + (", is_role, default_role" if flavour == "mariadb" else "")
    statements.append(f"GRANT SELECT ({user_columns}) ON `mysql`.`user` TO {account}")
    grant_tables = ("db", "tables_priv", "columns_priv") + (("roles_mapping",) if flavour == "mariadb" else ())
    statements += [f"GRANT SELECT ON `mysql`.`{t}` TO {account}" for t in grant_tables]
    return statements


def user_grant_sql(account: str = "'app_user'@'%'") -> list[str]:
    """What a user needs to create and drop views from SQL: EXECUTE on the procedures (``_request`` too:
    the procedures run as the user and call it), and SELECT on what its views read."""
    return [f"GRANT EXECUTE ON PROCEDURE {control.DATABASE}.{p} TO {account}" for p in control.USER_PROCEDURES]


def read_server(conn: Any) -> ServerInfo:
    """The server's variables ``check_server`` needs."""
    with conn.cursor() as cur:
        cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({', '.join(['%s'] * len(VARIABLES))})",
                    VARIABLES)
        variables = {name: value for name, value in cur.fetchall()}
    conn.commit()
    return server_info(variables)


def setup(conn: Any, *, user: str = "freshview", host: str = "%", database: str | None = None,
          result_databases: Sequence[str] = ()) -> SetupReport:
    """Install the ``freshview`` database, check the server, and produce the GRANTs (nothing applied)."""
    if database is None:
        with conn.cursor() as cur:
            cur.execute("SELECT DATABASE()")
            database = cur.fetchone()[0]
        if database is None:
            raise ValueError("no database to follow: name it in the DSN (mysql://user@host:port/DATABASE)")
    control.install(conn)
    info = read_server(conn)
    problems, advice = check_server(info)
    if result_databases == () or list(result_databases) == [database]:
        advice.append(f"result tables go into {database} (a service keeps the views of its own database), so "
                      "the service's user may create and write tables there")
    advice.append("REPLICATION SLAVE lets the service's user read every table's row images from the binlog, "
                  "not only the followed database's")
    return SetupReport(info, problems, advice, grant_sql(info.flavour, user, host, database, result_databases),
                       user_grant_sql())


__all__ = ["ServerInfo", "SetupReport", "server_info", "check_server", "grant_sql", "user_grant_sql",
           "read_server", "setup", "quote_account", "VARIABLES", "PASSWORD_PLACEHOLDER"]
