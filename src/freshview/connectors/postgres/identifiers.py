"""PostgreSQL table names as text: parsing (unquoted parts fold to lower case) and minimal quoting.

A table's *qualified* name is ``schema.table`` with each part quoted only when
it must be: ``public.orders``, ``"Sales"."Big Totals"``.  It is valid SQL and
valid ``regclass`` text, and it is how the connector names a table everywhere
(the change stream's relations, snapshots, result tables).  ``parse`` reads
a name as PostgreSQL does (with sqlglot); a part may hold any character but
``.`` and NUL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from psycopg import sql
from sqlglot import exp

from freshview.errors import CatalogError

_PLAIN = re.compile(r"[a-z_][a-z0-9_$]*")


@dataclass(frozen=True)
class TableName:
    schema: str
    table: str

    @property
    def qualified(self) -> str:
        return f"{quote(self.schema)}.{quote(self.table)}"

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)


def quote(part: str) -> str:
    """An identifier as PostgreSQL needs it written: bare when plain lower case, else double-quoted."""
    return part if _PLAIN.fullmatch(part) else '"' + part.replace('"', '""') + '"'


def qualified(schema: str, table: str) -> str:
    return TableName(schema, table).qualified


def parse(name: str) -> TableName:
    """``orders`` -> public.orders, ``"Sales"."Big Totals"`` -> ("Sales", "Big Totals"); refuses the rest."""
    schema, table = split(name)
    return TableName(schema or "public", table)


def split(name: str) -> tuple[str | None, str]:
    """``orders`` -> (None, "orders"), ``"Sales"."Big Totals"`` -> ("Sales", "Big Totals"); refuses the rest."""
    try:
        table = sqlglot.parse_one(name.strip(), into=exp.Table, dialect="postgres")
        parts = [(p.this, p.quoted) for p in table.parts]
        valid = (isinstance(table.this, exp.Identifier) and not table.catalog and table.args.get("alias") is None
                 and not table.args.get("joins") and 1 <= len(parts) <= 2)
    except Exception:  # sqlglot's ParseError, or a shape it builds but cannot name (a function call)
        valid = False
    if valid:
        folded = [text if quoted else text.lower() for text, quoted in parts]
        if all(p and "." not in p and "\x00" not in p for p in folded):
            return (None, folded[0]) if len(folded) == 1 else (folded[0], folded[1])
    raise CatalogError(f"freshview: invalid table name {name!r}: write schema.table as in SQL, e.g. "
                       "public.orders or \"Sales\".\"Big Totals\" (quoted parts keep their case; a part may "
                       "not contain '.')")


class PostgresNames:
    """``connectors.base.NameRules`` for PostgreSQL: unquoted parts fold to lower case, quoted ones keep theirs."""

    def split(self, text: str) -> tuple[str | None, str]:
        return split(text)

    def spell(self, schema: str, table: str) -> str:
        return qualified(schema, table)


def identifier(name: str) -> sql.Identifier:
    """The table as a ``psycopg.sql`` identifier."""
    return parse(name).identifier
