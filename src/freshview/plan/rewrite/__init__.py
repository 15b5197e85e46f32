"""Rewrites of the logical plan, one rule per module, and the order they apply.

The query builder (``sql.build``) emits a plain plan: every FROM item in
full, joined in FROM order (inner joins as cross products under a Filter of
their ON conditions; outer, semi- and anti-joins as ``LogicalJoin`` nodes
with the keys and residual of their ON condition), the WHERE conditions
over the joined rows.  ``optimize`` then applies ``RULES`` in order, each a
function from plan to plan with the same result:

1. ``fold_constants``: constant date ± interval; a date compared with a
   midnight constant as dates;
2. ``factor_or``: conjuncts common to every branch of an OR factored out
   (so ``pushdown`` can make them join keys);
3. ``pushdown``: filter conjuncts moved down to the inputs with their
   columns, equalities across a join turned into its keys;
4. ``join_order``: each tree of inner joins (comma lists, JOIN ... ON)
   joined along its join graph, no cross product unless the query has one,
   in the order an incremental step pays least for, with the sizes of the
   relations in state (``statistics``);
5. ``prune``: columns no one uses dropped, so join and aggregate state
   holds only those;
6. ``joins.lower_joins``: outer, semi- and anti-joins (and NOT IN) lowered
   into Join, Distinct, Filter, Project, UnionAll and Negate, so every
   executor maintains them with its existing operators;
7. ``pushdown`` again, over the lowered joins (a WHERE conjunct on the
   NULL-padded side reaches the matched branch; one no padded row passes
   drops the padded branch);
8. ``merge_projects``: adjacent projections and filters merged, identity
   projections dropped;
9. ``temporal_filter``: each filter reading ``now()`` becomes a
   ``TemporalFilter`` scheduled on the step's time; ``now()`` anywhere else
   is refused (``plan.temporal``).

A rule may take keyword arguments (``join_order`` takes ``statistics``:
``plan.statistics``); ``optimize`` passes each rule the ones it declares
of those it is given.

``mark_join`` is not a rule of the list: EXISTS / IN used as a value (under
OR, NOT, CASE, in the SELECT list) is lowered by the query builder as it
meets it (``sql.join_tree``) into semi- and anti-joins, each row marked with
the predicate's value, so the rules above only see core nodes there.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from freshview.plan import nodes as pn
from freshview.plan.rewrite import joins, mark_join
from freshview.plan.rewrite.factor_or import factor_or
from freshview.plan.rewrite.fold_constants import fold_constants
from freshview.plan.rewrite.join_order import join_order
from freshview.plan.rewrite.merge_projects import merge_projects
from freshview.plan.rewrite.prune import prune
from freshview.plan.rewrite.pushdown import pushdown
from freshview.plan.rewrite.temporal_filter import temporal_filter

Rule = Callable[..., pn.Node]  # plan (and the keyword arguments it declares) -> plan

RULES: tuple[Rule, ...] = (fold_constants, factor_or, pushdown, join_order, prune, joins.lower_joins, pushdown,
                           merge_projects, temporal_filter)


def optimize(plan: pn.Node, rules: tuple[Rule, ...] = RULES, **context: Any) -> pn.Node:
    """``plan`` rewritten by each of ``rules`` in turn; each rule gets the keywords of ``context`` it declares
    (``statistics=``: ``plan.statistics``)."""
    for rule in rules:
        declared = inspect.signature(rule).parameters
        plan = rule(plan, **{k: v for k, v in context.items() if k in declared})
    return plan


__all__ = ["RULES", "optimize", "joins", "mark_join", "fold_constants", "factor_or", "pushdown", "join_order",
           "prune", "merge_projects", "temporal_filter"]
