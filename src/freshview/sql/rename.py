"""A view's text after a table it reads was renamed, or columns of it: what PostgreSQL does to its own views.

PostgreSQL keeps a view bound to the table and columns it read when they are
renamed, and shows its definition with the new names; ``renamed`` does the
same to a freshview view's SQL text, so the stored definition reads the
table as it is now (the service compiles it again after a lost state, when
the table is followed anew ...).  Only the names that change are replaced,
in place (``expand.splice``), the rest of the text stays as written:

* each FROM item naming the table (not a WITH query of that name) names it
  by its new name, and keeps the old one as its alias when it had none, so
  every ``old.column`` reference stays right;
* each reference to a renamed column of the table (found as PostgreSQL binds
  it: sqlglot's ``qualify`` resolves unqualified and correlated references
  over the tables' columns, ``columns_of``) names the new column; a select
  item that was that bare column keeps its output name (``amount`` becomes
  ``total AS amount``), so the view's columns keep their names.

What cannot be rewritten so is refused (``SqlError``, saying why): a ``*``
or a ``USING``/``NATURAL`` join over the table while columns of it are
renamed (their expansion would follow the new names).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope

from freshview.errors import SqlError
from freshview.sql import expand
from freshview.sql.dialect import Dialect, get_dialect
from freshview.sql.parse import parse_query

# engine name of a relation -> its column names (None: not known, e.g. a WITH query's)
ColumnsOf = Callable[[str], "Sequence[str] | None"]


def renamed(sql: str, dialect: str | Dialect, default_schema: str, table: str,
            new_table: tuple[str | None, str] | None, columns: Mapping[str, str], columns_of: ColumnsOf) -> str:
    """``sql`` reading ``table`` (its engine name: ``x`` or ``schema.x``, as ``build`` names relations) as
    ``new_table`` (None: not renamed; else the new name's schema part, None for the default schema, and
    table part, both as SQL text) and its columns ``columns`` (old name -> new name) by their new names.  ``columns_of``: the
    columns of the relations the view reads (the table's under their old names)."""
    d = get_dialect(dialect)
    tree = parse_query(sql, d.sqlglot)
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    splices: expand.Splices = {}
    targets = [t for t in tree.find_all(exp.Table)
               if _engine_name(t, default_schema) == table and not (not t.db and t.name in ctes)]
    for t in targets if new_table is not None else ():
        splices.update(_table_splice(sql, t, new_table, default_schema, d))
    if columns and targets:  # (qualifies the tree in place: last)
        splices.update(_column_splices(sql, tree, d, default_schema, table, columns, columns_of))
    out = expand.splice(sql, splices)
    parse_query(out, d.sqlglot)  # (a new name the dialect reads otherwise, e.g. a keyword: refused, not stored)
    return out


def reading_as(sql: str, dialect: str | Dialect, default_schema: str, relations: Mapping[str, str]) -> str:
    """``sql`` with each FROM item naming one of ``relations`` (engine name -> a WITH query's name, bare) naming
    that WITH query instead, under its old name as alias (not a WITH query of the same name): how
    ``verify_view`` reads a freshview view it reads through its definition."""
    d = get_dialect(dialect)
    tree = parse_query(sql, d.sqlglot)
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    splices: expand.Splices = {}
    for t in tree.find_all(exp.Table):
        name = _engine_name(t, default_schema)
        if name not in relations or (not t.db and t.name in ctes):
            continue
        parts = [t.args.get(k) for k in ("catalog", "db", "this")]
        spans = [(p.meta["start"], p.meta["end"]) for p in parts if p is not None and "start" in p.meta]
        if not spans:
            raise SqlError(f"cannot place {relations[name]} for {t.name} in the view's text", None, sql)
        alias = t.args.get("alias")
        text = relations[name] + ("" if alias is not None and alias.name else
                                  f" AS {sql[t.this.meta['start']:t.this.meta['end'] + 1]}")
        splices[(min(s for s, _ in spans), max(e for _, e in spans))] = text
    return expand.splice(sql, splices)


def _engine_name(t: exp.Table, default_schema: str) -> str:
    return f"{t.db}.{t.name}" if t.db and t.db != default_schema else t.name


def _table_splice(sql: str, t: exp.Table, new_table: tuple[str | None, str], default_schema: str,
                  d: Dialect) -> expand.Splices:
    parts = [t.args.get(k) for k in ("catalog", "db", "this")]
    spans = [(p.meta["start"], p.meta["end"]) for p in parts if p is not None and "start" in p.meta]
    if not spans:
        raise SqlError(f"cannot place the new name of {t.name} in the view's text", None, sql)
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    schema, name = new_table
    text = name if schema is None and not t.db else f"{schema or _quote(default_schema, d)}.{name}"
    alias = t.args.get("alias")
    if alias is None or not alias.name:
        own = t.this.meta
        text += f" AS {sql[own['start']:own['end'] + 1]}"  # old.column references stay right
    return {(first, last): text}


def _column_splices(sql: str, tree: exp.Expression, d: Dialect, default_schema: str, table: str,
                    columns: Mapping[str, str], columns_of: ColumnsOf) -> expand.Splices:
    bare = set()  # where select items that are a bare column start (their output name must stay)
    for select in tree.find_all(exp.Select):
        for item in select.expressions:
            if isinstance(item, exp.Column) and not isinstance(item.this, exp.Star) and "start" in item.this.meta:
                bare.add(item.this.meta["start"])
    _refuse_expansions(sql, tree, default_schema, table, columns)
    schema: dict = {}
    for t in tree.find_all(exp.Table):
        found = columns_of(_engine_name(t, default_schema))
        if found is not None:  # (one nesting level for all: bare names are the default schema's)
            schema.setdefault(t.db or default_schema, {})[t.name] = {c: "int" for c in found}  # (types do not matter)
    try:
        qualified = qualify(tree, dialect=d.sqlglot, db=default_schema, schema=schema or None, expand_stars=False,
                            validate_qualify_columns=False, quote_identifiers=False, identify=False)
        scopes = traverse_scope(qualified)
    except (SqlglotError, KeyError, ValueError, TypeError) as exc:  # (sqlglot's own, on a query it cannot qualify)
        raise SqlError(f"cannot resolve the view's column references to rewrite them: {exc}", None, sql) from None
    splices: expand.Splices = {}
    for scope in scopes:
        for col in scope.columns:
            if col.name not in columns or "start" not in col.this.meta:
                continue
            source = _source(scope, col.table)
            if isinstance(source, exp.Table) and _engine_name(source, default_schema) == table:
                start, end = col.this.meta["start"], col.this.meta["end"]
                text = _quote(columns[col.name], d)
                if start in bare:
                    text += f" AS {sql[start:end + 1]}"
                splices[(start, end)] = text
    return splices


def _source(scope: Scope | None, alias: str) -> object:
    while scope is not None:
        if alias in scope.sources:
            return scope.sources[alias]
        scope = scope.parent
    return None


def _refuse_expansions(sql: str, tree: exp.Expression, default_schema: str, table: str,
                       columns: Mapping[str, str]) -> None:
    """A ``*`` or a USING/NATURAL join in a query over ``table`` would name its renamed columns anew."""
    for select in tree.find_all(exp.Select):
        reads = [t for t in select.find_all(exp.Table) if t.find_ancestor(exp.Select) is select
                 and _engine_name(t, default_schema) == table]
        if not reads:
            continue
        if any(isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star))
               for item in select.expressions):
            raise SqlError(f"it selects * from {table}, whose renamed columns would change its columns", None, sql)
        for join in select.args.get("joins") or ():
            using = {i.name for i in join.args.get("using") or ()}
            if join.args.get("method", "").upper() == "NATURAL" or join.args.get("kind", "") == "NATURAL" \
                    or using & set(columns):
                raise SqlError(f"it joins {table} by USING or NATURAL over a renamed column", None, sql)


def _quote(name: str, d: Dialect) -> str:
    """An identifier as SQL text of the dialect, always quoted (no keyword list to keep)."""
    return exp.to_identifier(name, quoted=True).sql(dialect=d.sqlglot)
