"""``base.Grants`` for PostgreSQL: what a role may read, asked of the database in one query.

For each relation a view reads and the columns it reads of it, as the role
(``Request.requested_by``, the caller's ``session_user``): which of those columns
it may not SELECT (``has_column_privilege``: a table-wide grant counts, and
superusers may read everything), whether it may SELECT some column (a read of
rows only, ``COUNT(*)``), USAGE on the relation's schema, and whether row-level
security applies to it there: enabled, and the role is neither a superuser nor
BYPASSRLS nor (without FORCE ROW LEVEL SECURITY) a role with the owner's
privileges, as PostgreSQL itself decides when a policy applies.  The decision
is ``service.access.refusal``.
"""

from __future__ import annotations

import json
from typing import Mapping

import psycopg

from freshview.connectors.base import ReadRights

_RIGHTS = """
SELECT t.key, k.oid IS NOT NULL,
       ARRAY(SELECT c FROM jsonb_array_elements_text(t.value) c
             WHERE NOT COALESCE((SELECT has_column_privilege(r.oid, k.oid, a.attnum, 'SELECT') FROM pg_attribute a
                                 WHERE a.attrelid = k.oid AND a.attname = c AND NOT a.attisdropped), false)),
       k.oid IS NOT NULL AND has_any_column_privilege(r.oid, k.oid, 'SELECT'),
       k.oid IS NOT NULL AND has_schema_privilege(r.oid, k.relnamespace, 'USAGE'),
       k.oid IS NOT NULL AND k.relrowsecurity AND NOT (r.rolsuper OR r.rolbypassrls
           OR (pg_has_role(r.oid, k.relowner, 'USAGE') AND NOT k.relforcerowsecurity))
FROM pg_roles r CROSS JOIN jsonb_each(%(reads)s::jsonb) t LEFT JOIN pg_class k ON k.oid = to_regclass(t.key)
WHERE r.rolname = %(role)s
"""


class PostgresGrants:
    """On the connector's autocommit connection."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def who(self, requester: str) -> str:
        return f"role {requester}"

    def read_rights(self, requester: str, reads: Mapping[str, frozenset[str]]) -> dict[str, ReadRights] | None:
        if not reads:
            return {}
        rows = self.conn.execute(_RIGHTS, {"reads": json.dumps({t: sorted(c) for t, c in reads.items()}),
                                           "role": requester}).fetchall()
        if not rows:
            return None  # no such role
        return {table: ReadRights(bool(exists), frozenset(denied), bool(any_column), bool(usage), bool(rls))
                for table, exists, denied, any_column, usage, rls in rows}
