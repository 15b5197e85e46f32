"""Building a logical plan from a parsed query.

For each SELECT the builder resolves the FROM items, binds every expression
against the combined ("wide") row of all FROM items, and assembles a plain
plan: the FROM items in full, joined in FROM order (``sql.join_tree``), the
WHERE conditions over the joined rows, then grouping, the SELECT list,
DISTINCT.  ``build_plan`` then optimises it with the plan rewrites
(``plan.rewrite``: constant folding, OR factoring, predicate pushdown and
join keys, join order, column pruning, projection merging).

Anything outside the supported subset is refused with its position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sqlglot import exp

from freshview.errors import SqlError, UnknownColumnError, UnknownTableError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.rewrite import optimize
from freshview.plan.rewrite.factor_or import factor_common_conjuncts
from freshview.plan.statistics import Statistics
from freshview.plan.expr import (
    ColumnRef, Expr, columns_used, conjuncts, remap_columns,
)
from freshview.sql import constants, ctes, expand, grouping_sets, lateral, paren_joins, srf
from freshview.plan import typing as ty
from freshview.sql.distinct_on import distinct_on
from freshview.sql.collate_groups import collate_groups, needs_collation
from freshview.sql.context import Catalog
from freshview.sql.dialect import POSTGRES, Dialect, get_dialect
from freshview.sql.bind_expr import AGG_BASE, AggCollector, ExprBinder, FromItem, Scope, ScopeColumn
from freshview.sql.join_tree import Step, Using, build_join_tree, join_kinds, resolve_using, starts_group
from freshview.sql.parse import locate, parse_query
from freshview.sql.recursive import recursive_ctes
from freshview.sql import window
from freshview.sql.setops import build_set_operation
from freshview.sql.subqueries import Subqueries, aggregates_ast, conjuncts_ast, predicate_kind


def build_plan(sql: str, catalog: Catalog, dialect: str | Dialect = "postgres", *,
               statistics: Statistics | None = None) -> pn.Node:
    """Parse ``sql`` in ``dialect`` (postgres, mysql) and build its optimised logical plan, or raise a located SqlError.

    ``statistics``: the relations' row counts the join order is chosen with (``plan.statistics``)."""
    return compile_view(sql, catalog, dialect, statistics=statistics)[0]


def compile_view(sql: str, catalog: Catalog, dialect: str | Dialect = "postgres", *,
                 statistics: Statistics | None = None) -> tuple[pn.Node, str]:
    """``build_plan``, and the text to compile against a catalog of tables and views only: ``sql`` with the
    relations read through a definition replaced by it (``sql.expand``; ``sql`` itself when there are none)."""
    d = get_dialect(dialect)
    tree = parse_query(sql, d.sqlglot)
    builder = QueryBuilder(sql, catalog, d)
    builder.view_select = _naming_select(tree)
    try:
        plan = optimize(builder.query(tree), statistics=statistics)
    except SqlError as err:  # a rule's refusal (plan.rewrite.temporal_filter) knows the position, not the text
        if err.sql is not None:
            raise
        raise type(err)(err.message, err.location, sql) from None
    return plan, expand.splice(sql, builder.splices)


@dataclass
class _Conditions:
    """A SELECT's conditions: inner-join and WHERE conjuncts (``conds``) and each join's step."""

    outer: bool  # some join is outer: each ON stays with its join
    conds: list[Expr]
    steps: list[Step]


@dataclass
class _Outputs:
    """A SELECT list bound: its expressions, names and origins, and what binding it collected."""

    exprs: list[Expr]
    names: list[str]
    origins: list[exp.Expression]  # the SELECT item each output came from, for errors
    aggs: AggCollector
    binder: ExprBinder  # (binds HAVING too)
    windows: window.WindowCollector
    topk: window.TopKSpec | None


@dataclass
class _Grouping:
    """GROUP BY and HAVING bound (with a collation's groups and a DISTINCT under a collation folded in)."""

    exprs: list[Expr]
    names: list[str]
    node: exp.Expression | None  # the GROUP BY clause
    sets: list[tuple[int, ...]] | None  # GROUPING SETS / ROLLUP / CUBE, as positions in ``exprs``
    having: Expr | None
    having_node: exp.Expression | None
    as_bound: list[Expr]  # the keys as bound (GROUPING()'s arguments)
    spelled: dict[int, int]  # spelling aggregate -> its key
    aggregated: bool
    distinct: bool  # DISTINCT still to apply over the outputs


