"""Rewrites of the logical plan, one rule per module, in the order they apply.

``REWRITES`` lists them in order.  ``joins``: outer, semi- and anti-joins
(and NOT IN) lowered into Join, Distinct, Filter, Project, UnionAll and
Negate, so every executor maintains them with its existing operators;
``mark_join``: EXISTS / IN used as a value (under OR, NOT, CASE, in the
SELECT list) lowered into those semi- and anti-joins, each row marked with
the predicate's value.  The
query builder calls it while it assembles a SELECT (``sql.join_tree``), so
the plans it produces hold only core nodes.
"""

from freshview.plan.rewrite import joins, mark_join

REWRITES = (joins, mark_join)

__all__ = ["REWRITES", "joins", "mark_join"]
