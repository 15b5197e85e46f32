"""What the construct modules use of the query being built: ``QueryContext``.

``sql.build.QueryBuilder`` builds a query; the modules of the constructs beyond SELECT-FROM-WHERE-GROUP BY
(``ctes``, ``recursive``, ``setops``, ``subqueries``, ``lateral``, ``magic_sets``, ``paren_joins``,
``constants``, ``distinct_on``, ``expand``, ``window``) build their parts through this protocol, so none
of them names the builder (no import runs back up to ``build``, not even for annotations): a subquery, a
CTE's body or a set operation's branch is a query built by ``query``/``query_body``/``select``, the
builder's recursion, passed down as this context.

``Catalog`` (the relations a query reads) and ``CteScope`` (the WITH names visible) live here, below
both the builder and the construct modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sqlglot import exp

from freshview.errors import UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.sql.dialect import Dialect
from freshview.sql.scope import FromItem


class Catalog(Protocol):
    """Relations by name.  A catalog may have a ``default_schema`` (else ``public``): ``<it>.x`` in SQL
    names the relation ``x`` when no relation is called ``<it>.x`` (PostgreSQL's ``public``, the
    MySQL database the service follows)."""

    def relation_columns(self, name: str) -> tuple[pn.Columns, bool] | None:
        """Columns of a source (False) or view (True) named ``name``, or None."""


@dataclass(frozen=True)
class CteScope:
    """One visible CTE and the scope it was defined in (a linked chain, innermost first)."""

    name: str
    plan: pn.Node
    parent: "CteScope | None"

    def find(self, name: str) -> pn.Node | None:
        scope: CteScope | None = self
        while scope is not None:
            if scope.name == name:
                return scope.plan
            scope = scope.parent
        return None


class QueryContext(Protocol):
    """The query being built, as the construct modules see it (``QueryBuilder`` implements it)."""

    sql: str  # the whole text (every error is located in it)
    catalog: Catalog
    dialect: Dialect
    cte_scope: CteScope | None  # the WITH names visible here
    splices: dict[tuple[int, int], str]  # FROM items read through a definition (sql.expand)
    depth: int  # how deep in definitions of relations this text is
    view_select: exp.Expression | None  # the SELECT that names the view's columns
    subquery_count: int  # subqueries made FROM items so far (their aliases, a magic set's leaf)

    def unsupported(self, node: exp.Expression | None, what: str, keyword: str | None = None) -> UnsupportedSqlError:
        """``what is not supported``, located at ``node`` (or its ``keyword``)."""

    def query(self, node: exp.Expression) -> pn.Node:
        """A query (with its WITH clause, in parentheses or not) as a plain plan."""

    def query_body(self, node: exp.Expression) -> pn.Node:
        """A query without its WITH clause: a set operation, a SELECT or VALUES."""

    def select(self, node: exp.Select) -> pn.Node:
        """One SELECT."""

    def from_items(self, node: exp.Select) -> list[FromItem]:
        """A SELECT's FROM items, each at its offset in the wide row."""

    def rename_columns(self, plan: pn.Node, alias_node: exp.TableAlias, r: exp.Expression) -> pn.Node:
        """``plan`` with its columns renamed by an alias's column list (``AS t(a, b)``)."""

    def refuse_modifiers(self, node: exp.Expression) -> None:
        """Refuse LIMIT/OFFSET/FETCH where a query may not have them."""


