"""``base.Grants`` for MySQL/MariaDB: what an account may read, from the grant tables.

MySQL has no ``has_column_privilege``: the service reads the requester's
grants from ``mysql.user`` (global), ``mysql.db`` (database patterns),
``mysql.tables_priv`` and ``mysql.columns_priv`` — its own, and those of its
default role and the roles granted to that role (MariaDB's
``mysql.roles_mapping``; roles a session activates with SET ROLE are not
counted: a running view is checked without a session) — and decides here,
purely, which columns it may SELECT (``read_rights``).  The service's account
needs SELECT on those tables (``freshview setup`` prints the GRANTs).

The requester is ``Request.requested_by``: the account ``user@host`` that
``CURRENT_USER()`` named in the caller's ``create_view`` (``control.py``).
Views made before that recorded the login (``USER()``, ``user@client-host``):
``account_for`` finds the account that login matches, when only one does.
MySQL has no row-level security.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import pymysql

from freshview.connectors.base import ReadRights
from freshview.connectors.edge import guarded
from freshview.connectors.mysql import faults
from freshview.connectors.mysql.catalog import split_table_name
from freshview.errors import CatalogError


@dataclass(frozen=True)
class Account:
    user: str
    host: str  # a host pattern (% and _ wildcards); '' for a role

    @classmethod
    def parse(cls, text: str) -> "Account":
        """``user@host`` as ``CURRENT_USER()`` and ``USER()`` write it (the host has no ``@``)."""
        user, _, host = text.rpartition("@")
        return cls(user, host) if _ else cls(text, "%")

    def __str__(self) -> str:
        return "'" + self.user.replace("'", "''") + "'@'" + self.host.replace("'", "''") + "'"


def like(pattern: str, text: str, *, case: bool = True) -> bool:
    """SQL LIKE (``%``, ``_``, ``\\`` escapes), as MySQL matches host and database patterns."""
    regex = "".join(".*" if part == "%" else "." if part == "_" else re.escape(part[-1])
                    for part in re.findall(r"\\.|%|_|.", pattern, re.S))
    return re.fullmatch(regex, text, 0 if case else re.I) is not None


def account_for(requester: Account, hosts: Iterable[str]) -> Account | None:
    """The account of ``requester`` among the accounts with its user name (their ``hosts``): itself when it
    is one, else the one account whose host pattern matches it (a login recorded by ``USER()``)."""
    hosts = list(hosts)
    if requester.host in hosts:
        return requester
    matching = [h for h in hosts if like(h, requester.host, case=False)]
    return Account(requester.user, matching[0]) if len(matching) == 1 else None


def roles_of(default_role: str | None, mapping: Iterable[tuple[str, str, str]]) -> set[str]:
    """The default role and every role granted to it, transitively (``mapping``: roles_mapping rows
    ``(user, host, role)``; a role's own grants have host '')."""
    found: set[str] = set()
    todo = [default_role] if default_role else []
    granted = [(u, r) for u, h, r in mapping if h == ""]
    while todo:
        role = todo.pop()
        if role in found:
            continue
        found.add(role)
        todo.extend(r for u, r in granted if u == role)
    return found


@dataclass(frozen=True)
class AccountGrants:
    """The SELECT privileges of an account (with its roles')."""

    global_select: bool = False
    databases: tuple[str, ...] = ()  # database name patterns with SELECT
    tables: frozenset[tuple[str, str]] = frozenset()  # (database, table) with SELECT
    columns: frozenset[tuple[str, str, str]] = frozenset()  # (database, table, column in lower case) with SELECT


def read_rights(grants: AccountGrants, reads: Mapping[str, frozenset[str]]) -> dict[str, ReadRights]:
    """What ``grants`` let the account read of each relation (``db.table`` as the service names it)."""
    out = {}
    for name, columns in reads.items():
        database, table = split_table_name(name)
        whole = (grants.global_select or any(like(p, database or "") for p in grants.databases)
                 or (database, table) in grants.tables)
        if whole:
            out[name] = ReadRights()
            continue
        granted = {c for d, t, c in grants.columns if (d, t) == (database, table)}
        out[name] = ReadRights(denied=frozenset(c for c in columns if c.lower() not in granted),
                               any_column=bool(granted))
    return out


_ACCOUNTS = ("SELECT Host, Select_priv, default_role FROM mysql.user WHERE User = %s AND is_role <> 'Y'",
             "SELECT Host, Select_priv, NULL FROM mysql.user WHERE User = %s")  # MySQL: no MariaDB roles
_PRIVILEGES = """
SELECT 'global', NULL, NULL, NULL FROM mysql.user WHERE ({who}) AND {p}_priv = 'Y'
UNION ALL SELECT 'db', Db, NULL, NULL FROM mysql.db WHERE ({who}) AND {p}_priv = 'Y'
UNION ALL SELECT 'table', Db, Table_name, NULL FROM mysql.tables_priv WHERE ({who}) AND FIND_IN_SET('{p}', Table_priv)
UNION ALL SELECT 'column', Db, Table_name, LOWER(Column_name) FROM mysql.columns_priv
          WHERE ({who}) AND FIND_IN_SET('{p}', Column_priv)
"""
WRITES = ("Insert", "Delete")  # what a requester needs on a table it has the service fill (use_existing_table)


def resolve_account(conn: Any, requester: str) -> Account | None:
    """The account ``requester`` (``Request.requested_by``) names, as the server knows it (``account_for``)."""
    wanted = Account.parse(requester)
    with conn.cursor() as cur:
        cur.execute("SELECT Host FROM mysql.user WHERE User = %s", (wanted.user,))
        hosts = [h for (h,) in cur.fetchall()]
    conn.commit()
    return account_for(wanted, hosts)


@guarded(faults.classify)
class MySqlGrants:
    """On the connector's autocommit connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def who(self, requester: str) -> str:
        return f"account {Account.parse(requester)}"

    def read_rights(self, requester: str, reads: Mapping[str, frozenset[str]]) -> dict[str, ReadRights] | None:
        if not reads:
            return {}
        try:
            grants = self.grants(Account.parse(requester))
        except pymysql.err.MySQLError as exc:
            raise CatalogError(f"freshview: cannot read the grant tables to check the view's requester ({exc}); "
                               "the service's account needs SELECT on mysql.user, mysql.db, mysql.tables_priv, "
                               "mysql.columns_priv and mysql.roles_mapping (see freshview setup)") from None
        return None if grants is None else read_rights(grants, reads)

    def may_not_write(self, requester: str, table: str) -> list[str]:
        """Of ``WRITES``, the privileges ``requester`` lacks on the whole of ``table`` (``db.table``): a view
        filling a table the user made (``use_existing_table``) writes it with the service's rights."""
        account = Account.parse(requester)
        missing = []
        for privilege in WRITES:
            grants = self.grants(account, privilege)
            # (a column no grant names: denied unless the privilege covers the whole table)
            if grants is None or read_rights(grants, {table: frozenset({"\0"})})[table].denied:
                missing.append(privilege.upper())
        return missing

    def grants(self, requester: Account, privilege: str = "Select") -> AccountGrants | None:
        """The account's ``privilege`` (SELECT by default) and its roles' (None: no such account)."""
        assert privilege in ("Select", *WRITES)
        with self.conn.cursor() as cur:
            try:
                cur.execute(_ACCOUNTS[0], (requester.user,))
                roles_table = True
            except pymysql.err.MySQLError as exc:  # MySQL: no is_role / default_role columns
                if exc.args[0] != 1054:
                    raise
                cur.execute(_ACCOUNTS[1], (requester.user,))
                roles_table = False
            accounts = {host: (select, default) for host, select, default in cur.fetchall()}
            account = account_for(requester, accounts)
            if account is None:
                return None
            principals = [(account.user, account.host)]
            default_role = accounts[account.host][1]
            if roles_table and default_role:
                cur.execute("SELECT User, Host, Role FROM mysql.roles_mapping")
                principals += [(role, "") for role in sorted(roles_of(default_role, cur.fetchall()))]
            who = " OR ".join(["(User = %s AND Host = %s)"] * len(principals))
            cur.execute(_PRIVILEGES.format(who=who, p=privilege), [v for p in principals for v in p] * 4)
            rows = cur.fetchall()
        self.conn.commit()
        return AccountGrants(
            global_select=any(kind == "global" for kind, *_ in rows),
            databases=tuple(db for kind, db, _, _ in rows if kind == "db"),
            tables=frozenset((db, t) for kind, db, t, _ in rows if kind == "table"),
            columns=frozenset((db, t, c) for kind, db, t, c in rows if kind == "column"))
