"""Rewrites of the logical plan, one rule per module, in the order they apply.

``REWRITES`` lists them in order.  ``joins``: outer, semi- and anti-joins
(and NOT IN) lowered into Join, Distinct, Filter, Project, UnionAll and
Negate, so every executor maintains them with its existing operators.  The
query builder calls it while it assembles a SELECT (``sql.join_tree``), so
the plans it produces hold only core nodes.
"""

from freshview.plan.rewrite import joins

REWRITES = (joins,)

__all__ = ["REWRITES", "joins"]
