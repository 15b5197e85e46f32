"""Database names and engine names.

A name in a request is SQL text, read as PostgreSQL reads it
(``connectors.postgres.identifiers.parse``): ``orders``, ``public.Orders``
(unquoted parts fold to lower case) or ``"Sales"."Big Totals"`` (quoted
parts are kept as written).  The service spells it two ways:

* the **qualified** name: ``schema.table``, each part quoted only when it
  must be (``public.orders``, ``"Sales"."Big Totals"``); valid SQL and
  ``regclass`` text, the name in ``freshview.views`` and in messages, and
  how the change stream names a table;
* the **engine** name: the raw parts joined by ``.``, ``public.`` dropped
  (``orders``, ``Sales.Big Totals``): what the SQL front end looks up for
  ``FROM "Sales"."Big Totals"``, so one view can read another straight from
  the engine.
"""

from __future__ import annotations

from freshview.connectors.postgres.identifiers import TableName, identifier, parse

__all__ = ["engine_name", "identifier", "qualified_from_engine", "qualify"]


def qualify(name: str) -> str:
    """``orders`` -> ``public.orders``; ``"Sales"."Orders"`` stays; refuses names freshview cannot follow."""
    return parse(name).qualified


def engine_name(qualified: str) -> str:
    """The name the engine knows a table or view by (``public.x`` -> ``x``, ``"A"."B c"`` -> ``A.B c``)."""
    name = parse(qualified)
    return name.table if name.schema == "public" else f"{name.schema}.{name.table}"


def qualified_from_engine(name: str) -> str:
    schema, dot, table = name.partition(".")
    return (TableName(schema, table) if dot else TableName("public", name)).qualified
