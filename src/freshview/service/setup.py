"""What ``freshview setup`` checks, installs and recommends in a database.

Run once as an administrator: it installs the ``freshview`` schema and the
publication, checks the server settings logical replication needs, explains
per table what following it costs under its REPLICA IDENTITY, and produces
the least-privilege role the service runs as.  Everything it recommends is
returned as data (``SetupReport``) so the CLI can print it and tests can
check it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from freshview.connectors.postgres import control
from freshview.connectors.postgres.identifiers import identifier, parse, qualified

RECOMMENDED_WAL_KEEP = "10GB"


@dataclass
class TableAdvice:
    name: str
    primary_key: bool
    identity: str  # default | full | index | nothing
    verdict: str
    followable: bool


@dataclass
class SetupReport:
    wal_level: str
    max_slot_wal_keep_size: str
    problems: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    tables: list[TableAdvice] = field(default_factory=list)
    role_sql: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)


_IDENTITY = {"d": "default", "f": "full", "i": "index", "n": "nothing"}

_TABLES = """
SELECT n.nspname, c.relname, c.relreplident,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'freshview')
  AND n.nspname NOT LIKE 'pg_toast%%' AND NOT c.relispartition
ORDER BY 1, 2
"""


def setup(conn: psycopg.Connection, *, role: str = "freshview", publish: list[str] = (),  # type: ignore[assignment]
          full_identity: list[str] = (), apply_role: bool = False) -> SetupReport:  # type: ignore[assignment]
    """Install the schema and publication; check, advise, and optionally apply changes."""
    control.install(conn)
    wal_level = conn.execute("SHOW wal_level").fetchone()[0]
    keep = conn.execute("SHOW max_slot_wal_keep_size").fetchone()[0]
    report = SetupReport(wal_level, keep)
    if wal_level != "logical":
        report.problems.append("wal_level is %r; logical replication needs: ALTER SYSTEM SET wal_level = logical; "
                               "then restart PostgreSQL" % wal_level)
    if keep in ("-1", "-1kB"):
        report.advice.append(
            "max_slot_wal_keep_size is unlimited: while freshview is down its replication slot keeps all WAL, "
            f"which can fill the disk. Consider: ALTER SYSTEM SET max_slot_wal_keep_size = '{RECOMMENDED_WAL_KEEP}'; "
            "SELECT pg_reload_conf();  (if the slot ever loses WAL, freshview rebuilds its views from a new snapshot)")

    for table in full_identity:
        name = parse(table).qualified
        conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(identifier(name)))
        report.applied.append(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
    for table in publish:
        name = parse(table).qualified
        parts = parse(name)
        already = conn.execute("SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s "
                               "AND tablename = %s", (control.PUBLICATION, parts.schema, parts.table)).fetchone()
        if not already:
            conn.execute(sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                sql.Identifier(control.PUBLICATION), parts.identifier))
            report.applied.append(f"ALTER PUBLICATION {control.PUBLICATION} ADD TABLE {name}")

    results = {name for (name,) in conn.execute("SELECT name FROM freshview.views").fetchall()}
    for schema, bare, ident, has_pk in conn.execute(_TABLES).fetchall():
        name = qualified(schema, bare)
        if name in results:
            continue
        ident = ident.decode() if isinstance(ident, bytes) else str(ident)
        identity = _IDENTITY.get(ident, ident)
        if identity == "full":
            verdict = ("REPLICA IDENTITY FULL: every UPDATE/DELETE writes the whole old row to WAL (more WAL); "
                       "needed only without a primary key")
        elif has_pk:
            verdict = ("primary key, REPLICA IDENTITY DEFAULT: no extra WAL; freshview finds old rows in its "
                       "own copy of the table")
        else:
            verdict = (f"cannot be followed: no primary key and REPLICA IDENTITY {identity.upper()}; fix with "
                       f"ALTER TABLE {name} REPLICA IDENTITY FULL  (or `freshview setup --replica-identity-full "
                       f"{name}`), or add a primary key")
        report.tables.append(TableAdvice(name, has_pk, identity, verdict, identity == "full" or has_pk))

    report.role_sql = role_sql(conn, role)
    if apply_role:
        for statement in report.role_sql:
            if statement.startswith("CREATE ROLE") and conn.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                continue
            conn.execute(statement)
            report.applied.append(statement)
    return report


def role_sql(conn: psycopg.Connection, role: str) -> list[str]:
    """The least-privilege role: REPLICATION, SELECT on published tables, its own result tables."""
    database = conn.execute("SELECT current_database()").fetchone()[0]
    r = _ident(conn, role)
    published = [qualified(s, t) for s, t in conn.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1, 2",
        (control.PUBLICATION,)).fetchall()]
    statements = [
        f"CREATE ROLE {r} LOGIN REPLICATION",
        f"GRANT CONNECT ON DATABASE {_ident(conn, database)} TO {r}",
        f"GRANT USAGE, CREATE ON SCHEMA public TO {r}",
        f"GRANT USAGE ON SCHEMA freshview TO {r}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA freshview TO {r}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA freshview TO {r}",
    ]
    statements += [f"GRANT SELECT ON {name} TO {r}" for name in published]
    return statements


def _ident(conn: psycopg.Connection, name: str) -> str:
    """An identifier as a person would type it: quoted only when it has to be."""
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", name):
        reserved = conn.execute("SELECT catcode = 'R' FROM pg_get_keywords() WHERE word = %s", (name,)).fetchone()
        if not (reserved and reserved[0]):
            return name
    return sql.Identifier(name).as_string(conn)
