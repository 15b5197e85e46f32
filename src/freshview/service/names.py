"""Database names and engine names.

A view's SQL says ``orders`` or ``public.orders``; the SQL front end resolves
``public.x`` to ``x``, so tables of the ``public`` schema are known to the
engine by their bare name and others as ``schema.table``.  Result tables are
named the same way, which lets one view read another straight from the
engine (no round trip through the database).  Only lower-case unquoted
identifiers are supported: what PostgreSQL folds unquoted names to.
"""

from __future__ import annotations

import re

from freshview.errors import CatalogError

_PART = r"[a-z_][a-z0-9_$]*"
_QUALIFIED = re.compile(rf"^(?:({_PART})\.)?({_PART})$")


def qualify(name: str) -> str:
    """``orders`` -> ``public.orders``; refuses names freshview cannot follow."""
    text = name.strip()
    if text.lower() == text.strip('"').lower() and _QUALIFIED.match(text.lower()):
        text = text.lower()
    match = _QUALIFIED.match(text)
    if not match:
        raise CatalogError(f"freshview: invalid table name {name!r}: use schema.table with lower-case letters, "
                           "digits and _ (quoted identifiers are not supported)")
    schema, table = match.group(1) or "public", match.group(2)
    return f"{schema}.{table}"


def engine_name(qualified: str) -> str:
    """The name the engine knows a table or view by (``public.x`` -> ``x``)."""
    schema, _, table = qualified.partition(".")
    return table if schema == "public" else qualified


def qualified_from_engine(name: str) -> str:
    return name if "." in name else f"public.{name}"
