"""Binding the time functions: ``now()``, ``current_timestamp``, ``current_date``, ``localtimestamp``
(MySQL: ``NOW()``, ``CURRENT_TIMESTAMP``, ``CURDATE()``, ``UTC_TIMESTAMP()``, ``UTC_DATE()``, ``SYSDATE()``,
``LOCALTIMESTAMP``) as expressions over the step's time, ``plan.temporal.Now``.

``TemporalBinding`` is a mixin of ``ExprBinder``, placed before ``FunctionBinding``: its ``visit_<Node>``
methods bind the nodes sqlglot makes of these functions and ``bind_anonymous`` the ones it does not
model.  Whether the view can be maintained with them is decided after the plan is built
(``plan.rewrite.temporal_filter``: comparisons in filters are scheduled, anything else is refused at
the position kept in ``Now.where``).

In freshview ``now()`` is the step's time, the same for every view in a step (PostgreSQL's is the
transaction's start), taken in UTC: ``current_date`` is the UTC date and a ``timestamp`` column
compares with ``now()`` as a UTC time (PostgreSQL with ``TimeZone = 'UTC'``; MySQL's ``NOW()`` with
``time_zone = '+00:00'``).  ``current_time`` and ``localtime`` (a time of day: not monotone in time)
stay refused by ``FunctionBinding``.
"""

from __future__ import annotations

from sqlglot import exp

from freshview.plan.expr import Cast, Expr
from freshview.plan.temporal import Now
from freshview.schema import SqlType
from freshview.sql.parse import locate

_STAMP_NAMES = {"now", "transaction_timestamp", "statement_timestamp", "utc_timestamp", "sysdate",
                "current_timestamp", "localtimestamp"}
_DATE_NAMES = {"curdate", "utc_date", "current_date"}


class TemporalBinding:
    """Mixin of ``ExprBinder``: the time functions (module docstring)."""

    def now(self, node: exp.Expression, *spellings: str) -> Expr:
        """The step's time, located at the first of ``spellings`` found in the SQL."""
        kind = "timestamptz" if self.dialect.name == "postgres" else "timestamp"  # type: ignore[attr-defined]
        where, spelled = None, spellings[0]
        for word in spellings:
            where = locate(node, self.sql, word)  # type: ignore[attr-defined]
            if where is not None:
                spelled = word
                break
        if spelled in _STAMP_NAMES - {"current_timestamp", "localtimestamp"} or spelled in ("curdate", "utc_date"):
            spelled += "()"
        return Now(SqlType(kind), where, spelled)

    def today(self, node: exp.Expression, *spellings: str) -> Expr:
        return Cast(SqlType("date"), self.now(node, *spellings))

    def local(self, node: exp.Expression, *spellings: str) -> Expr:
        return Cast(SqlType("timestamp"), self.now(node, *spellings))

    def visit_CurrentTimestamp(self, node: exp.CurrentTimestamp) -> Expr:
        if node.this is not None:
            raise self.unsupported(node, "current_timestamp(precision)", "current_timestamp")  # type: ignore[attr-defined]
        return self.now(node, "now", "current_timestamp")

    def visit_CurrentDatetime(self, node): return self.now(node, "current_timestamp", "now")  # noqa: E704
    def visit_UtcTimestamp(self, node): return self.local(node, "utc_timestamp")  # noqa: E704
    def visit_Localtimestamp(self, node): return self.local(node, "localtimestamp")  # noqa: E704
    def visit_CurrentDate(self, node): return self.today(node, "current_date", "curdate")  # noqa: E704
    def visit_UtcDate(self, node): return self.today(node, "utc_date")  # noqa: E704

    def bind_anonymous(self, node: exp.Anonymous, name: str) -> Expr | None:
        if name in _STAMP_NAMES and not node.expressions:
            return self.local(node, name) if name in ("utc_timestamp", "localtimestamp") else self.now(node, name)
        if name in _DATE_NAMES and not node.expressions:
            return self.today(node, name)
        return super().bind_anonymous(node, name)  # type: ignore[misc]


__all__ = ["TemporalBinding"]
