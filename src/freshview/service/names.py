"""Database names and engine names.

A name in a request is SQL text.  On PostgreSQL it is read as PostgreSQL
reads it (``connectors.postgres.identifiers.parse``): ``orders``,
``public.Orders`` (unquoted parts fold to lower case) or
``"Sales"."Big Totals"`` (quoted parts are kept as written).  On
MySQL/MariaDB only lower-case unquoted names are supported today.  The
service spells a name two ways:

* the **qualified** name: ``schema.table`` (PostgreSQL: each part quoted only
  when it must be: ``public.orders``, ``"Sales"."Big Totals"``); the name in
  ``freshview.views`` and in messages, and how the change stream names a
  table;
* the **engine** name: the raw parts joined by ``.``, the default schema
  dropped (``orders``, ``Sales.Big Totals``): what the SQL front end looks up
  (it resolves ``<default>.x`` to ``x``), so one view can read another
  straight from the engine.

The default schema is the connector's (``Connector.default_schema``):
``public`` on PostgreSQL, the DSN's database on MySQL/MariaDB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from freshview.connectors.postgres.identifiers import TableName, identifier, parse
from freshview.errors import CatalogError

__all__ = ["Names", "POSTGRES", "engine_name", "identifier", "qualified_from_engine", "qualify"]

_PART = r"[a-z_][a-z0-9_$]*"
_QUALIFIED = re.compile(rf"^(?:({_PART})\.)?({_PART})$")


@dataclass(frozen=True)
class Names:
    """How one database's table names map to engine names (``default``: the schema of bare names)."""

    default: str = "public"
    dialect: str = "postgres"  # postgres: quoted, mixed-case identifiers; mysql: plain lower-case names

    def qualify(self, name: str) -> str:
        """``orders`` -> ``<default>.orders``; refuses names freshview cannot follow."""
        if self.dialect == "postgres":
            return parse(name).qualified  # (bare names are in public, PostgreSQL's default)
        text = name.strip()
        if text.lower() == text.strip('"').lower() and _QUALIFIED.match(text.lower()):
            text = text.lower()
        match = _QUALIFIED.match(text)
        if not match:
            raise CatalogError(f"freshview: invalid table name {name!r}: use schema.table with lower-case "
                               "letters, digits and _ (quoted identifiers are not supported)")
        return f"{match.group(1) or self.default}.{match.group(2)}"

    def engine(self, qualified: str) -> str:
        """The name the engine knows a table or view by (``<default>.x`` -> ``x``)."""
        if self.dialect == "postgres":
            name = parse(qualified)
            return name.table if name.schema == self.default else f"{name.schema}.{name.table}"
        schema, _, table = qualified.partition(".")
        return table if schema == self.default else qualified

    def qualified(self, name: str) -> str:
        """The database name of an engine name (``x`` -> ``<default>.x``)."""
        if self.dialect == "postgres":
            schema, dot, table = name.partition(".")
            return (TableName(schema, table) if dot else TableName(self.default, name)).qualified
        return name if "." in name else f"{self.default}.{name}"


POSTGRES = Names("public")


def qualify(name: str) -> str:
    return POSTGRES.qualify(name)


def engine_name(qualified: str) -> str:
    return POSTGRES.engine(qualified)


def qualified_from_engine(name: str) -> str:
    return POSTGRES.qualified(name)
