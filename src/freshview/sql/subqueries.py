"""Subqueries in expressions, decorrelated into joins the plan already has.

Each subquery becomes one more FROM item of the query around it (alias
``__sqN``), joined by a kind the join tree (``sql.join_tree``) lowers into
core nodes (``plan.rewrite.joins``):

* ``EXISTS (S)`` / ``NOT EXISTS (S)`` (a WHERE conjunct): a semi- / anti-join
  on S's correlation equalities; other correlated conjuncts (``l2.a <> l1.a``)
  stay a residual condition of that join.  Uncorrelated: "S is not empty".
* ``x IN (S)``: a semi-join on x = S's column plus the correlation;
  ``x NOT IN (S)``: PostgreSQL's three-valued NOT IN (a NULL in S, or a NULL
  x over a non-empty S, makes it NULL, so the row is dropped).
* EXISTS / IN anywhere else (under OR, NOT, CASE, in the SELECT list): a
  *mark join* item (``plan.rewrite.mark_join``), built like the semi-join but
  adding one column, the predicate's TRUE / NULL / FALSE, which the
  expression around it reads.
* a scalar subquery ``(S)`` in WHERE or SELECT: uncorrelated, an aggregate
  without GROUP BY (exactly one row) cross-joined; correlated by equalities,
  S grouped by its correlation columns and LEFT-joined on them, a row without
  a group taking the value S has over no rows (COUNT gives 0: the "count bug").
  When S's value uses outer columns (``SELECT COUNT(*) * o.x``), S outputs
  its aggregates and the value is computed around them over the joined row.
  In the SELECT list or HAVING of an aggregating query S is joined after the
  aggregation (``join_after_aggregate``), correlated S on GROUP BY columns.

Correlation means a column of S's WHERE (or of a scalar S's SELECT list) that
S's own FROM items do not have but the outer query's do (S's own shadow the
outer ones).  What is not one of these shapes is refused with its position:
IN/EXISTS in an outer join's ON or in an aggregating query's SELECT list or
HAVING, correlation outside S's WHERE or below S, a correlated S with GROUP
BY, HAVING or aggregates (for EXISTS/IN), a non-equality correlation of a
scalar subquery, a correlation on a column that is not grouped, an aggregate
of outer columns.  A scalar subquery that is not an aggregate (it may return any number of rows) is
counted per key by ``sql.single_row`` and joined the same way; its value is the one row's, NULL for
none, PostgreSQL's error for more.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from sqlglot import exp

from freshview.errors import SqlError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import ColumnRef, Expr, Literal, conjuncts
from freshview.plan.rewrite.joins import empty_row, outer_join, refs
from freshview.plan.rewrite.mark_join import MARK
from freshview.plan import typing as ty
from freshview.sql import ctes, magic_sets, single_row
from freshview.sql.ast_walk import conjuncts_ast, own_columns as _own_columns, strip as _strip
from freshview.sql.bind_expr import AGG_BASE, ExprBinder, FromItem, Scope, ScopeColumn
from freshview.sql.join_tree import Step
from freshview.sql.parse import locate

if TYPE_CHECKING:
    from freshview.sql.context import QueryContext


@dataclass
class SubqueryItem:
    """A subquery as one more FROM item: how it joins (``kind``) and on what (AST over the scope)."""

    alias: str
    plan: pn.Node
    kind: str  # inner | left | semi | anti | not_in
    on: list[exp.Expression] = field(default_factory=list)
    pad: tuple[Expr, ...] | None = None  # left: the subquery's row when there is no group
    not_in: exp.Expression | None = None  # not_in: the "x = y" comparison
    outer: tuple[pn.OuterRows, tuple[Expr, ...]] | None = None  # over the outer rows' values (sql.magic_sets)




def predicate_kind(c: exp.Expression) -> str | None:
    """``exists``, ``not_exists``, ``in``, ``not_in`` for a WHERE conjunct that is one, else None."""
    c = _strip(c)
    negated = False
    if isinstance(c, exp.Not):
        negated, c = True, _strip(c.this)
    if isinstance(c, exp.Exists):
        return "not_exists" if negated else "exists"
    if isinstance(c, exp.In) and c.args.get("query") is not None:
        return "not_in" if negated else "in"
    return None



@dataclass
class PostAggregate:
    """A scalar subquery of an aggregating query's SELECT list or HAVING, joined after the aggregation."""

    plan: pn.Node  # its correlation keys, then its value (or its aggregates)
    kind: str  # inner (uncorrelated: one row) | left
    keys: tuple[tuple[Expr, int], ...]  # (outer expression over the FROM items, the plan's key column)
    pad: tuple[Expr, ...] | None
    origin: exp.Expression