class QueryBuilder:
    """Builds one query's plain plan; the construct modules see it as a ``sql.context.QueryContext``."""

    def __init__(self, sql: str, catalog: Catalog, dialect: Dialect = POSTGRES) -> None:
        self.sql = sql
        self.catalog = catalog
        self.dialect = dialect
        self.cte_scope: ctes.CteScope | None = None  # the WITH names visible here (sql.ctes)
        self.splices: expand.Splices = {}  # FROM items read through a definition (sql.expand)
        self.depth = 0  # how deep in definitions of relations this text is
        self.view_select: exp.Expression | None = None  # the SELECT that names the view's columns
        self.unnamed = 0  # subqueries in FROM without an alias so far
        self.subquery_count = 0  # subqueries made FROM items so far (sql.subqueries)

    def unsupported(self, node: exp.Expression | None, what: str, keyword: str | None = None) -> UnsupportedSqlError:
        return UnsupportedSqlError(f"{what} is not supported", locate(node, self.sql, keyword), self.sql)

    # ------------------------------------------------------------------ queries
    def query(self, node: exp.Expression) -> pn.Node:
        if isinstance(node, exp.Subquery):
            self.refuse_modifiers(node)
            return self.query(node.this)
        with_ = node.args.get("with_") or node.args.get("with")
        if with_ is not None:
            scoped = recursive_ctes if with_.args.get("recursive") else ctes.with_scope
            return scoped(self, with_, lambda: self.query_body(node))
        return self.query_body(node)

    def query_body(self, node: exp.Expression) -> pn.Node:
        if isinstance(node, exp.SetOperation):
            if any(node.args.get(k) is not None for k in ("limit", "offset", "fetch")):
                return window.union_top_k(self, node)
            return build_set_operation(self, node)
        if isinstance(node, exp.Select):
            return self.select(node)
        if isinstance(node, exp.Values):
            return constants.values(self, node)
        raise self.unsupported(node, f"{node.key.upper()} as a query")

    def refuse_modifiers(self, node: exp.Expression) -> None:
        if node.args.get("limit") is not None or node.args.get("offset") is not None:
            raise self.unsupported(node.args.get("limit") or node.args.get("offset"),
                                   "ORDER BY ... LIMIT/OFFSET (top-k)", "LIMIT")
        if node.args.get("fetch") is not None:
            raise self.unsupported(node.args.get("fetch"), "FETCH FIRST (top-k)", "FETCH")

    # ------------------------------------------------------------------ SELECT
    def select(self, node: exp.Select) -> pn.Node:
        """A SELECT in named phases, each binding in the order PostgreSQL reports errors in: the clauses
        refused; FROM and its scope; the conditions (ON, WHERE); the SELECT list; GROUP BY and HAVING (and a
        collation's groups); the join tree; the aggregation; windows or the projection and DISTINCT."""
        self._refuse_select_clauses(node)
        distinct = node.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            return distinct_on(self, node)  # the first row per key, a window (sql.distinct_on)
        node = srf.select_list(self, node)  # SRFs in the SELECT list: a ROWS FROM item (sql.srf)
        items, scope, using = self._from_scope(node)
        subs = Subqueries(self, items, scope)  # subqueries become more FROM items (``sql.subqueries``)
        where = self._conditions(node, items, scope, using, subs)
        out = self._select_list(node, scope, using, subs)
        grouping = self._grouping(node, scope, out, distinct is not None)

        if where.outer or subs.extra:
            where.steps += subs.steps(ExprBinder(scope, self.sql, None, "subquery conditions", self.dialect))
        plan, mapping = build_join_tree(items, where.steps, where.conds)

        def local(e: Expr) -> Expr:
            return remap_columns(e, {**mapping, **{i: i for i in _agg_refs(e)}})

        if grouping.aggregated:
            plan, out_final_exprs, localize = self._aggregate(node, plan, mapping, out, grouping, subs, local)
        else:
            out_final_exprs = [local(e) for e in out.exprs]
            localize = local

        if out.windows.calls or out.topk is not None:
            return window.finish_select(plan, out_final_exprs, out.names, out.windows, out.topk,
                                        grouping.distinct, localize, self.sql)
        plan = _project(plan, out_final_exprs, out.names)
        if grouping.distinct:
            plan = pn.Distinct(plan)
        return plan

    def _refuse_select_clauses(self, node: exp.Select) -> None:
        for key, what, kw in (
            ("windows", "WINDOW clause", "WINDOW"), ("qualify", "QUALIFY", "QUALIFY"),
            ("laterals", "LATERAL", "LATERAL"), ("pivots", "PIVOT", "PIVOT"),
            ("connect", "CONNECT BY", "CONNECT"), ("into", "SELECT INTO", "INTO"),
            ("locks", "FOR UPDATE/SHARE", "FOR"), ("sample", "TABLESAMPLE", "TABLESAMPLE"),
            ("prewhere", "PREWHERE", "PREWHERE"), ("cluster", "CLUSTER BY", "CLUSTER"),
            ("distribute", "DISTRIBUTE BY", "DISTRIBUTE"), ("sort", "SORT BY", "SORT"),
        ):
            if node.args.get(key):
                raise self.unsupported(node.args[key] if isinstance(node.args[key], exp.Expression) else node,
                                       what, kw)
        if not node.expressions:  # PostgreSQL's SELECT FROM t (EXISTS (SELECT FROM ...) is taken apart before)
            raise SqlError("a SELECT list with no columns is not supported: a view's result needs at least "
                           "one column", locate(node, self.sql, "SELECT"), self.sql)

    def _from_scope(self, node: exp.Select) -> tuple[list[FromItem], Scope, Using | None]:
        """The FROM items and the scope of their columns (USING / NATURAL merged, ``sql.join_tree``)."""
        items = self.from_items(node)
        if items[0].node is constants.ONE_ROW and any(isinstance(s, exp.Star) or (
                isinstance(s, exp.Column) and isinstance(s.this, exp.Star)) for s in node.expressions):
            raise SqlError("SELECT * with no tables specified is not valid", locate(node, self.sql), self.sql)
        scope = Scope([
            ScopeColumn(it.relation(i), name, t, it.offset + i)
            for it in items for i, (name, t) in enumerate(it.node.columns) if i >= it.hidden
        ])

        using = resolve_using(items, node, self.sql)  # JOIN ... USING / NATURAL JOIN (sql.join_tree)
        if using is not None:
            scope.merged, scope.hidden = using.merged, using.hidden
        return items, scope, using

    def _conditions(self, node: exp.Select, items: list[FromItem], scope: Scope, using: Using | None,
                    subs: Subqueries) -> _Conditions:
        """ON clauses and WHERE: with inner joins only, one conjunctive pool; an outer join keeps its ON."""
        kinds = join_kinds(node)
        outer = any(k != "inner" for k in kinds)
        cond_nodes: list[exp.Expression] = []
        on_nodes: list[tuple[int, exp.Expression]] = []  # outer joins: each ON stays with its join
        first_join = len(kinds) - len(node.args.get("joins") or [])
        for j, join in enumerate(node.args.get("joins") or []):
            if join.args.get("on") is not None:
                if outer:
                    on_nodes.append((first_join + j, join.args["on"]))
                else:
                    cond_nodes.append(join.args["on"])
        where_preds: list[exp.Expression] = []
        if node.args.get("where") is not None:
            parts = conjuncts_ast(node.args["where"].this)
            where_preds = [c for c in parts if predicate_kind(c)]
            if where_preds:
                cond_nodes += [c for c in parts if not predicate_kind(c)]
            else:
                cond_nodes.append(node.args["where"].this)
        binder = ExprBinder(scope, self.sql, None, "WHERE or JOIN conditions", self.dialect)
        binder.subquery = lambda n: subs.scalar(n, aggregated=False)
        binder.mark = lambda n: subs.mark(n, aggregated=False)
        conds: list[Expr] = []
        for c in cond_nodes:
            e = binder.bind(c)
            if e.type.kind not in ("bool", "null"):
                raise SqlError(f"argument of WHERE/ON must be boolean, not {e.type}", locate(c, self.sql), self.sql)
            conds += conjuncts(e)
        for c in where_preds:
            subs.predicate(c)
        on_binder = ExprBinder(scope, self.sql, None, "JOIN conditions", self.dialect)
        steps = [Step(k) for k in kinds]
        for k, it in enumerate(items):
            if it.srf is not None:  # set-returning functions over each row before it (sql.srf)
                steps[k].srf = it.srf
            if it.lateral is not None:  # over the distinct outer values it reads (sql.lateral)
                steps[k].outer = it.lateral[:2]
                if it.lateral[2] is not None:  # an aggregate without GROUP BY: one row per outer row
                    steps[k].kind, steps[k].pad = "left", it.lateral[2]
        commas = [0] + [first_join + j for j, join in enumerate(node.args.get("joins") or []) if starts_group(join)]
        joins_ast = node.args.get("joins") or []
        for k in range(first_join, len(kinds)):
            if kinds[k] in ("right", "full") and max(c for c in commas if c < k) > 0:  # a, b RIGHT JOIN c is a × (b ⟖ c)
                raise self.unsupported(joins_ast[k - first_join], f"{kinds[k].upper()} JOIN after a comma-separated "
                                       "FROM list (write the FROM list with JOIN ... ON)", kinds[k].upper())
        for k, on in on_nodes:
            last_comma = max(c for c in commas if c < k)
            e = on_binder.bind(on)
            if any(i < items[last_comma].offset for i in columns_used(e)):
                raise SqlError("invalid reference to a FROM item before the last comma in a JOIN's ON "
                               "(a, b JOIN c ON ... sees only b and c)", locate(on, self.sql), self.sql)
            if e.type.kind not in ("bool", "null"):
                raise SqlError(f"argument of JOIN/ON must be boolean, not {e.type}", locate(on, self.sql), self.sql)
            steps[k].on = conjuncts(factor_common_conjuncts(e))
        for k, eqs in (using.on.items() if using is not None else ()):
            if outer:
                steps[k].on = eqs
            else:
                conds += eqs
        return _Conditions(outer, conds, steps)

    def _select_list(self, node: exp.Select, scope: Scope, using: Using | None, subs: Subqueries) -> _Outputs:
        """The SELECT list, with * expanded; its aggregates, window calls and top-k collected."""
        aggs = AggCollector()
        select_binder = ExprBinder(scope, self.sql, aggs, "SELECT", self.dialect)
        windows = select_binder.windows = window.WindowCollector(self.sql)
        select_binder.subquery = lambda n: subs.scalar(n, aggregated=aggregates_ast(node))
        select_binder.mark = lambda n: subs.mark(n, aggregated=aggregates_ast(node))
        select_binder.grouping = node.args.get("group") is not None  # type: ignore[attr-defined]
        star_columns = [c for c in scope.columns if c.index < subs.outer_width  # not the subqueries' columns
                        and c.relation not in srf.hidden_names()]  # nor the SELECT list's SRFs (sql.srf)
        out_exprs: list[Expr] = []
        out_names: list[str] = []
        out_origins: list[exp.Expression] = []  # the SELECT item each output came from, for errors
        for sel in node.expressions:
            if isinstance(sel, exp.Star) or (isinstance(sel, exp.Column) and isinstance(sel.this, exp.Star)):
                qualifier = sel.table if isinstance(sel, exp.Column) else None
                cols = [(c.name, ColumnRef(c.type, c.index, c.name)) for c in star_columns
                         if qualifier is None or c.relation == qualifier]
                if qualifier and not cols:
                    raise UnknownColumnError(f"unknown table or alias {qualifier!r} in {qualifier}.*",
                                             locate(sel, self.sql), self.sql)
                if qualifier is None and using is not None:
                    cols = using.star
                for name, e in cols:
                    out_exprs.append(e)
                    out_names.append(name)
                    out_origins.append(sel)
                continue
            out_exprs.append(select_binder.bind(sel))
            if out_exprs[-1].type.kind == "interval" and node.args.get("distinct"):
                raise self.unsupported(sel, "SELECT DISTINCT over an interval column (PostgreSQL holds '1 day' "
                                            "and '24 hours' equal but prints them apart)")
            out_names.append(_output_name(sel, len(out_names)))
            out_origins.append(sel)
        if node is self.view_select:  # (a derived table may repeat a name: q(a, b) renames it, a use is ambiguous)
            _check_unique_names(out_names, node, self.sql)
        scope.aliases = {n: e.type for n, e in zip(out_names, out_exprs)}
        topk = window.bind_top_k(node, self.sql, select_binder, scope, out_names, out_exprs)
        select_binder.windows = window.NotHere(self.sql, "HAVING")  # only in the SELECT list and ORDER BY
        return _Outputs(out_exprs, out_names, out_origins, aggs, select_binder, windows, topk)

    def _grouping(self, node: exp.Select, scope: Scope, out: _Outputs, distinct: bool) -> _Grouping:
        """GROUP BY (expressions, select aliases or ordinals; grouping sets), HAVING, and the groups of a
        collation (``sql.collate_groups``: the outputs and HAVING rewritten over them, in ``out``)."""
        group_exprs: list[Expr] = []
        group_node = node.args.get("group")
        sets = None  # GROUPING SETS / ROLLUP / CUBE: the sets, as positions in group_exprs (sql.grouping_sets)
        if group_node is not None:
            expanded = grouping_sets.expand(group_node, self.sql)
            group_keys = group_node.expressions if expanded is None else expanded[0]
            sets = None if expanded is None else expanded[1]
            gbinder = ExprBinder(scope, self.sql, None, "GROUP BY", self.dialect)
            for g in group_keys:
                group_exprs.append(self._group_expr(g, gbinder, out.names, out.exprs, scope))
                if group_exprs[-1].type.kind == "json":
                    raise self.unsupported(g, "GROUP BY a json value (json has no equality operator; jsonb has)")
                if group_exprs[-1].type.kind == "interval":
                    raise self.unsupported(g, "GROUP BY an interval (PostgreSQL groups '1 day' with '24 hours' "
                                              "and keeps either spelling)")
        having_node = node.args.get("having")
        having: Expr | None = None
        select_binder, aggs = out.binder, out.aggs
        if having_node is not None:
            having = select_binder.bind(having_node.this)
            if having.type.kind not in ("bool", "null"):
                raise SqlError(f"argument of HAVING must be boolean, not {having.type}",
                               locate(having_node, self.sql), self.sql)

        collated_distinct = (distinct and not aggs.aggs and group_node is None and having is None
                             and not out.windows.calls and out.topk is None
                             and needs_collation(select_binder, out.exprs))
        if collated_distinct:  # DISTINCT under a collation: a GROUP BY of the outputs (sql.collate_groups)
            group_exprs, distinct = list(out.exprs), False
        group_names = [_group_name(g, out.names, out.exprs, i) for i, g in enumerate(group_exprs)]
        as_bound, spelled = list(group_exprs), {}  # (GROUPING()'s arguments; spelling aggregate -> its key)
        if needs_collation(select_binder, group_exprs):
            group_names = [f"_fv_key_{n}" if select_binder.collation_of(g) else n
                           for n, g in zip(group_names, group_exprs)]
            group_exprs, rewritten = collate_groups(select_binder, aggs, group_exprs, [*out.exprs, having])
            spelled = {j: i for i, g in enumerate(as_bound) for j, a in enumerate(aggs.aggs)
                       if a.func == "spelling" and a.arg == g}
            out.exprs, having = rewritten[:-1], rewritten[-1]
        aggregated = bool(aggs.aggs) or group_node is not None or having is not None or collated_distinct
        return _Grouping(group_exprs, group_names, group_node, sets, having, having_node, as_bound, spelled,
                         aggregated, distinct)

    def _aggregate(self, node: exp.Select, plan: pn.Node, mapping: dict[int, int], out: _Outputs,
                   grouping: _Grouping, subs: Subqueries,
                   local: Callable[[Expr], Expr]) -> tuple[pn.Node, list[Expr], Callable[[Expr], Expr]]:
        """The Aggregate over the joined rows (a union of them for grouping sets), the outputs and HAVING
        rewritten over its columns, and the scalar subqueries of SELECT/HAVING joined after it."""
        group_exprs, aggs, having, having_node = grouping.exprs, out.aggs, grouping.having, grouping.having_node
        lift = _AggregateLift(group_exprs, len(group_exprs), self.sql, self.dialect.ungrouped_hint)
        if grouping.sets is None and not grouping_sets.grouping_calls([*out.exprs, having, *out.windows.exprs()]):
            agg_node: pn.Node = pn.Aggregate(
                plan,
                tuple(local(g) for g in group_exprs),
                tuple(_remap_agg(a, mapping) for a in aggs.aggs),
                tuple(grouping.names),
            )
        else:  # a union of aggregations, then one column per GROUPING() call (sql.grouping_sets)
            calls = grouping_sets.grouping_calls([*out.exprs, having, *out.windows.exprs()])
            agg_node = grouping_sets.aggregate(
                plan, [local(g) for g in group_exprs], [_remap_agg(a, mapping) for a in aggs.aggs],
                grouping.names, grouping.sets or [tuple(range(len(group_exprs)))], calls, grouping.as_bound,
                grouping.spelled, grouping.node, self.sql)
            first = len(group_exprs) + len(aggs.aggs)
            lift.grouping = {c: ColumnRef(ty.INT4, first + k, "grouping") for k, c in enumerate(calls)}
        out_final_exprs = [lift.rewrite(e, sel) for e, sel in zip(out.exprs, out.origins)]
        plan = agg_node
        plan = subs.join_after_aggregate(plan, lift)  # scalar subqueries of SELECT/HAVING
        out_final_exprs = [subs.after_aggregate(e, len(group_exprs), len(agg_node.columns))
                           for e in out_final_exprs]
        if having is not None:
            plan = pn.Filter(plan, subs.after_aggregate(lift.rewrite(having, having_node), len(group_exprs),
                                                        len(agg_node.columns)))
        localize = lambda e: subs.after_aggregate(lift.rewrite(e, node), len(group_exprs),  # noqa: E731
                                                  len(agg_node.columns))
        return plan, out_final_exprs, localize

    def _group_expr(self, g: exp.Expression, binder: ExprBinder, out_names: list[str],
                    out_exprs: list[Expr], scope: Scope) -> Expr:
        if isinstance(g, exp.Literal) and not g.is_string:
            pos = int(g.this)
            if not 1 <= pos <= len(out_exprs):
                raise SqlError(f"GROUP BY position {pos} is not in select list", locate(g, self.sql), self.sql)
            target = out_exprs[pos - 1]
            if any(i >= AGG_BASE for i in columns_used(target)):
                raise SqlError("aggregate functions are not allowed in GROUP BY", locate(g, self.sql), self.sql)
            return target
        if isinstance(g, exp.Column) and not g.table and g.name in out_names and not scope.resolve(g.name, None):
            target = out_exprs[out_names.index(g.name)]
            if any(i >= AGG_BASE for i in columns_used(target)):
                raise SqlError("aggregate functions are not allowed in GROUP BY", locate(g, self.sql), self.sql)
            return target
        return binder.bind(g)

    # ------------------------------------------------------------------ FROM
    def from_items(self, node: exp.Select) -> list[FromItem]:
        from_ = node.args.get("from_") or node.args.get("from")
        if from_ is None:  # one row of no visible column (sql.constants)
            return [FromItem("", constants.ONE_ROW, 0)]
        raw = [from_.this]
        if from_.expressions:
            raw += list(from_.expressions)
        for join in node.args.get("joins") or []:
            kind = (join.args.get("kind") or "").upper()
            if kind not in ("", "INNER", "CROSS", "OUTER"):
                raise self.unsupported(join, f"{kind} JOIN", kind)
            if join.args.get("method") and join.args["method"].upper() != "NATURAL":
                raise self.unsupported(join, f"{join.args['method']} JOIN", str(join.args["method"]))
            raw.append(join.this)
        items: list[FromItem] = []
        offset = 0
        seen: set[str] = set()
        for r in raw:
            if srf.is_item(r):  # a set-returning function over the items before it (sql.srf)
                item = srf.srf_item(self, r, items, r.parent if isinstance(r.parent, exp.Join) else None)
                aliases = [item.alias]
            elif isinstance(r, exp.Lateral):
                join = r.parent if isinstance(r.parent, exp.Join) else None
                item = lateral.lateral_item(self, r, items, join)
                aliases = [item.alias]
            elif paren_joins.is_parenthesised_join(r):
                aliases, item = paren_joins.parenthesised_join(self, r)
            else:
                alias, plan = self.from_item(r)
                aliases, item = [alias], FromItem(alias, plan, 0)
            for alias in aliases:
                if alias in seen:
                    raise SqlError(f"table name {alias!r} specified more than once", locate(r, self.sql), self.sql)
                seen.add(alias)
            items.append(FromItem(item.alias, item.node, offset, item.relations, item.hidden, item.lateral, item.srf))
            offset += len(item.node.columns)
        return items

    def from_item(self, r: exp.Expression) -> tuple[str, pn.Node]:
        if isinstance(r, exp.Table):
            if isinstance(r.this, (exp.GenerateSeries, exp.ExplodingGenerateSeries)):
                return self._series(r)
            if isinstance(r.this, exp.Func) or r.args.get("rows_from"):
                function = r.this if isinstance(r.this, exp.Func) else r.args["rows_from"][0].this
                called = function.sql(dialect=self.dialect.sqlglot).split("(")[0].lower()
                if self.dialect.name == "mysql":
                    raise UnsupportedSqlError(f"{called.upper()}(...) in FROM is not supported: a view reads tables "
                                              "and views (a JSON_TABLE of a column would make rows of each row; "
                                              "not maintained yet)", locate(r, self.sql), self.sql)
                raise UnsupportedSqlError(f"function {called}(...) in FROM is not supported (the set-returning "
                                          f"functions a view takes: {', '.join(sorted(srf.NAMES))})",
                                          locate(r, self.sql), self.sql)
            if r.args.get("joins"):
                raise self.unsupported(r, "a parenthesised join in FROM")
            if r.args.get("sample") is not None:
                raise UnsupportedSqlError("TABLESAMPLE is not supported: it reads a random sample of the table, "
                                          "so the view's rows would not be a function of the table's rows",
                                          locate(r.args["sample"], self.sql, "TABLESAMPLE"), self.sql)
            cte = ctes.resolve(self, r)
            if cte is not None:
                return cte
            name = r.name
            if r.db and r.db != getattr(self.catalog, "default_schema", "public"):
                name = f"{r.db}.{name}"  # (relations of the default schema are known by their bare names)
            expanded = expand.relation(self, r, name)  # a database view, an inheritance parent
            if expanded is not None:
                return expanded
            found = self.catalog.relation_columns(name)
            if found is None:
                raise UnknownTableError(f"unknown table {r.sql(dialect='postgres').split(' AS ')[0]!r} "
                                        "(not a registered source or view)", locate(r, self.sql), self.sql)
            columns, is_view = found
            alias_node = r.args.get("alias")
            alias = alias_node.name if alias_node is not None else r.name
            plan: pn.Node = pn.Scan(name, columns, is_view)
            if alias_node is not None and alias_node.columns:
                plan = self.rename_columns(plan, alias_node, r)
            return alias, plan
        if isinstance(r, exp.Subquery):
            alias_node = r.args.get("alias")
            if (alias_node is None or not alias_node.name) and not self.dialect.unnamed_subqueries:
                raise SqlError("a subquery in FROM must have an alias", locate(r, self.sql, "("), self.sql)
            if r.args.get("lateral"):
                raise self.unsupported(r, "LATERAL subquery", "LATERAL")
            plan = self.query(r.this)
            if alias_node is None or not alias_node.name:
                # No name its columns can be qualified with (as in PostgreSQL): one no identifier can spell.
                self.unnamed += 1
                return f"(subquery {self.unnamed})", plan
            if alias_node.columns:
                plan = self.rename_columns(plan, alias_node, r)
            return alias_node.name, plan
        if isinstance(r, exp.Values):
            plan = constants.values(self, r)
            alias_node = r.args.get("alias")
            if alias_node is not None and alias_node.columns:
                plan = self.rename_columns(plan, alias_node, r)
            return (alias_node.name if alias_node is not None and alias_node.name else "*VALUES*"), plan
        if isinstance(r, exp.Lateral):
            raise self.unsupported(r, "LATERAL", "LATERAL")
        raise self.unsupported(r, f"{r.key.upper()} in FROM")

    def _series(self, r: exp.Table) -> tuple[str, pn.Node]:
        """generate_series(...) in FROM: named as PostgreSQL names a function's column, after the function,
        or after the table alias, or by the alias's column list."""
        plan: pn.Node = constants.generate_series(self, r.this, r)
        alias_node = r.args.get("alias")
        if alias_node is None or not alias_node.name:
            return "generate_series", plan
        if alias_node.columns:
            return alias_node.name, self.rename_columns(plan, alias_node, r)
        t = plan.columns[0][1]
        return alias_node.name, pn.Project(plan, (ColumnRef(t, 0, alias_node.name),), (alias_node.name,))

    def rename_columns(self, plan: pn.Node, alias_node: exp.TableAlias, r: exp.Expression) -> pn.Node:
        names = [c.name for c in alias_node.columns]
        if len(names) > len(plan.columns):
            raise SqlError(f"{alias_node.name} has {len(plan.columns)} columns but {len(names)} were named",
                           locate(r, self.sql), self.sql)
        names += [n for n, _ in plan.columns[len(names):]]
        return pn.Project(plan, tuple(ColumnRef(t, i, n) for i, (n, t) in enumerate(plan.columns)), tuple(names))

