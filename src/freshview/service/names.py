"""Database names and engine names.

A name in a request is SQL text, read as the database reads it (the
connector's ``NameRules``): on PostgreSQL ``orders``, ``public.Orders``
(unquoted parts fold to lower case) or ``"Sales"."Big Totals"`` (quoted
parts kept as written); on MySQL/MariaDB ``orders``, ``app.Orders`` (case
kept: MySQL on Linux compares table names exactly) or ``\\`My Db\\`.\\`Big
Totals\\```.  The service spells a name two ways:

* the **qualified** name: ``schema.table``, each part quoted only when it
  must be (``public.orders``, ``"Sales"."Big Totals"``, ``app.\\`Big
  Totals\\```): the name in ``freshview.views`` and in messages, and how the
  change stream names a table;
* the **engine** name: the raw parts joined by ``.``, the default schema
  dropped (``orders``, ``Sales.Big Totals``): what the SQL front end looks up
  (it resolves ``<default>.x`` to ``x``), so one view can read another
  straight from the engine.

The default schema is the connector's (``Connector.default_schema``):
``public`` on PostgreSQL, the DSN's database on MySQL/MariaDB.
"""

from __future__ import annotations

from dataclasses import dataclass

from freshview.connectors.base import NameRules

__all__ = ["Names"]


@dataclass(frozen=True)
class Names:
    """How one database's table names map to engine names (``default``: the schema of bare names)."""

    default: str
    rules: NameRules

    def qualify(self, name: str) -> str:
        """``orders`` -> ``<default>.orders``; refuses names the database would not read (``CatalogError``)."""
        schema, table = self.rules.split(name)
        return self.rules.spell(schema or self.default, table)

    def engine(self, qualified: str) -> str:
        """The name the engine knows a table or view by (``<default>.x`` -> ``x``)."""
        schema, table = self.rules.split(qualified)
        return table if schema in (None, self.default) else f"{schema}.{table}"

    def qualified(self, name: str) -> str:
        """The database name of an engine name (``x`` -> ``<default>.x``)."""
        schema, dot, table = name.partition(".")
        return self.rules.spell(schema, table) if dot else self.rules.spell(self.default, name)
