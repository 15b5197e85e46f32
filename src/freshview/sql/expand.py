"""Relations read through a definition: a database's plain views, inheritance parents.

A catalog may answer ``relation_expansion(name)`` with SQL that stands for
the relation (``connectors.base.Source.expansion``): a plain view's
definition, or an inheritance parent's rows and its children's
(``SELECT ... FROM ONLY parent UNION ALL SELECT ... FROM ONLY child``).  A
FROM item naming such a relation (not ``ONLY``, not a CTE) is planned as that
query under the item's alias, as PostgreSQL plans it; a refusal inside the
definition names the relation and points at the FROM item.

The engine compiles a view again at every start, against its own catalog,
which knows tables and freshview views only; ``engine_sql`` therefore gives
the view's text with each such FROM item replaced by its definition in
parentheses (the rest of the text as written), which the engine reads as the
front end did.  Definitions may read views in turn (expanded the same way,
at most ``MAX_DEPTH`` deep).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from freshview.errors import SqlError
from freshview.plan import nodes as pn
from freshview.sql.parse import locate, parse_query

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext

MAX_DEPTH = 16

Splices = dict[tuple[int, int], str]  # (first, last character of the text replaced) -> replacement


def relation(qb: "QueryContext", table: exp.Table, name: str) -> tuple[str, pn.Node] | None:
    """The FROM item ``table`` (naming catalog relation ``name``) planned through its definition, or None
    when it has none."""
    ask = getattr(qb.catalog, "relation_expansion", None)
    if ask is None or table.args.get("only"):
        return None
    text = ask(name)
    if text is None:
        return None
    if qb.depth >= MAX_DEPTH:
        raise SqlError(f"{name}: views nested more than {MAX_DEPTH} deep", locate(table, qb.sql), qb.sql)
    nested = type(qb)(text, qb.catalog, qb.dialect)
    nested.depth = qb.depth + 1
    try:
        plan = nested.query(parse_query(text, qb.dialect.sqlglot))
    except SqlError as exc:
        where = ""
        if exc.location is not None:
            near = exc.location.snippet[max(exc.location.column - 1, 0):][:60].strip()
            where = f" (at {exc.location} of it, near: {near})" if near else f" (at {exc.location} of it)"
        raise type(exc)(f"{name} is read through its definition, where {exc.message}{where}",
                        locate(table, qb.sql), qb.sql) from None
    alias_node = table.args.get("alias")
    alias = alias_node.name if alias_node is not None and alias_node.name else table.name
    if alias_node is not None and alias_node.columns:
        plan = qb.rename_columns(plan, alias_node, table)
    parts = [table.args.get(k) for k in ("catalog", "db", "this")]
    spans = [(p.meta["start"], p.meta["end"]) for p in parts if p is not None and "start" in p.meta]
    if not spans:
        raise SqlError(f"{name}: cannot place its definition in the view's text", locate(table, qb.sql), qb.sql)
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    own = table.this.meta
    as_alias = "" if alias_node is not None and alias_node.name else f" AS {qb.sql[own['start']:own['end'] + 1]}"
    qb.splices[(first, last)] = f"({splice(text, nested.splices)}){as_alias}"
    return alias, plan


def splice(sql: str, splices: Splices) -> str:
    """``sql`` with each span replaced (spans do not overlap; one FROM item may be planned twice)."""
    out = sql
    for (first, last), text in sorted(splices.items(), reverse=True):
        out = out[:first] + text + out[last + 1:]
    return out