# ---------------------------------------------------------------------- helpers
def _agg_refs(e: Expr) -> set[int]:
    return {i for i in columns_used(e) if i >= AGG_BASE}


def _remap_agg(a, mapping):
    return a.map_exprs(lambda e: remap_columns(e, mapping))


class _AggregateLift:
    """Rewrites SELECT/HAVING expressions over the Aggregate node's output."""

    def __init__(self, group_exprs: list[Expr], n_groups: int, sql: str, hint: str = "") -> None:
        self.hint = hint  # the dialect's word on why (sql.dialect)
        self.group_exprs = group_exprs
        self.n_groups = n_groups
        self.sql = sql
        self.grouping: dict[Expr, Expr] = {}  # GROUPING(...) call -> its column (sql.grouping_sets)

    def rewrite(self, e: Expr, origin: exp.Expression | None) -> Expr:
        if e in self.grouping:
            return self.grouping[e]
        for i, g in enumerate(self.group_exprs):
            if e == g:
                return ColumnRef(g.type, i, getattr(g, "name", "") or f"g{i}")
        if isinstance(e, ColumnRef):
            if e.index >= window.WIN_BASE:  # a window result: placed above the aggregate
                return e
            if e.index >= AGG_BASE:
                return ColumnRef(e.type, self.n_groups + e.index - AGG_BASE, e.name)
            raise SqlError(
                f"column {e.name!r} must appear in the GROUP BY clause or be used in an aggregate function{self.hint}",
                _locate_column(origin, e.name, self.sql), self.sql)
        return e.map_children(lambda c: self.rewrite(c, origin))


