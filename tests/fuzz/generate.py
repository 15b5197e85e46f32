"""Random valid views over a random schema, as SQL text (SQLsmith/SQLancer style).

Everything derives from one seeded ``random.Random``: ``make_case(seed)``
gives the same schema and the same queries on every machine, so a failure
replays from its seed alone.  Expressions are typed (``int``, ``num``,
``float``, ``text``, ``bool``, ``date``; every column NULLable unless it is a
key) and each generator returns SQL of the type asked for, so every query is
valid PostgreSQL; the runner checks that anyway (PostgreSQL creates the view
first) and counts a rejected query as a generator bug.

Result determinism is part of validity: a query is generated only in forms
whose result PostgreSQL fixes as a multiset.  Order-sensitive window
functions (ROW_NUMBER, LAG, FIRST_VALUE, ROWS frames) order by every column
in scope, ORDER BY … LIMIT orders by every output column, scalar subqueries
aggregate (at most one row), no division by zero and no overflow is
reachable with the value domains of ``tests.support.streams``, and float
columns hold dyadic values (``FLOAT_DOMAIN``) so sums are exact.

``FEATURES`` switches constructs on and off.  Those freshview does not
maintain yet are listed off; turn one on (``--features +lateral``) when the
front end learns it.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from decimal import Decimal
from dataclasses import dataclass, field
from typing import Callable

TYPES = ("int", "num", "float", "text", "bool", "date")
NUMBERS = ("int", "num", "float")
ORDERED = ("int", "num", "float", "text", "date")
_PG_TYPE = {"int": "INT", "num": "NUMERIC(8,2)", "float": "FLOAT8", "text": "TEXT", "bool": "BOOLEAN",
            "date": "DATE", "jsonb": "JSONB", "intarr": "INT[]"}
_PREFIX = {"int": "i", "num": "n", "float": "f", "text": "s", "bool": "b", "date": "d", "jsonb": "j",
           "intarr": "r"}
# Column types no expression is generated of: they are read through operators and functions (``converted``,
# ``comparison``, set-returning functions in FROM and the SELECT list) and serve as join and group keys.
SPECIAL = ("jsonb", "intarr")

FEATURES: dict[str, bool] = {
    # FROM
    "inner_join": True, "outer_join": True, "full_join": True, "comma_join": True, "cross_join": True,
    "using_join": True, "natural_join": True, "derived_table": True, "cte": True,
    # subqueries in expressions
    "exists": True, "in_subquery": True, "scalar_subquery": True,
    # shapes
    "group_by": True, "having": True, "distinct": True, "aggregate_distinct": True, "filter": True,
    "string_agg": True, "window": True, "setop": True, "order_limit": True,
    # expressions
    "case": True, "string_functions": True, "date_functions": True, "casts": True, "division": True,
    "like": True,
    # constructs of issue 23
    "noneq_correlation": True, "values": True, "distinct_on": True, "grouping_sets": True, "lateral": True,
    "json": True, "arrays": True, "unnest": True,
}

NULL_PROB = 0.15
TEXT_LITERALS = ["a", "b", "B", "abc", "", " ", "x%y", "zz", "é", "Zebra"]
LIKE_PATTERNS = ["a%", "%b%", "A_c", "_", "%", "x\\%y", "%e%", "Z%"]
DATE_LITERALS = ["2021-01-01", "2022-02-15", "2022-12-28", "2024-01-15", "2024-02-29"]


def float_domain(rng: random.Random) -> float:
    """Float column values: dyadic (k/4), so sums are exact in any order."""
    return rng.randint(-4, 12) / 4


def numeric_domain(rng: random.Random) -> Decimal:
    return Decimal(rng.randint(-8, 16)) / 4


def date_domain(rng: random.Random) -> dt.date:
    return rng.choice(_DATES)


_DATES = [dt.date(2021, 1, 1), dt.date(2022, 2, 15), dt.date(2022, 12, 28), dt.date(2024, 1, 15),
          dt.date(2024, 2, 29), dt.date(2020, 12, 31)]
# jsonb documents: keys in several orders (equal once canonical), missing keys, arrays and scalars; numbers
# spelled one way each (PostgreSQL shows whichever spelling of 1.0 = 1 a group met first: not a multiset).
JSONB_DOCS = ['{"a": "x", "n": 1, "b": [1, 2]}', '{"n": 1, "a": "x", "b": [1, 2]}', '{"a": "y", "n": 2}',
              '{"a": null, "b": []}', '{"b": [3, null], "n": 3}', '[1, 2]', '"x"', 'null', '{}']
INT_ARRAYS = [(1, 2), (2, None, 2), (), (3,), (0, 1, 2)]


def jsonb_domain(rng: random.Random) -> str:
    from freshview.jsontext import jsonb  # (the stream carries jsonb as PostgreSQL prints it)

    return jsonb(rng.choice(JSONB_DOCS))


def intarr_domain(rng: random.Random) -> tuple:
    return rng.choice(INT_ARRAYS)


# Small domains so joins match, groups collide and filters keep rows (ints are 0..9 already).
_DOMAINS = {"float": float_domain, "num": numeric_domain, "date": date_domain, "jsonb": jsonb_domain,
            "intarr": intarr_domain}


@dataclass
class Table:
    name: str
    columns: list[tuple[str, str]]  # (name, type)
    primary_key: list[str]

    @property
    def ddl(self) -> str:
        return ", ".join(f"{n} {_PG_TYPE[t]}" for n, t in self.columns)

    def domains(self) -> dict:
        """Value domains for ``RandomTable`` (a domain replaces its NULLs: they are drawn here)."""
        def nullable(draw):
            return lambda rng: None if rng.random() < NULL_PROB else draw(rng)
        return {n: nullable(_DOMAINS[t]) for n, t in self.columns if t in _DOMAINS and n not in self.primary_key}


@dataclass
class Col:
    ref: str      # as written in the query: alias.name
    type: str
    name: str     # unqualified name (USING / NATURAL)


@dataclass
class Case:
    seed: int
    tables: list[Table]
    queries: list[str]

    def schema_text(self) -> str:
        return "\n".join(f"  {t.name}({t.ddl})" + (f" PRIMARY KEY ({', '.join(t.primary_key)})"
                                                     if t.primary_key else "") for t in self.tables)


def random_schema(rng: random.Random, features: dict[str, bool] | None = None) -> list[Table]:
    f = {**FEATURES, **(features or {})}
    special = [t for t, on in (("jsonb", f["json"]), ("intarr", f["arrays"])) if on]
    tables = []
    for ti in range(rng.randint(2, 3)):
        cols: list[tuple[str, str]] = []
        keyed = rng.random() < 0.5
        if keyed:
            cols.append(("k", "int"))
        # Shared names across tables (i1, s1 ...) make USING and NATURAL joins possible.
        for t in rng.sample(TYPES, rng.randint(2, 5)):
            for j in range(1, rng.choice([1, 1, 2]) + 1):
                cols.append((f"{_PREFIX[t]}{j}", t))
        if not any(t == "int" for _, t in cols):
            cols.append(("i1", "int"))
        for t in special:
            if rng.random() < 0.5:
                cols.append((f"{_PREFIX[t]}1", t))
        tables.append(Table(f"t{ti}", cols, ["k"] if keyed else []))
    return tables


@dataclass
class _Ctx:
    """What an expression may reference."""

    scope: list[Col]
    outer: list[Col] = field(default_factory=list)   # correlation candidates (not used directly)
    aggregate: bool = False                          # GROUP BY / aggregate query: columns only via groups
    groups: list[Col] = field(default_factory=list)
    subqueries: bool = True


class Generator:
    def __init__(self, rng: random.Random, tables: list[Table], features: dict[str, bool] | None = None):
        self.rng = rng
        self.tables = tables
        self.f = dict(FEATURES)
        if features:
            self.f.update(features)
        self._alias = itertools.count()
        self._colname = itertools.count()
        self.ctes: list[tuple[str, list[tuple[str, str]]]] = []  # visible CTEs: (name, [(col, type)])
        self._ordered_window = False  # the SELECT being generated has an order-sensitive window function

    # ------------------------------------------------------------------ helpers
    def on(self, feature: str, p: float = 1.0) -> bool:
        return self.f.get(feature, False) and self.rng.random() < p

    def alias(self) -> str:
        return f"a{next(self._alias)}"

    def out_name(self) -> str:
        return f"x{next(self._colname)}"

    def literal(self, t: str) -> str:
        r = self.rng
        if r.random() < 0.08:
            return f"CAST(NULL AS {_PG_TYPE[t]})"
        if t == "int":
            return str(r.choice([0, 1, 2, 3, 5, 7, 9, -1, -3]))
        if t == "num":
            return r.choice(["0.00", "1.50", "2.25", "-3.75", "10.00", "0.25"])
        if t == "float":
            return f"CAST({r.choice(['0.5', '1.25', '-2', '3.125', '0'])} AS FLOAT8)"
        if t == "text":
            return "'" + r.choice(TEXT_LITERALS).replace("'", "''") + "'"
        if t == "bool":
            return r.choice(["TRUE", "FALSE"])
        return f"DATE '{r.choice(DATE_LITERALS)}'"

    def cols_of(self, ctx: _Ctx, t: str) -> list[Col]:
        pool = ctx.groups if ctx.aggregate else ctx.scope
        return [c for c in pool if c.type == t]

    # ------------------------------------------------------------------ expressions
    def expr(self, t: str, ctx: _Ctx, depth: int = 2) -> str:
        r = self.rng
        cols = self.cols_of(ctx, t)
        if ctx.aggregate and r.random() < 0.6:
            return self.agg_call(t, ctx, depth)
        if cols and r.random() < (0.9 if depth <= 0 else 0.4):
            return r.choice(cols).ref
        if depth <= 0 or r.random() < 0.2:
            if t == "bool":
                return self.comparison(ctx, 0)
            if not cols and r.random() < 0.7:
                converted = self.converted(t, ctx)
                if converted is not None:
                    return converted
            return self.literal(t)
        options: list[Callable[[], str]] = [lambda: self.expr(t, ctx, 0)]
        if t == "bool":
            options += [lambda: self.comparison(ctx, depth - 1)] * 3
            options += [lambda: f"({self.expr('bool', ctx, depth - 1)} {r.choice(['AND', 'OR'])} "
                                f"{self.expr('bool', ctx, depth - 1)})",
                        lambda: f"NOT ({self.expr('bool', ctx, depth - 1)})",
                        lambda: f"({self.expr(r.choice(TYPES), ctx, depth - 1)} IS {r.choice(['', 'NOT '])}NULL)"]
            if ctx.subqueries and not ctx.aggregate:
                if self.f["exists"]:
                    options.append(lambda: self.exists(ctx))
                if self.f["in_subquery"]:
                    options.append(lambda: self.in_subquery(ctx))
        if t in NUMBERS:
            options += [lambda: f"({self.expr(t, ctx, depth - 1)} {r.choice(['+', '-', '*'])} "
                                f"{self.expr(t if t != 'num' else r.choice(['num', 'int']), ctx, depth - 1)})",
                        lambda: f"abs({self.expr(t, ctx, depth - 1)})",
                        lambda: f"{r.choice(['greatest', 'least'])}({self.expr(t, ctx, depth - 1)}, "
                                f"{self.expr(t, ctx, depth - 1)})"]
            if self.f["division"]:
                options.append(lambda: f"({self.expr(t, ctx, depth - 1)} / "
                                       f"NULLIF({self.expr(t, ctx, depth - 1)}, 0))")
        if t == "int":
            options += [lambda: f"mod({self.expr('int', ctx, depth - 1)}, {r.choice([2, 3, -4])})",
                        lambda: f"sign({self.expr('int', ctx, depth - 1)})"]
            if self.f["string_functions"]:
                options += [lambda: f"length({self.expr('text', ctx, depth - 1)})",
                            lambda: f"strpos({self.expr('text', ctx, depth - 1)}, {self.literal('text')})"]
            if self.f["casts"]:
                options.append(lambda: f"CAST({self.expr('num', ctx, depth - 1)} AS INT)")
            if self.f["date_functions"]:
                options.append(lambda: f"({self.expr('date', ctx, depth - 1)} - {self.expr('date', ctx, depth - 1)})")
        if t == "num":
            options += [lambda: f"round({self.expr('num', ctx, depth - 1)}, {r.choice([0, 1])})",
                        lambda: f"{r.choice(['floor', 'ceil', 'trunc'])}({self.expr('num', ctx, depth - 1)})"]
            if self.f["casts"]:
                options.append(lambda: f"CAST({self.expr('int', ctx, depth - 1)} AS NUMERIC(10,2))")
            if self.f["date_functions"]:
                options.append(lambda: f"EXTRACT({r.choice(['YEAR', 'MONTH', 'DAY', 'DOW'])} FROM "
                                       f"{self.expr('date', ctx, depth - 1)})")
        if t == "float" and self.f["casts"]:
            options.append(lambda: f"CAST({self.expr(r.choice(['int', 'num']), ctx, depth - 1)} AS FLOAT8)")
        if t == "text" and self.f["string_functions"]:
            options += [lambda: f"{r.choice(['lower', 'upper', 'btrim', 'reverse'])}({self.expr('text', ctx, depth - 1)})",
                        lambda: f"({self.expr('text', ctx, depth - 1)} || {self.expr('text', ctx, depth - 1)})",
                        lambda: f"substr({self.expr('text', ctx, depth - 1)}, {r.choice([1, 2])}, {r.choice([1, 2])})",
                        lambda: f"concat({self.expr('text', ctx, depth - 1)}, {self.expr(r.choice(TYPES), ctx, depth - 1)})",
                        lambda: f"replace({self.expr('text', ctx, depth - 1)}, 'a', 'xy')",
                        lambda: f"lpad({self.expr('text', ctx, depth - 1)}, 3, '*')"]
            if self.f["casts"]:
                options.append(lambda: f"CAST({self.expr(r.choice(['int', 'bool', 'date']), ctx, depth - 1)} AS TEXT)")
        if t == "date" and self.f["date_functions"]:
            options.append(lambda: f"({self.expr('date', ctx, depth - 1)} + {r.choice([0, 1, 30, -7])})")
        if self.f["case"]:
            options += [lambda: f"CASE WHEN {self.expr('bool', ctx, depth - 1)} THEN {self.expr(t, ctx, depth - 1)} "
                                f"ELSE {self.expr(t, ctx, depth - 1)} END",
                        lambda: f"COALESCE({self.expr(t, ctx, depth - 1)}, {self.expr(t, ctx, depth - 1)})",
                        lambda: f"NULLIF({self.expr(t, ctx, depth - 1)}, {self.literal(t)})"]
        if t in NUMBERS and ctx.subqueries and not ctx.aggregate and self.f["scalar_subquery"]:
            options.append(lambda: self.scalar_subquery(t, ctx))
        return r.choice(options)()

    def converted(self, t: str, ctx: _Ctx) -> str | None:
        """A value of type ``t`` computed from a column of another type (so it varies with the data)."""
        r = self.rng
        have = {c.type: c for c in (ctx.groups if ctx.aggregate else ctx.scope)}
        ways = {
            "int": [("text", "length({})"), ("num", "CAST({} AS INT)"), ("date", "EXTRACT(DAY FROM {})::INT"),
                    ("bool", "CASE WHEN {} THEN 1 ELSE 0 END"), ("float", "CAST({} AS INT)")],
            "num": [("int", "CAST({} AS NUMERIC(10,2))"), ("float", "CAST({} AS NUMERIC(10,2))")],
            "float": [("int", "CAST({} AS FLOAT8)"), ("num", "CAST({} AS FLOAT8)")],
            "text": [("int", "CAST({} AS TEXT)"), ("date", "CAST({} AS TEXT)"), ("bool", "CAST({} AS TEXT)"),
                     ("num", "CAST({} AS TEXT)")],
            "date": [("int", "(DATE '2022-01-01' + CAST({} AS INT))")],  # (an "int" may be a bigint COUNT)
        }.get(t, [])
        ways += {
            "int": [("jsonb", "CAST({} ->> 'n' AS INT)"), ("intarr", "cardinality({})"), ("intarr", "{}[1]"),
                    ("intarr", "array_length({}, 1)")],
            "text": [("jsonb", "({} ->> 'a')"), ("jsonb", "jsonb_extract_path_text({}, 'b', '0')"),
                     ("jsonb", "CAST({} -> 'b' AS TEXT)"), ("jsonb", "({} #>> '{{b,1}}')")],
        }.get(t, [])
        ways = [(src, fmt) for src, fmt in ways if src in have]
        if not ways:
            return None
        src, fmt = r.choice(ways)
        col = r.choice([c for c in (ctx.groups if ctx.aggregate else ctx.scope) if c.type == src])
        return fmt.format(col.ref)

    def comparison(self, ctx: _Ctx, depth: int) -> str:
        r = self.rng
        pool = ctx.groups if ctx.aggregate else ctx.scope
        special = [c for c in pool if c.type in SPECIAL]
        if special and r.random() < 0.25:
            c = r.choice(special)
            if c.type == "intarr":
                return f"({self.expr('int', ctx, 0)} = ANY({c.ref}))"
            return r.choice([f"({c.ref} @> '{{\"a\": \"x\"}}')", f"({c.ref} ? 'b')",
                             f"({c.ref} = '{{\"a\": \"y\", \"n\": 2}}')", f"({c.ref} <> '[1, 2]')"])
        present = sorted({c.type for c in pool} - set(SPECIAL))
        t = r.choice(present) if present and r.random() < 0.8 else r.choice(TYPES)
        a = self.expr(t, ctx, depth)
        kind = r.random()
        if kind < 0.5:
            other = r.choice(NUMBERS) if t in NUMBERS and r.random() < 0.3 else t
            return f"({a} {r.choice(['=', '<>', '<', '<=', '>', '>='])} {self.expr(other, ctx, depth)})"
        if kind < 0.6:
            return f"({a} IS {r.choice(['', 'NOT '])}DISTINCT FROM {self.expr(t, ctx, depth)})"
        if kind < 0.7 and t != "bool":
            lo, hi = sorted([self.literal(t), self.literal(t)])
            return f"({a} {r.choice(['', 'NOT '])}BETWEEN {lo} AND {hi})"
        if kind < 0.82:
            items = ", ".join(self.literal(t) for _ in range(r.randint(1, 3)))
            return f"({a} {r.choice(['', 'NOT '])}IN ({items}))"
        if t == "text" and self.f["like"]:
            pattern = "'" + r.choice(LIKE_PATTERNS) + "'"
            return f"({a} {r.choice(['LIKE', 'NOT LIKE', 'ILIKE'])} {pattern})"
        return f"({a} IS NOT NULL)"

    # ------------------------------------------------------------------ aggregates
    def agg_call(self, t: str, ctx: _Ctx, depth: int) -> str:
        """An aggregate of type ``t`` over the rows of ``ctx.scope`` (or a grouped column)."""
        r = self.rng
        inner = _Ctx(scope=ctx.scope, subqueries=False)
        d = min(depth, 1)
        distinct = "DISTINCT " if self.on("aggregate_distinct", 0.15) else ""
        if t == "int":
            choice = r.choice(["count_star", "count", "sum", "minmax"])
            if choice == "count_star":
                call = "COUNT(*)"
            elif choice == "count":
                call = f"COUNT({distinct}{self.expr(r.choice(TYPES), inner, d)})"
            elif choice == "sum":
                call = f"SUM({distinct}{self.expr('int', inner, d)})"
            else:
                call = f"{r.choice(['MIN', 'MAX'])}({self.expr('int', inner, d)})"
        elif t == "num":
            call = r.choice([f"SUM({distinct}{self.expr('num', inner, d)})",
                             f"AVG({distinct}{self.expr(r.choice(['int', 'num']), inner, d)})",
                             f"{r.choice(['MIN', 'MAX'])}({self.expr('num', inner, d)})"])
        elif t == "float":
            call = r.choice([f"SUM({self.expr('float', inner, d)})",
                             f"{r.choice(['MIN', 'MAX'])}({self.expr('float', inner, d)})"])
        elif t == "text":
            if self.on("string_agg", 0.4):
                arg = self.expr("text", inner, d)
                call = f"string_agg({arg}, ',' ORDER BY {arg})"
            else:
                call = f"{r.choice(['MIN', 'MAX'])}({self.expr('text', inner, d)})"
        elif t == "bool":
            if r.random() < 0.5:
                call = f"{r.choice(['bool_and', 'bool_or'])}({self.expr('bool', inner, d)})"
            else:
                return f"({self.agg_call('int', ctx, depth)} {r.choice(['>', '<=', '='])} {r.randint(0, 3)})"
        else:
            call = f"{r.choice(['MIN', 'MAX'])}({self.expr('date', inner, d)})"
        if self.on("filter", 0.15):
            call += f" FILTER (WHERE {self.expr('bool', inner, 1)})"
        return call

    # ------------------------------------------------------------------ subqueries in expressions
    def _sub_from(self) -> tuple[str, list[Col]]:
        """One base table (or CTE) for a subquery, under a fresh alias."""
        name, cols = self.relation()
        a = self.alias()
        return f"{name} AS {a}", [Col(f"{a}.{n}", t, n) for n, t in cols]

    def _correlate(self, inner: list[Col], ctx: _Ctx) -> list[str]:
        """Equality correlation to the enclosing scope (sometimes none)."""
        conds = []
        outer = [c for c in ctx.scope]
        if outer and self.rng.random() < 0.7:
            pairs = [(i, o) for i in inner for o in outer if i.type == o.type and i.type != "bool"]
            if pairs:
                i, o = self.rng.choice(pairs)
                conds.append(f"{i.ref} = {o.ref}")
            if pairs and self.on("noneq_correlation", 0.3):
                i, o = self.rng.choice(pairs)
                conds.append(f"{i.ref} {self.rng.choice(['<', '<>', '>='])} {o.ref}")
        return conds

    def _sub_where(self, inner: list[Col], ctx: _Ctx) -> str:
        conds = self._correlate(inner, ctx)
        if self.rng.random() < 0.5:
            conds.append(self.expr("bool", _Ctx(scope=inner, subqueries=False), 1))
        return f" WHERE {' AND '.join(conds)}" if conds else ""

    def exists(self, ctx: _Ctx) -> str:
        frm, inner = self._sub_from()
        neg = "NOT " if self.rng.random() < 0.4 else ""
        return f"({neg}EXISTS (SELECT 1 FROM {frm}{self._sub_where(inner, ctx)}))"

    def in_subquery(self, ctx: _Ctx) -> str:
        frm, inner = self._sub_from()
        t = self.rng.choice(sorted({c.type for c in inner} - set(SPECIAL)) or ["int"])
        target = self.expr(t, _Ctx(scope=inner, subqueries=False), 1)
        probe = self.expr(t, _Ctx(scope=ctx.scope, subqueries=False), 1)
        neg = "NOT " if self.rng.random() < 0.4 else ""
        return f"({probe} {neg}IN (SELECT {target} FROM {frm}{self._sub_where(inner, ctx)}))"

    def scalar_subquery(self, t: str, ctx: _Ctx) -> str:
        frm, inner = self._sub_from()
        value = self.agg_call(t, _Ctx(scope=inner, aggregate=True, subqueries=False), 1)
        return f"(SELECT {value} FROM {frm}{self._sub_where(inner, ctx)})"

    # ------------------------------------------------------------------ FROM
    def relation(self) -> tuple[str, list[tuple[str, str]]]:
        """A base table or a visible CTE: (name, columns)."""
        if self.ctes and self.rng.random() < 0.4:
            return self.rng.choice(self.ctes)
        t = self.rng.choice(self.tables)
        return t.name, t.columns

    def from_item(self, depth: int) -> tuple[str, list[Col], bool]:
        """(sql, columns, is_named) — is_named: its column names are a table's (USING/NATURAL apply)."""
        if depth > 0 and self.on("derived_table", 0.25):
            sql, names, types = self.query(depth - 1, None, top=False)
            a = self.alias()
            return f"({sql}) AS {a}", [Col(f"{a}.{n}", t, n) for n, t in zip(names, types)], False
        if self.on("values", 0.1):
            types = [self.rng.choice(TYPES) for _ in range(self.rng.randint(1, 3))]
            names = [self.out_name() for _ in types]
            rows = ", ".join("(" + ", ".join(self.literal(t) for t in types) + ")"
                             for _ in range(self.rng.randint(1, 4)))
            a = self.alias()
            return (f"(VALUES {rows}) AS {a}({', '.join(names)})",
                    [Col(f"{a}.{n}", t, n) for n, t in zip(names, types)], False)
        name, cols = self.relation()
        a = self.alias()
        return f"{name} AS {a}", [Col(f"{a}.{n}", t, n) for n, t in cols], True

    def dependent_item(self, scope: list[Col]) -> tuple[str, list[Col], bool] | None:
        """A FROM item that reads the items before it: a set-returning function of one of their columns
        or a LATERAL subquery correlated with them; (its text with the join word, columns, comma?)."""
        r = self.rng
        options = []
        arrays = [c for c in scope if c.type == "intarr"]
        docs = [c for c in scope if c.type == "jsonb"]
        if self.f["unnest"] and (arrays or docs):
            options.append("srf")
        if self.f["lateral"] and any(c.type in TYPES and c.type != "bool" for c in scope):
            options.append("lateral")
        if not options:
            return None
        a = self.alias()
        if r.choice(options) == "srf":
            x = self.out_name()
            if arrays and (not docs or r.random() < 0.6):
                c = r.choice(arrays)
                if r.random() < 0.4:
                    o = self.out_name()
                    body, cols = (f"unnest({c.ref}) WITH ORDINALITY AS {a}({x}, {o})",
                                  [Col(f"{a}.{x}", "int", x), Col(f"{a}.{o}", "int", o)])
                    cols[1].ref = f"CAST({a}.{o} AS INT)"  # (a bigint)
                else:
                    body, cols = f"unnest({c.ref}) AS {a}({x})", [Col(f"{a}.{x}", "int", x)]
            else:
                c = r.choice(docs)
                body, cols = (f"jsonb_array_elements_text({c.ref} -> 'b') AS {a}({x})", [Col(f"{a}.{x}", "text", x)])
        else:
            frm, inner = self._sub_from()
            conds = self._correlate(inner, _Ctx(scope=[c for c in scope if c.type in TYPES]))
            if r.random() < 0.3:
                conds.append(self.expr("bool", _Ctx(scope=inner, subqueries=False), 1))
            where = f" WHERE {' AND '.join(conds)}" if conds else ""
            types = [r.choice(["int", "num", "text"]) for _ in range(r.randint(1, 2))]
            names = [self.out_name() for _ in types]
            if r.random() < 0.5:  # an aggregate without GROUP BY: one row per outer row
                ictx = _Ctx(scope=inner, aggregate=True, subqueries=False)
                items = [self.agg_call(t, ictx, 1) for t in types]
            else:
                items = [self.expr(t, _Ctx(scope=inner, subqueries=False), 1) for t in types]
            select = ", ".join(f"{e} AS {n}" for e, n in zip(items, names))
            body = f"LATERAL (SELECT {select} FROM {frm}{where}) AS {a}"
            cols = [Col(f"{a}.{n}", t, n) for n, t in zip(names, types)]
            if "COUNT(" in select or "SUM(" in select or "MIN(" in select or "MAX(" in select or "AVG(" in select:
                word = r.choice([", ", " CROSS JOIN "])  # (its ON must be TRUE)
                return f"{word}{body}", cols, word == ", "
        word = r.choice([", ", " CROSS JOIN ", " LEFT JOIN "])
        if word == " LEFT JOIN ":
            if not body.startswith("LATERAL"):
                body = "LATERAL " + body
            return f" LEFT JOIN {body} ON TRUE", cols, False
        return f"{word}{body}", cols, word == ", "

    def from_clause(self, depth: int) -> tuple[str, list[Col]]:
        r = self.rng
        sql, scope, _ = self.from_item(depth)
        seg = list(scope)  # the items since the last comma: all a JOIN's ON/USING may see
        for _ in range(r.choices([0, 1, 2], weights=[3, 5, 2])[0]):
            dependent = self.dependent_item(scope) if r.random() < 0.3 else None
            if dependent is not None:
                text, cols, comma = dependent
                sql += text
                scope = scope + cols
                seg = (cols if comma else seg + cols)
                continue
            item, cols, named = self.from_item(depth)
            kinds = [k for k in ("inner_join", "outer_join", "full_join", "comma_join", "cross_join",
                                 "using_join", "natural_join") if self.f[k]]
            kind = r.choice(kinds) if kinds else "comma_join"
            left_names = [c.name for c in seg]
            common = sorted({c.name for c in cols} & set(left_names))
            usable = [n for n in common if left_names.count(n) == 1
                      and {c.type for c in seg if c.name == n} == {c.type for c in cols if c.name == n} != {"intarr"}]
            if kind in ("using_join", "natural_join") and (not named or not usable
                                                           or (kind == "natural_join" and usable != common)):
                kind = "inner_join"
            if kind == "comma_join":
                sql = f"{sql}, {item}"
                seg = []
            elif kind == "cross_join":
                sql = f"{sql} CROSS JOIN {item}"
            elif kind == "using_join":
                names = r.sample(usable, r.randint(1, len(usable)))
                sql = f"{sql} {r.choice(['', 'LEFT ', 'RIGHT ', 'FULL '])}JOIN {item} USING ({', '.join(names)})"
            elif kind == "natural_join":
                sql = f"{sql} NATURAL {r.choice(['', 'LEFT ', 'RIGHT ', 'FULL '])}JOIN {item}"
            else:
                pairs = [(a, b) for a in seg for b in cols if a.type == b.type and a.type not in ("bool", "intarr")]
                full = kind == "full_join"
                conds = [f"{a.ref} = {b.ref}" for a, b in r.sample(pairs, min(len(pairs), r.choice([1, 1, 2])))]
                if not full and (not conds or r.random() < 0.3):
                    conds.append(self.expr("bool", _Ctx(scope=seg + cols, subqueries=False), 1))
                if not conds:  # FULL JOIN needs a hash/merge-joinable condition: make it an inner one
                    kind = "inner_join"
                    conds = ["TRUE"]
                word = {"inner_join": "JOIN", "outer_join": r.choice(["LEFT JOIN", "RIGHT JOIN"]),
                        "full_join": "FULL JOIN"}[kind]
                sql = f"{sql} {word} {item} ON {' AND '.join(conds)}"
            scope = scope + cols
            seg = seg + cols
        return sql, scope

    # ------------------------------------------------------------------ queries
    def select(self, depth: int, want: list[str] | None, distinct_on: bool = False) -> tuple[str, list[str], list[str]]:
        """One SELECT … FROM … [WHERE] [GROUP BY … HAVING]: (sql, output names, output types); with
        ``distinct_on`` a SELECT DISTINCT ON (…) … ORDER BY the keys, then every column in scope."""
        r = self.rng
        frm, scope = self.from_clause(depth)
        if distinct_on:
            return self._distinct_on(frm, scope, want)
        ctx = _Ctx(scope=scope, subqueries=depth > 0)
        types = want or [r.choice(TYPES) for _ in range(r.randint(1, 4))]
        names = [self.out_name() for _ in types]
        where = ""
        if r.random() < 0.6:
            where = f" WHERE {self.expr('bool', ctx, r.choice([1, 1, 2]))}"
        mode = r.choices(["plain", "group", "window"],
                         weights=[5, 4 if self.f["group_by"] else 0, 2 if self.f["window"] else 0])[0]
        tail = ""
        distinct = ""
        if mode == "group":
            groups = r.sample(scope, min(len(scope), r.choice([0, 1, 1, 2])))
            actx = _Ctx(scope=scope, aggregate=True, groups=groups, subqueries=False)
            items = [self.expr(t, actx, 1) for t in types]
            if groups and self.on("grouping_sets", 0.3):
                refs = [g.ref for g in groups]
                tail = " GROUP BY " + r.choice([f"ROLLUP ({', '.join(refs)})", f"CUBE ({', '.join(refs)})",
                                                 f"GROUPING SETS (({', '.join(refs)}), ({refs[0]}), ())"])
                if r.random() < 0.4:
                    items[0] = f"GROUPING({refs[0]})" if types[0] == "int" else items[0]
            elif groups:
                tail = " GROUP BY " + ", ".join(g.ref for g in groups)
            if self.on("having", 0.4):
                tail += f" HAVING {self.expr('bool', actx, 1)}"
        else:
            items = []
            self._ordered_window = False
            arrays = [c for c in scope if c.type == "intarr"]
            for t in types:
                if mode == "window" and r.random() < 0.5:
                    items.append(self.window_call(t, scope))
                elif mode == "plain" and t == "int" and arrays and self.on("unnest", 0.3):
                    items.append(f"unnest({r.choice(arrays).ref})")  # a set-returning function in the SELECT list
                else:
                    items.append(self.expr(t, ctx, 2))
            if self.on("distinct", 0.2):
                distinct = "DISTINCT "
        select = ", ".join(f"{e} AS {n}" for e, n in zip(items, names))
        return f"SELECT {distinct}{select} FROM {frm}{where}{tail}", names, types

    def _distinct_on(self, frm: str, scope: list[Col], want: list[str] | None) -> tuple[str, list[str], list[str]]:
        r = self.rng
        ctx = _Ctx(scope=scope, subqueries=False)
        types = want or [r.choice(TYPES) for _ in range(r.randint(1, 3))]
        names = [self.out_name() for _ in types]
        keyable = [c for c in scope if c.type in ORDERED]
        keys = r.sample(keyable, min(len(keyable), r.choice([1, 1, 2]))) or scope[:1]
        where = f" WHERE {self.expr('bool', ctx, 1)}" if r.random() < 0.4 else ""
        select = ", ".join(f"{self.expr(t, ctx, 1)} AS {n}" for t, n in zip(types, names))
        order = ", ".join([_order_key(k) + r.choice(["", " DESC"]) for k in keys] + [_order_key(c) for c in scope])
        on = ", ".join(_order_key(k) for k in keys)
        return f"SELECT DISTINCT ON ({on}) {select} FROM {frm}{where} ORDER BY {order}", names, types

    def window_call(self, t: str, scope: list[Col]) -> str:
        """A window function of type ``t``.

        At most one per SELECT depends on the order among peers (ROW_NUMBER,
        NTILE, LAG/LEAD, FIRST_VALUE, a ROWS frame), ordered by every column in
        scope: equal rows are then interchangeable.  Two such functions with
        different windows could pair their values differently over equal rows.
        """
        r = self.rng
        if self._ordered_window:
            return r.choice([f"COUNT(*) OVER ()", f"{r.choice(['rank', 'dense_rank'])}() OVER ()"]) \
                if t == "int" else self.expr(t, _Ctx(scope=scope, subqueries=False), 1)
        self._ordered_window = True
        ctx = _Ctx(scope=scope, subqueries=False)
        parts = r.sample(scope, min(len(scope), r.choice([0, 1, 1, 2])))
        partition = f"PARTITION BY {', '.join(c.ref for c in parts)} " if parts else ""
        total = "ORDER BY " + ", ".join(_order_key(c) for c in scope)  # a total order up to equal rows
        some = [c for c in scope if c.type not in ("bool",) + SPECIAL]
        peer = f"ORDER BY {r.choice(some).ref}" if some else total
        if t == "int":
            return r.choice([f"row_number() OVER ({partition}{total})",
                             f"{r.choice(['rank', 'dense_rank'])}() OVER ({partition}{peer})",
                             f"ntile(2) OVER ({partition}{total})",
                             f"COUNT(*) OVER ({partition}{peer})",
                             f"SUM({self.expr('int', ctx, 1)}) OVER ({partition.strip()})"])
        if t in ("num", "float"):
            return r.choice([f"SUM({self.expr(t, ctx, 1)}) OVER ({partition}{peer})",
                             f"SUM({self.expr(t, ctx, 1)}) OVER ({partition}{total} "
                             f"ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)",
                             f"MAX({self.expr(t, ctx, 1)}) OVER ({partition.strip()})"])
        arg = self.expr(t, ctx, 1)
        if arg.startswith("'"):  # an untyped literal: lag('a') is ambiguous in PostgreSQL
            arg = f"CAST({arg} AS TEXT)"
        return r.choice([f"lag({arg}) OVER ({partition}{total})",
                         f"lead({arg}, 1) OVER ({partition}{total})",
                         f"first_value({arg}) OVER ({partition}{total})"])

    def query(self, depth: int, want: list[str] | None, top: bool) -> tuple[str, list[str], list[str]]:
        """A SELECT or a chain of set operations, WITH and ORDER BY … LIMIT at the top."""
        r = self.rng
        saved = list(self.ctes)
        with_sql = ""
        if top and self.on("cte", 0.25):
            defs = []
            for _ in range(r.randint(1, 2)):
                sql, names, types = self.query(max(depth - 1, 0), None, top=False)
                name = f"w{next(self._alias)}"
                defs.append(f"{name} AS ({sql})")
                self.ctes.append((name, list(zip(names, types))))
            with_sql = "WITH " + ", ".join(defs) + " "
        if top and self.on("distinct_on", 0.12):  # (its ORDER BY ends the query: no set operation, no LIMIT)
            sql, names, types = self.select(depth, want, distinct_on=True)
            self.ctes = saved
            return with_sql + sql, names, types
        sql, names, types = self.select(depth, want)
        if self.on("setop", 0.25 if top else 0.1):
            for _ in range(r.choice([1, 1, 2])):
                right, _, _ = self.select(max(depth - 1, 0), types)
                op = r.choice(["UNION", "INTERSECT", "EXCEPT"]) + r.choice(["", " ALL"])
                sql = f"{sql} {op} {right}"
        if top and self.on("order_limit", 0.2):
            keys = ", ".join(f"{i + 1} {r.choice(['ASC', 'DESC'])} NULLS {r.choice(['FIRST', 'LAST'])}"
                             for i in range(len(types)))
            sql += f" ORDER BY {keys} LIMIT {r.randint(0, 8) if r.random() < 0.1 else r.randint(1, 8)}"
            if r.random() < 0.3:
                sql += f" OFFSET {r.randint(1, 4)}"
        self.ctes = saved
        return with_sql + sql, names, types


def _order_key(c: Col) -> str:
    """``c`` as a sort key: jsonb and arrays by their text (a total order, deterministic)."""
    return f"CAST({c.ref} AS TEXT)" if c.type in SPECIAL else c.ref


def make_case(seed: int, queries: int = 4, features: dict[str, bool] | None = None) -> Case:
    """A schema and ``queries`` views over it, all from ``seed``."""
    rng = random.Random(seed)
    tables = random_schema(rng, features)
    gen = Generator(rng, tables, features)
    sqls = []
    for _ in range(queries):
        sql, _, _ = gen.query(rng.choice([1, 1, 2]), None, top=True)
        sqls.append(sql)
    return Case(seed, tables, sqls)
