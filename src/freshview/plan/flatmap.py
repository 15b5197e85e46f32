"""Set-returning functions over a relation's rows: the ``FlatMap`` node.

``FROM t, unnest(t.xs) WITH ORDINALITY AS u(x, n)`` (and ``jsonb_array_elements``, ``json_each``,
``generate_series(t.a, t.b)``, ``regexp_split_to_table``, ``string_to_table`` ...; an SRF in the
SELECT list, as PostgreSQL 10+ runs it) maps each input row to the rows its functions return, the
input's columns first.  Several functions (``ROWS FROM (f(..), g(..))``, ``unnest(a, b)``, several
SRFs in one SELECT list) are zipped: row i of the output takes each function's i-th row, NULLs for
a function that has fewer; an input row yields as many rows as its longest function, none when
every function returns none, unless ``outer`` (``LEFT JOIN LATERAL ... ON TRUE``): then one row,
the functions' columns NULL.  ``ordinality`` appends the row's position (bigint, from 1).

The node is linear: each input row maps to its own output rows, so a change maps the same way
(``runtime.operators.flatmap`` states the delta rule).  What each function returns for one row
is ``runtime.expressions.srf``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from freshview.errors import FreshviewError
from freshview.plan.expr import Expr
from freshview.plan.nodes import Columns, _check_refs, _Unary
from freshview.schema import SqlType

ORDINALITY_TYPE = SqlType("int8")

#: The set-returning functions the executors run (``runtime.expressions.srf``).
FUNCTIONS = ("unnest", "json_array_elements", "jsonb_array_elements", "json_array_elements_text",
             "jsonb_array_elements_text", "json_each", "jsonb_each", "json_each_text", "jsonb_each_text",
             "json_object_keys", "jsonb_object_keys", "generate_series", "regexp_split_to_table",
             "string_to_table")


@dataclass(frozen=True)
class SrfCall:
    """One set-returning function: its name (``FUNCTIONS``), arguments over the input row, the columns
    it returns, and ``option`` (a constant the front end prepared: ``regexp_split_to_table``'s RE2
    pattern)."""

    func: str
    args: tuple[Expr, ...]
    columns: Columns
    option: str | None = None

    def __post_init__(self) -> None:
        if self.func not in FUNCTIONS:
            raise FreshviewError(f"internal: {self.func} is not a set-returning function the executors run")

    def __str__(self) -> str:
        return f"{self.func}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class FlatMap(_Unary):
    """Each input row, then the zipped rows of ``calls`` (see the module docstring)."""

    calls: tuple[SrfCall, ...]
    ordinality: bool = False
    outer: bool = False

    def __post_init__(self) -> None:
        if not self.calls:
            raise FreshviewError("internal: a FlatMap without a function")
        for c in self.calls:
            _check_refs(c.args, len(self.input.columns), "set-returning function")

    @property
    def added(self) -> Columns:
        """The columns the functions add (after the input's)."""
        out: Columns = tuple(col for c in self.calls for col in c.columns)
        return out + ((("ordinality", ORDINALITY_TYPE),) if self.ordinality else ())

    @property
    def columns(self) -> Columns:
        return self.input.columns + self.added


__all__ = ["FUNCTIONS", "FlatMap", "ORDINALITY_TYPE", "SrfCall"]