def _locate_column(origin: exp.Expression | None, name: str, sql: str):
    if origin is not None:
        for col in origin.find_all(exp.Column):
            if col.name == name:
                return locate(col, sql)
    return locate(origin, sql)


def _group_name(g: Expr, out_names: list[str], out_exprs: list[Expr], i: int) -> str:
    for n, e in zip(out_names, out_exprs):
        if e == g:
            return n
    return g.name if isinstance(g, ColumnRef) and g.name else f"group{i}"


def _output_name(sel: exp.Expression, position: int) -> str:
    if isinstance(sel, exp.Alias):
        return sel.alias
    if isinstance(sel, exp.Column):
        return sel.name
    inner = sel
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Window):  # PostgreSQL names it after the function
        inner = inner.this
    if isinstance(inner, exp.Column):
        return inner.name
    if isinstance(inner, exp.Cast):
        base = inner.this
        if isinstance(base, exp.Column):
            return base.name
        return _pg_type_name(inner)
    if isinstance(inner, exp.Count):
        return "count"
    if isinstance(inner, exp.Func):
        name = inner.sql_name().lower()
        return {"timestamp_trunc": "date_trunc", "date_trunc": "date_trunc"}.get(name, name)
    if isinstance(inner, exp.Case):
        return "case"
    if isinstance(inner, exp.Subquery) and isinstance(inner.this, exp.Select) and inner.this.expressions:
        return _output_name(inner.this.expressions[0], position)  # PostgreSQL names it as the subquery does
    return "?column?"


def _pg_type_name(cast: exp.Cast) -> str:
    text = cast.to.sql(dialect="postgres").lower()
    return text.split("(")[0].strip()


def _naming_select(tree: exp.Expression) -> exp.Expression:
    """The SELECT whose output names are the view's columns (a set operation's first)."""
    while isinstance(tree, (exp.SetOperation, exp.Subquery)):
        tree = tree.this
    return tree


def _check_unique_names(names: list[str], node: exp.Select, sql: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise SqlError(
                f"the view would have two columns named {n!r}; give one of them an alias (AS ...)",
                locate(node, sql), sql)
        seen.add(n)


def _project(plan: pn.Node, exprs: list[Expr], names: list[str]) -> pn.Node:
    identity = (
        len(exprs) == len(plan.columns)
        and all(isinstance(e, ColumnRef) and e.index == i for i, e in enumerate(exprs))
        and tuple(names) == tuple(n for n, _ in plan.columns)
    )
    if identity:
        return plan
    return pn.Project(plan, tuple(exprs), tuple(names))
