"""The registry of scalar functions and operators a plan's ``Call`` may name.

Every ``Call`` names one ``FunctionDef`` here (``Call.__post_init__`` refuses any other name, so this
table *is* the set of functions the front end can emit).  A definition says what the executors and the
rewrites need to know of a function without reading its implementation:

* ``family``: the family whose module implements it in the Arrow evaluator (operator and conditional:
  ``runtime.expressions.arrow`` itself; numeric, text, collation, temporal: ``arrow_<family>``; json and
  array: ``arrow_json``);
* ``arity``: the number of arguments (``max_args`` None: any number from ``min_args``);
* ``param``: what ``Call.param`` names for a parameterised function (EXTRACT's field, date_trunc's unit,
  a collation key's collation, an interval part), or None: the function takes no parameter;
* ``result``: the result type's kind where the function has one fixed result type (checked on every
  ``Call``), or None: typed from the arguments by the binder (``sql.functions``, ``sql.bind_expr``,
  ``plan.typing``);
* ``raises``: whether evaluating a call may raise for some row (division by zero, an overflow, a cast
  of bad text): CASE, COALESCE, AND and OR evaluate only such calls lazily (``runtime.expressions.arrow``);
* ``volatility``: PostgreSQL's (every function here is immutable: its result depends on its arguments);
* ``bound_away``: the reason a function never reaches an executor (the front end replaces it), or "".
* ``where_read``: its value is defined only on the rows that read it (``single_row`` raises for a
  subquery's key of several rows, which only matters where an outer row reads that key): a conjunct
  calling it is never a join key nor moved into one side of a join (``plan.rewrite.pushdown``).

Each executor registers its implementations by name (``runtime.expressions.arrow.IMPLEMENTATIONS``,
``runtime.expressions.spark.IMPLEMENTATIONS``); tests/plan/test_functions.py checks that both cover
this table.  A new function is one line here plus one implementation in each executor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal

if TYPE_CHECKING:
    from freshview.plan.expr import Call

Family = Literal["operator", "numeric", "text", "collation", "temporal", "conditional", "json", "array"]
Volatility = Literal["immutable", "stable", "volatile"]


# PostgreSQL's error for a scalar subquery that returns several rows where its value is used (single_row),
# and each dialect's (single_row's parameter names the dialect).
MORE_THAN_ONE_ROW = "more than one row returned by a subquery used as an expression"
MORE_THAN_ONE_ROW_BY_DIALECT = {"postgres": MORE_THAN_ONE_ROW, "mysql": "Subquery returns more than 1 row"}


def _always(call: "Call") -> bool:
    return True


def _never(call: "Call") -> bool:
    return False


def _unless_float(call: "Call") -> bool:
    """Checked integer and numeric arithmetic can overflow; float arithmetic gives ±Infinity."""
    return not call.type.is_float


def _like_raises(call: "Call") -> bool:
    """A pattern ending in the escape character raises (a literal pattern is checked here)."""
    pattern = call.args[1]
    if not pattern.is_literal:  # (plan.expr imports this module: no isinstance against its Literal)
        return True
    value = pattern.value  # type: ignore[attr-defined]
    return value is not None and re.search(r"(^|[^\\])(\\\\)*\\$", value) is not None


def _substring_raises(call: "Call") -> bool:
    return len(call.args) == 3  # a negative length


@dataclass(frozen=True)
class FunctionDef:
    """One scalar function or operator (module docstring)."""

    name: str
    family: Family
    min_args: int
    max_args: int | None
    result: str | None = None
    raises: Callable[["Call"], bool] = _always
    param: str | None = None
    volatility: Volatility = "immutable"
    bound_away: str = ""
    where_read: bool = False

    def check(self, call: "Call") -> None:
        """Raise ``ValueError`` if ``call`` does not fit this definition (an internal error: a binder bug)."""
        n = len(call.args)
        if n < self.min_args or (self.max_args is not None and n > self.max_args):
            raise ValueError(f"internal: {self.name} takes {self._arity()} arguments, given {n}")
        if (self.param is None) != (call.param == ""):
            raise ValueError(f"internal: {self.name} " + (f"needs its {self.param}" if self.param else
                                                          f"takes no parameter (given {call.param!r})"))
        if self.result is not None and call.type.kind not in (self.result, "null"):
            raise ValueError(f"internal: {self.name} returns {self.result}, not {call.type}")

    def _arity(self) -> str:
        if self.max_args == self.min_args:
            return str(self.min_args)
        return f"{self.min_args}.." + ("" if self.max_args is None else str(self.max_args))


def _defs(family: Family, names: str, min_args: int, max_args: int | None, **kw) -> list[FunctionDef]:
    return [FunctionDef(n, family, min_args, max_args, **kw) for n in names.split()]


_ALL: list[FunctionDef] = [
    # -- operators ---------------------------------------------------------------------------------
    *_defs("operator", "+ - *", 2, 2, raises=_unless_float),  # (date ± integer too: "date out of range")
    *_defs("operator", "/ %", 2, 2),  # division by zero
    FunctionDef("neg", "operator", 1, 1, raises=_unless_float),
    *_defs("operator", "= <> < <= > >=", 2, 2, result="bool", raises=_never),
    *_defs("operator", "and or", 2, 2, result="bool", raises=_never),
    FunctionDef("not", "operator", 1, 1, result="bool", raises=_never),
    FunctionDef("is_null", "operator", 1, 1, result="bool", raises=_never),
    FunctionDef("in", "operator", 2, None, result="bool", raises=_never),
    *_defs("operator", "like ilike", 2, 2, result="bool", raises=_like_raises),
    # -- conditionals ------------------------------------------------------------------------------
    FunctionDef("coalesce", "conditional", 1, None, raises=_never),
    FunctionDef("nullif", "conditional", 2, 2, raises=_never),
    # single_row(n, v): a scalar subquery's value from its row count n and its row's value v (sql.single_row)
    FunctionDef("single_row", "conditional", 2, 2, param="dialect", where_read=True),
    *_defs("conditional", "greatest least", 1, None, raises=_never),
    FunctionDef("grouping", "conditional", 1, None, result="int4",
                bound_away="GROUPING(...) becomes a column of the grouping-sets union (sql.grouping_sets)"),
    # -- numeric -----------------------------------------------------------------------------------
    FunctionDef("abs", "operator", 1, 1, raises=_unless_float),  # (checked, as neg)
    FunctionDef("round", "numeric", 1, 2, raises=_never),  # never gains digits beyond the result type
    *_defs("numeric", "floor ceil", 1, 1, raises=_never),
    *_defs("numeric", "sqrt exp ln log10", 1, 1, result="float8"),  # out of domain, overflow
    FunctionDef("cbrt", "numeric", 1, 1, result="float8", raises=_never),
    FunctionDef("power", "numeric", 2, 2, result="float8"),
    FunctionDef("sign", "numeric", 1, 1, raises=_never),
    FunctionDef("trunc", "numeric", 1, 2),
    # -- text --------------------------------------------------------------------------------------
    FunctionDef("||", "text", 1, None, result="text", raises=_never),
    FunctionDef("concat", "text", 1, None, result="text", raises=_never),
    *_defs("text", "lower upper", 1, 1, result="text", raises=_never),
    FunctionDef("length", "text", 1, 1, result="int4", raises=_never),
    FunctionDef("substring", "text", 2, 3, result="text", raises=_substring_raises),
    *_defs("text", "trim ltrim rtrim", 1, 2, result="text", raises=_never),
    FunctionDef("replace", "text", 3, 3, result="text", raises=_never),
    FunctionDef("split_part", "text", 3, 3, result="text"),  # a zero field position
    FunctionDef("strpos", "text", 2, 2, result="int4", raises=_never),
    *_defs("text", "left right", 2, 2, result="text", raises=_never),
    *_defs("text", "lpad rpad", 2, 3, result="text", raises=_never),
    FunctionDef("repeat", "text", 2, 2, result="text"),  # a result beyond PostgreSQL's 1 GB
    *_defs("text", "reverse initcap md5", 1, 1, result="text", raises=_never),
    FunctionDef("starts_with", "text", 2, 2, result="bool", raises=_never),
    FunctionDef("octet_length", "text", 1, 1, result="int4", raises=_never),
    FunctionDef("concat_ws", "text", 1, None, result="text", raises=_never),
    FunctionDef("regexp_replace", "text", 2, None, result="text", raises=_never),
    # -- collation (MySQL/MariaDB's, freshview.collation) ---------------------------------------------
    FunctionDef("collkey", "collation", 1, 1, result="text", raises=_never, param="collation"),
    FunctionDef("collfold", "collation", 1, 1, result="text", raises=_never, param="collation"),
    # -- dates, times and intervals ----------------------------------------------------------------
    FunctionDef("extract", "temporal", 1, 1, result="numeric", raises=_never, param="field"),
    FunctionDef("date_trunc", "temporal", 1, 1, raises=_never, param="unit"),
    FunctionDef("make_date", "temporal", 3, 3, result="date"),  # a date that does not exist
    FunctionDef("epoch_us", "temporal", 1, 1, result="int8", raises=_never),
    FunctionDef("add_interval", "temporal", 4, 4),  # out of the timestamp range
    FunctionDef("age", "temporal", 2, 2, result="int8", raises=_never, param="part"),
    FunctionDef("make_interval", "temporal", 3, 3, result="interval"),
    FunctionDef("interval_part", "temporal", 1, 1, result="int8", raises=_never, param="part"),
    # -- json, jsonb and MariaDB's JSON ---------------------------------------------------------------
    *_defs("json", "json_get json_path", 2, None, raises=_never),
    *_defs("json", "json_get_text json_path_text", 2, None, result="text", raises=_never),
    *_defs("json", "jsonb_contains jsonb_exists", 2, 2, result="bool", raises=_never),
    FunctionDef("json_in", "json", 1, 1),  # a text that is not JSON
    FunctionDef("json_build_object", "json", 0, None),  # a NULL key
    FunctionDef("json_agg_finish", "json", 1, 1, raises=_never),
    FunctionDef("as_text", "json", 1, 1, result="text", raises=_never),
    FunctionDef("mariadb_extract", "json", 1, None, raises=_never),
    FunctionDef("json_unquote", "json", 1, 1, result="text", raises=_never),
    FunctionDef("mariadb_object", "json", 0, None),  # a NULL key
    FunctionDef("mariadb_arrayagg_finish", "json", 1, 1, raises=_never),
    FunctionDef("enum_unknown", "json", 1, 1, result="int4"),  # a label the view's enum type lacks
    FunctionDef("jsonb_key", "json", 1, 1, result="text", raises=_never),  # jsonb's equality key (numbers by value)
    # -- arrays ------------------------------------------------------------------------------------
    FunctionDef("array_length", "array", 1, 1, result="int4", raises=_never),
    FunctionDef("cardinality", "array", 1, 1, result="int4", raises=_never),
    FunctionDef("array_element", "array", 2, 2, raises=_never),
    FunctionDef("array_any_eq", "array", 2, 2, result="bool", raises=_never),
    FunctionDef("array_text", "array", 1, 1, result="text", raises=_never),  # CAST(array AS text)
]

FUNCTIONS: dict[str, FunctionDef] = {f.name: f for f in _ALL}
assert len(FUNCTIONS) == len(_ALL), "a function is defined twice"

COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")


def function(name: str) -> FunctionDef:
    """The definition of ``name`` (``ValueError``, an internal error, for a name not registered)."""
    fdef = FUNCTIONS.get(name)
    if fdef is None:
        raise ValueError(f"internal: no function {name!r} is registered (freshview.plan.functions)")
    return fdef


def where_read(call: "Call") -> bool:
    """Whether ``call`` must be evaluated only on the rows that read it (``FunctionDef.where_read``)."""
    return FUNCTIONS[call.op].where_read


def may_raise(call: "Call") -> bool:
    """Whether ``call`` itself (not its arguments) may raise for some row."""
    return FUNCTIONS[call.op].raises(call)
