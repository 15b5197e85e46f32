"""Time-based views: ``now()`` in the plan, and the ``TemporalFilter`` that schedules rows on it.

The front end binds ``now()``, ``current_timestamp``, ``localtimestamp``, ``current_date`` (and MySQL's
``NOW()``, ``CURDATE()``, ``UTC_TIMESTAMP()`` ...) to expressions over one leaf, ``Now``: the step's
time (``current_date`` is ``CAST(Now AS date)``).  A view reading ``Now`` only in comparisons with a
row's values that are monotone in time (``ts > now() - interval '30 days'``, ``d >= current_date``,
``date_trunc('day', now()) <= ts``, under AND/OR/NOT/CASE) is maintained by scheduling: the rule
``plan.rewrite.temporal_filter`` turns each filter that reads ``Now`` into a ``TemporalFilter`` whose
predicate reads the step's time as one more column, each comparison rewritten into atoms
``now >= bound(row)`` (a boolean that turns from false to true once, at ``bound(row)``).  The
predicate's value for a row can then change only at one of its ``bounds``, so the operator
(``runtime.operators.temporal``) keeps each row under its next bound in a time-ordered arrangement and
re-evaluates it when the step's time passes it (Materialize's temporal filters are the precedent).

Anywhere else (the SELECT list, a GROUP BY key, an aggregate's argument, a join key, a comparison that
is not monotone in time) ``Now`` is refused by that rule, located at the ``now()`` that was written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from freshview.errors import FreshviewError, SqlLocation
from freshview.plan import nodes as pn
from freshview.plan.expr import Expr, columns_used
from freshview.schema import SqlType

TIME = SqlType("timestamp")  # the step's time inside a TemporalFilter's predicate: UTC, microseconds


@dataclass(frozen=True)
class Now(Expr):
    """The step's time (``now()``): a ``timestamptz`` (PostgreSQL) or ``timestamp`` (MySQL's DATETIME),
    both UTC.  ``where`` and ``spelling``: the position and the name of the function written, for refusals."""

    where: SqlLocation | None = field(default=None, compare=False)
    spelling: str = field(default="now()", compare=False)

    def __str__(self) -> str:
        return "now()"


def reads_now(e: Expr) -> Now | None:
    """The first ``Now`` inside ``e``, or None."""
    if isinstance(e, Now):
        return e
    for child in e.children():
        found = reads_now(child)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class TemporalFilter(pn._Unary):
    """The input's rows for which ``predicate`` is true at the step's time.

    ``predicate`` reads the input's columns and column ``len(input.columns)`` (``now_column``), the step's
    time as a ``timestamp`` (UTC); time enters it only through atoms ``now >= b(row)``.  ``bounds`` are
    those ``b``: expressions over the input's columns giving an instant (``timestamp``, NULL: never), so
    the predicate's value for a row is constant between two consecutive bounds of that row.
    """

    predicate: Expr
    bounds: tuple[Expr, ...]

    def __post_init__(self) -> None:
        width = len(self.input.columns)
        pn._check_refs([self.predicate], width + 1, "temporal filter")
        pn._check_refs(self.bounds, width, "temporal bound")
        if any(b.type != TIME for b in self.bounds):
            raise FreshviewError("internal: a temporal bound is not a timestamp")

    @property
    def now_column(self) -> int:
        return len(self.input.columns)

    def reads(self) -> set[int]:
        """The input columns the predicate and the bounds read."""
        out = set().union(*(columns_used(b) for b in self.bounds)) if self.bounds else set()
        return (out | columns_used(self.predicate)) - {self.now_column}


__all__ = ["Now", "TemporalFilter", "TIME", "reads_now"]