class Subqueries:
    """The subqueries of one SELECT, turned into FROM items as they are met."""

    def __init__(self, builder: "QueryContext", items: list["FromItem"], scope: Scope) -> None:
        self.b = builder
        self.sql = builder.sql
        self.items = items
        self.scope = scope
        self.outer_width = sum(len(it.node.columns) for it in items)
        self.extra: list[SubqueryItem] = []
        self.post_aggregate: list[PostAggregate] = []  # scalar subqueries joined after the aggregation

    def unsupported(self, node, what: str, keyword: str | None = None) -> UnsupportedSqlError:
        return self.b.unsupported(node, what, keyword)

    def _new_alias(self) -> str:
        n = self.b.subquery_count
        self.b.subquery_count = n + 1
        return f"__sq{n}"

    def _add(self, item: SubqueryItem) -> None:
        """Append the subquery as a FROM item: its columns enter the scope (for binding its ON)."""
        offset = self.items[-1].offset + len(self.items[-1].node.columns) if self.items else 0
        self.items.append(FromItem(item.alias, item.plan, offset))
        for i, (name, t) in enumerate(item.plan.columns):
            self.scope.columns.append(ScopeColumn(item.alias, name, t, offset + i))
        self.extra.append(item)

    # ------------------------------------------------------------------ WHERE predicates
    def predicate(self, c: exp.Expression) -> None:
        """A WHERE conjunct that is [NOT] EXISTS or [NOT] IN (subquery): a semi- or anti-join item."""
        kind = predicate_kind(c)
        node = _strip(c)
        if isinstance(node, exp.Not):
            node = _strip(node.this)
        if isinstance(node, exp.Exists):
            query = node.this
            self._semi(query, "semi" if kind == "exists" else "anti", None, node)
            return
        query = node.args["query"]
        query = query.this if isinstance(query, exp.Subquery) else query
        self._semi(query, "semi" if kind == "in" else "not_in", node.this, node)

    # ------------------------------------------------------------------ IN / EXISTS as values
    def mark(self, node: exp.Expression, aggregated: bool) -> Expr:
        """``EXISTS (S)`` or ``x IN (S)`` met while binding outside a WHERE conjunct: a mark-join item
        (``plan.rewrite.mark_join``); returns its mark column, the predicate's three-valued result."""
        if aggregated:
            what = "EXISTS" if isinstance(node, exp.Exists) else "IN"
            raise self.unsupported(node, f"{what} (subquery) in the SELECT list or HAVING of an aggregating "
                                         "query", what)
        if isinstance(node, exp.Exists):
            item = self._semi(node.this, "mark_exists", None, node)
        else:
            query = node.args["query"]
            item = self._semi(query.this if isinstance(query, exp.Subquery) else query, "mark_in", node.this, node)
        return self._ref(item.alias, len(item.plan.columns) - 1)

    def _semi(self, query: exp.Expression, kind: str, lhs: exp.Expression | None,
              origin: exp.Expression) -> SubqueryItem:
        alias = self._new_alias()
        if isinstance(query, exp.Subquery):
            query = query.this
        correlated = self._correlated(query) if isinstance(query, exp.Select) else ([], [])
        corr, _local = correlated
        if not corr:  # uncorrelated: the subquery as written
            if lhs is None and isinstance(query, exp.Select) and not query.expressions:
                query = query.copy().select(exp.alias_(exp.Literal.number(1), "__one"))  # EXISTS (SELECT FROM t)
            plan = self.b.query(query)
            if lhs is not None and len(plan.columns) != 1:
                raise SqlError("subquery has too many columns" if len(plan.columns) > 1 else
                               "subquery has too few columns", locate(query, self.sql), self.sql)
            if lhs is not None:
                plan = _rename(plan, ("__v",))
            on: list[exp.Expression] = []
        else:
            assert isinstance(query, exp.Select)
            for key, what in (("group", "GROUP BY"), ("having", "HAVING")):
                if query.args.get(key) is not None:
                    raise self.unsupported(query.args[key], f"{what} in a correlated IN/EXISTS subquery", what)
            if _has_aggregate(query):
                raise self.unsupported(query, "an aggregate in a correlated IN/EXISTS subquery", "SELECT")
            rewritten, on, names = self._decorrelate(query, corr, alias, scalar=False)
            exprs = []
            if lhs is not None:
                if len(query.expressions) != 1:
                    raise SqlError("subquery has too many columns", locate(query, self.sql), self.sql)
                exprs.append(exp.alias_(query.expressions[0].copy(), "__v"))
            exprs += [exp.alias_(e, n) for n, e in names]
            if not exprs:
                exprs = [exp.alias_(exp.Literal.number(1), "__one")]
            rewritten.set("expressions", exprs)
            rewritten.set("distinct", None)
            plan = self.b.query(rewritten)
        if kind in ("mark_exists", "mark_in"):  # the item's last column is the mark (sql.join_tree)
            plan = pn.Project(plan, refs(plan.columns) + (Literal(ty.BOOL, None),),
                              tuple(n for n, _ in plan.columns) + (MARK,))
        item = SubqueryItem(alias, plan, kind, on)
        if lhs is not None:
            eq = exp.EQ(this=lhs.copy(), expression=exp.column("__v", table=alias))
            if kind in ("not_in", "mark_in"):
                item.not_in = eq
            else:
                item.on.append(eq)
        self._add(item)
        return item

    # ------------------------------------------------------------------ scalar subqueries
    def scalar(self, node: exp.Subquery, aggregated: bool) -> Expr:
        """A scalar subquery met while binding: its value as an expression over the wide row
        (or, ``aggregated``, a placeholder the builder places after the aggregation)."""
        query = node.this
        if not isinstance(query, exp.Select):
            raise self.unsupported(node, "a scalar subquery that is not a plain SELECT", "(")
        if len(query.expressions) != 1:  # (SELECT * ...) is never an aggregate: refused below
            raise SqlError("subquery must return only one column", locate(node, self.sql, "("), self.sql)
        corr, _local = self._correlated(query, allow_select=True)
        one_row = ((_has_aggregate(query) or not (query.args.get("from_") or query.args.get("where")))
                   and query.args.get("group") is None and query.args.get("having") is None)
        value = query.expressions[0].this if isinstance(query.expressions[0], exp.Alias) else query.expressions[0]
        outer_in_value = any(self._is_outer(c, self._inner_scope) for c in _own_columns(value))
        if not one_row:
            return self._single_row(node, query, value, corr, outer_in_value, aggregated)
        if corr and magic_sets.is_theta(self, corr):
            alias, plan, pad, outer, outside = magic_sets.theta_scalar(self, query, corr, node, aggregated,
                                                                      outer_in_value)
            self._add(SubqueryItem(alias, plan, "left", [], pad, outer=outer))
            if outside is None:
                return self._ref(alias, len(plan.columns) - 1)
            return ExprBinder(self.scope, self.sql, None, "a scalar subquery's value", self.b.dialect).bind(outside)
        alias = self._new_alias()
        if not corr and not outer_in_value:
            plan = _rename(self.b.query(query), ("__v",))
            return self._place(alias, plan, "inner", [], None, node, aggregated, None)
        if corr:
            rewritten, on, names = self._decorrelate(query, corr, alias, scalar=True)
        else:
            rewritten, on, names = query.copy(), [], []
        outside = None
        inside: list[tuple[str, exp.Expression]] = [("__v", value)]
        if outer_in_value:  # S's aggregates computed per key, the value around them over the outer row
            outside, inside = self._split_value(value, alias)
        rewritten.set("expressions", [exp.alias_(e.copy(), n) for n, e in names + inside])
        rewritten.set("group", exp.Group(expressions=[e.copy() for _, e in names]) if names else None)
        rewritten.set("distinct", None)
        plan = self.b.query(rewritten)
        pad = self._empty_row(plan, node, len(names)) if corr else None
        return self._place(alias, plan, "left" if corr else "inner", on, pad, node, aggregated, outside)

    def _single_row(self, node: exp.Subquery, query: exp.Select, value: exp.Expression,
                    corr: list[exp.Expression], outer_in_value: bool, aggregated: bool) -> Expr:
        """A scalar subquery that is not an aggregate (``sql.single_row``): its rows counted (per
        correlation key), joined as an aggregate subquery is, its value ``single_row(n, v)``."""
        what = "scalar subquery that is not an aggregate"
        if outer_in_value:
            raise self.unsupported(node, f"a {what} whose value uses outer columns", "(")
        if not corr:  # the subquery as written (DISTINCT, ORDER BY ... LIMIT, GROUP BY, SELECT * ...)
            alias = self._new_alias()
            plan = self.b.query(query)
            if len(plan.columns) != 1:
                raise SqlError("subquery must return only one column", locate(node, self.sql, "("), self.sql)
            self._orderable(plan, node, what)
            return self._place(alias, single_row.counted(plan, 0), "inner", [], None, node, aggregated, None,
                               single=True)
        for key, clause in (("group", "GROUP BY"), ("having", "HAVING"), ("limit", "LIMIT"), ("offset", "OFFSET")):
            if query.args.get(key) is not None:
                raise self.unsupported(query.args[key], f"{clause} in a correlated {what}", clause)
        if isinstance(value, exp.Star) or any(isinstance(n, exp.Window) for n in value.walk()):
            raise self.unsupported(node, f"* or a window function in a correlated {what}", "(")
        if magic_sets.is_theta(self, corr):  # per distinct outer value (a magic set), its rows counted
            query = query.copy()
            query.set("order", None)
            alias, plan, pad, outer, _ = magic_sets.theta_scalar(self, query, corr, node, aggregated, False,
                                                                single=True)
            self._add(SubqueryItem(alias, plan, "left", [], pad, outer=outer))
            return self._single_value(alias, plan)
        alias = self._new_alias()
        rewritten, on, names = self._decorrelate(query, corr, alias, scalar=True)
        rewritten.set("expressions", [exp.alias_(e.copy(), n) for n, e in names] + [exp.alias_(value.copy(), "__v")])
        rewritten.set("order", None)  # (without LIMIT it orders nothing)
        plan = self.b.query(rewritten)  # (SELECT DISTINCT: the distinct (keys, value) rows)
        self._orderable(plan, node, what)
        plan = single_row.counted(plan, len(names))
        pad = self._empty_row(plan, node, len(names))
        return self._place(alias, plan, "left", on, pad, node, aggregated, None, single=True)

    def _single_value(self, alias: str, plan: pn.Node) -> Expr:
        """``single_row(n, v)`` over the FROM item ``alias`` of a counted subquery (keys, n, v)."""
        width = len(plan.columns)
        return single_row.value(self._ref(alias, width - 2), self._ref(alias, width - 1), self.b.dialect.name)

    def _orderable(self, plan: pn.Node, node: exp.Expression, what: str) -> None:
        t = plan.columns[-1][1]
        if not single_row.orderable(t):
            raise self.unsupported(node, f"a {what} of type {t} (its rows are counted in an ordered multiset)", "(")

    def _split_value(self, value: exp.Expression, alias: str) -> tuple[exp.Expression, list[tuple[str, exp.Expression]]]:
        """A scalar subquery's value that uses outer columns: each aggregate call becomes a column
        ``alias.__aJ`` of the decorrelated subquery; returns that outer expression and the aggregates."""
        inner = self._inner_scope
        holder = exp.Paren(this=value.copy())
        inside: list[tuple[str, exp.Expression]] = []

        def visit(n: exp.Expression) -> None:
            if isinstance(n, exp.AggFunc) or (isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc)):
                if any(self._is_outer(c, inner) for c in _own_columns(n)):
                    raise self.unsupported(n, "an aggregate of outer columns inside a scalar subquery")
                name = f"__a{len(inside)}"
                inside.append((name, n.copy()))
                n.replace(exp.column(name, table=alias))
                return
            if isinstance(n, (exp.Subquery, exp.Select, exp.Exists, exp.Window)):
                raise self.unsupported(n, "a subquery or window function in a scalar subquery's value that "
                                          "uses outer columns")
            if isinstance(n, exp.Column) and not self._is_outer(n, inner):
                raise SqlError(f"column {n.sql(dialect='postgres')!r} must appear in the GROUP BY clause or be "
                               "used in an aggregate function", locate(n, self.sql), self.sql)
            for child in list(n.iter_expressions()):
                visit(child)

        visit(holder.this)
        return holder, inside

    def _place(self, alias: str, plan: pn.Node, kind: str, on: list[exp.Expression], pad: tuple[Expr, ...] | None,
               node: exp.Expression, aggregated: bool, outside: exp.Expression | None, single: bool = False) -> Expr:
        """Join the decorrelated scalar subquery ``plan`` (keys, then its value or its aggregates) and return
        the subquery's value: a FROM item, or (``aggregated``) joined after the aggregation on the GROUP BY
        columns its correlation uses (``join_after_aggregate``), referred to by placeholder columns."""
        if not aggregated:
            self._add(SubqueryItem(alias, plan, kind, on, pad))
            if single:
                return self._single_value(alias, plan)
            if outside is None:
                return self._ref(alias, len(plan.columns) - 1)
            return ExprBinder(self.scope, self.sql, None, "a scalar subquery's value", self.b.dialect).bind(outside)
        offset = sum(len(p.plan.columns) for p in self.post_aggregate)
        binder = ExprBinder(self.scope, self.sql, None, "subquery conditions", self.b.dialect)
        keys = tuple((binder.bind(eq.this), int(eq.expression.name[len("__k"):])) for eq in on)
        self.post_aggregate.append(PostAggregate(plan, kind, keys, pad, node))
        if single:
            (_, nt), (_, vt) = plan.columns[-2:]
            last = POST_AGG_BASE + offset + len(plan.columns) - 1
            return single_row.value(ColumnRef(nt, last - 1, "__n"), ColumnRef(vt, last, "__v"), self.b.dialect.name)
        if outside is None:
            return ColumnRef(plan.columns[-1][1], POST_AGG_BASE + offset + len(plan.columns) - 1, "__v")
        scope = replace(self.scope, columns=list(self.scope.columns) + [
            ScopeColumn(alias, n, t, POST_AGG_BASE + offset + j) for j, (n, t) in enumerate(plan.columns)])
        return ExprBinder(scope, self.sql, None, "a scalar subquery's value", self.b.dialect).bind(outside)

    def join_after_aggregate(self, plan: pn.Node, lift) -> pn.Node:
        """The scalar subqueries of an aggregating query's SELECT list and HAVING, joined to its aggregate
        ``plan`` in order: uncorrelated ones (one row) crossed, correlated ones LEFT-joined on the GROUP BY
        columns their correlation uses (``lift`` puts an expression over the aggregate's output; it refuses
        a correlation on a column that is not grouped), a key without a group padded as over no rows."""
        for item in self.post_aggregate:
            lkeys: list[Expr] = []
            rkeys: list[Expr] = []
            for e, j in item.keys:
                le = lift.rewrite(e, item.origin)
                re_: Expr = ColumnRef(item.plan.columns[j][1], j, item.plan.columns[j][0])
                t = ty.common_type(le.type, re_.type) or le.type
                lkeys.append(ty.cast_to(le, t))
                rkeys.append(ty.cast_to(re_, t))
            if item.kind == "inner":
                plan = pn.Join(plan, item.plan, tuple(lkeys), tuple(rkeys))
            else:
                plan = outer_join("left", plan, item.plan, tuple(lkeys), tuple(rkeys), None, item.pad)
        return plan

    def _ref(self, alias: str, i: int) -> Expr:
        col = next(c for c in self.scope.columns if c.relation == alias and c.index == self._offset(alias) + i)
        return ColumnRef(col.type, col.index, col.name)

    def _offset(self, alias: str) -> int:
        return next(it.offset for it in self.items if it.alias == alias)

    def _empty_row(self, plan: pn.Node, node: exp.Expression, n_keys: int) -> tuple[Expr, ...]:
        """The grouped subquery's row for a key with no rows: NULL keys, each value over no rows."""
        row = empty_row(plan, n_keys)
        if row is None:
            raise self.unsupported(node, "a correlated scalar subquery whose value uses a correlation "
                                         "column outside an aggregate", "(")
        return row

    # ------------------------------------------------------------------ for the builder
    def steps(self, binder) -> list[Step]:
        """The join steps of the subquery items, their ON conditions bound over the whole scope."""
        out = []
        for item in self.extra:
            on: list[Expr] = []
            for c in item.on:
                on += conjuncts(binder.bind(c))
            step = Step(item.kind, on, item.pad, outer=item.outer)
            if item.not_in is not None:
                eq = binder.bind(item.not_in)
                step.not_in = (eq.args[0], eq.args[1])  # type: ignore[attr-defined]
            out.append(step)
        return out

    def after_aggregate(self, e: Expr, n_groups: int, width: int) -> Expr:
        """Placeholders of post-aggregation scalar subqueries (lifted as aggregates would be) -> the
        columns after the aggregate's ``width`` where the subqueries are joined."""
        lifted = n_groups + POST_AGG_BASE - AGG_BASE
        if isinstance(e, ColumnRef):
            return ColumnRef(e.type, width + e.index - lifted, e.name) if lifted <= e.index < lifted + POST_AGG_SPAN else e
        return e.map_children(lambda c: self.after_aggregate(c, n_groups, width))

    # ------------------------------------------------------------------ correlation
    def _correlated(self, query: exp.Select, allow_select: bool = False) -> tuple[list[exp.Expression], list[exp.Expression]]:
        """S's WHERE conjuncts that refer to the outer query, and the others.  Outer references
        anywhere else in S are refused (in its SELECT list too, unless ``allow_select``).  S's own WITH
        list is visible to its FROM items."""
        with_ = query.args.get("with_") or query.args.get("with")
        if with_ is not None:
            return ctes.with_scope(self.b, with_, lambda: self._correlated_in_scope(query, allow_select))
        return self._correlated_in_scope(query, allow_select)

    def _correlated_in_scope(self, query: exp.Select,
                             allow_select: bool) -> tuple[list[exp.Expression], list[exp.Expression]]:
        inner_items = self.b.from_items(query)
        inner = Scope([ScopeColumn(it.relation(i), n, t, it.offset + i)
                       for it in inner_items for i, (n, t) in enumerate(it.node.columns) if i >= it.hidden])
        self._inner_scope = inner
        where = query.args.get("where")
        corr, local = [], []
        for c in conjuncts_ast(where.this if where is not None else None):
            (corr if any(self._is_outer(col, inner) for col in _own_columns(c)) else local).append(c)
        for key in ("group", "having", "joins") if allow_select else ("expressions", "group", "having", "joins"):
            value = query.args.get(key)
            for part in (value if isinstance(value, list) else [value] if value is not None else []):
                for col in _own_columns(part):
                    if self._is_outer(col, inner):
                        raise self.unsupported(col, f"a correlated reference ({col.sql(dialect='postgres')}) "
                                                    "outside the subquery's WHERE")
        return corr, local

    def _is_outer(self, col: exp.Column, inner: Scope) -> bool:
        q = col.table or None
        if inner.resolve(col.name, q):
            return False
        return bool(self.scope.resolve(col.name, q)) and all(
            c.index < self.outer_width for c in self.scope.resolve(col.name, q))

    def _decorrelate(self, query: exp.Select, corr: list[exp.Expression], alias: str, scalar: bool):
        """S without its correlated conjuncts; those conjuncts rewritten over ``alias``'s columns
        (the ON of the join); the (name, inner expression) pairs S must output for them."""
        inner = self._inner_scope
        names: list[tuple[str, exp.Expression]] = []
        on: list[exp.Expression] = []

        def output(e: exp.Expression) -> exp.Expression:
            text = e.sql(dialect="postgres")
            for n, prev in names:
                if prev.sql(dialect="postgres") == text:
                    return exp.column(n, table=alias)
            n = f"__k{len(names)}"
            names.append((n, e.copy()))
            return exp.column(n, table=alias)

        for c in corr:
            node = _strip(c)
            split = self._equality(node, inner) if isinstance(node, exp.EQ) else None
            if split is not None:
                inner_side, outer_side = split
                on.append(exp.EQ(this=outer_side.copy(), expression=output(inner_side)))
                continue
            if scalar:
                raise self.unsupported(c, "a correlation that is not an equality (inner = outer) in a scalar "
                                          "or NOT IN subquery")
            if any(isinstance(n, (exp.Subquery, exp.Exists, exp.Select)) for n in c.walk()):
                raise self.unsupported(c, "a subquery inside a correlated condition")
            rewritten = c.copy()
            for col in list(_own_columns(rewritten)):
                if not self._is_outer(col, inner):
                    col.replace(output(col))
            on.append(rewritten)
        out = query.copy()
        local = [c.copy() for c in conjuncts_ast(query.args["where"].this) if c not in corr]
        if local:
            cond = local[0]
            for c in local[1:]:
                cond = exp.And(this=cond, expression=c)
            out.set("where", exp.Where(this=cond))
        else:
            out.set("where", None)
        return out, on, names

    def _equality(self, node: exp.EQ, inner: Scope) -> tuple[exp.Expression, exp.Expression] | None:
        sides = []
        for side in (node.this, node.expression):
            cols = list(_own_columns(side))
            outer = [self._is_outer(c, inner) for c in cols]
            if any(isinstance(n, (exp.Subquery, exp.Select)) for n in side.walk()):
                return None
            sides.append("outer" if cols and all(outer) else "inner" if cols and not any(outer) else None)
        if sides == ["inner", "outer"]:
            return node.this, node.expression
        if sides == ["outer", "inner"]:
            return node.expression, node.this
        return None


POST_AGG_BASE = 2_000_000  # placeholder column indices of scalar subqueries joined after an aggregation
POST_AGG_SPAN = 1_000_000  # ... up to window results (sql.window.WIN_BASE)


def aggregates_ast(query: exp.Select) -> bool:
    """Whether a SELECT aggregates: GROUP BY, HAVING, or an aggregate in its SELECT list."""
    return query.args.get("group") is not None or query.args.get("having") is not None or _has_aggregate(query)


def _has_aggregate(query: exp.Select) -> bool:
    # A window function (sqlglot's Lag, Max ... OVER are AggFuncs) does not aggregate the query; its arguments may.
    return any(isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Window)
               for e in query.expressions for n in _walk_own(e))


def _walk_own(node: exp.Expression):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        for child in n.iter_expressions():
            if not isinstance(child, (exp.Subquery, exp.Select, exp.Union)):
                stack.append(child)


def _rename(plan: pn.Node, names: tuple[str, ...]) -> pn.Node:
    return pn.Project(plan, tuple(ColumnRef(t, i, n) for i, (n, t) in enumerate(plan.columns)), names)


__all__ = ["Subqueries", "SubqueryItem", "predicate_kind", "conjuncts_ast", "aggregates_ast", "POST_AGG_BASE"]
