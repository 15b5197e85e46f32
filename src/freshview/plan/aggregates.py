"""The registry of aggregate functions an ``AggCall`` may name.

Every ``AggCall.func`` names one ``AggregateDef`` here (``AggCall.__post_init__`` refuses any other).
A definition says what the plan, the circuit and the binder need to know of an aggregate:

* ``state``: what the incremental operator keeps per group (``runtime.operators.aggregate``):
  ``linear``, accumulators a change adds to (``Δout(g) = −finalize(acc_old) + finalize(acc_old + Σ_Δ)``);
  ``extreme``, a (group, value) multiset besides the accumulators (deleting the current MIN finds the
  next by an index probe); ``values``, the group's stored values, the result recomputed from them for
  each touched group (its order is the result's);
* ``terms``: the accumulator columns of one aggregate over an exact (integer or numeric) argument, by
  suffix (``runtime.operators.aggregate._acc_types`` gives them; float arguments add the counts of
  non-finite values, ``linear_aggs``); tests/plan/test_aggregates.py checks the runtime keeps exactly these;
* ``finalize``: the result from those accumulators (the rule; ``accumulators`` and ``linear_aggs``
  compute it over all touched groups at once);
* ``empty``: the result over no rows: ``zero`` (COUNT) or ``null`` (every other aggregate);
* ``distinct``: whether DISTINCT is ``kept`` (a multiset of the group's distinct values), ``dropped``
  (it cannot change the result: MIN, MAX, bool_and, bool_or) or has no meaning (``none``);
* ``ordered``: an ORDER BY inside the call orders the result (string_agg, array_agg);
* ``argument``: whether it takes one (every aggregate but ``count_star``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from freshview.plan.expr import AggCall

StateKind = Literal["linear", "extreme", "values"]


@dataclass(frozen=True)
class AggregateDef:
    """One aggregate function (module docstring)."""

    name: str
    state: StateKind
    terms: tuple[str, ...]
    finalize: str
    empty: Literal["zero", "null"] = "null"
    distinct: Literal["kept", "dropped", "none"] = "kept"
    ordered: bool = False
    argument: bool = True

    def check(self, agg: "AggCall") -> None:
        """Raise ``ValueError`` if ``agg`` does not fit this definition (an internal error: a binder bug)."""
        if (agg.arg is not None) != self.argument:
            raise ValueError(f"internal: {self.name} takes " + ("an argument" if self.argument else "none"))


_VARIANCE = "(n·q − s²) / (n·(n−1)) (samp, NULL when n <= 1) or / n² (pop, NULL when n = 0)"

_ALL = [
    AggregateDef("count_star", "linear", (), "the group's row count", empty="zero", distinct="none",
                 argument=False),
    AggregateDef("count", "linear", ("n",), "n (Σw over non-NULL x)", empty="zero"),
    AggregateDef("sum", "linear", ("s", "n"), "s (Σx·w); NULL when n = 0"),
    AggregateDef("avg", "linear", ("s", "n"), "s / n, rounded to the result's scale; NULL when n = 0"),
    AggregateDef("min", "extreme", ("m",), "m, the least value the group's multiset holds", distinct="dropped"),
    AggregateDef("max", "extreme", ("m",), "m, the greatest value the group's multiset holds", distinct="dropped"),
    AggregateDef("spelling", "extreme", ("m", "mix"),
                 "m: the least spelling of a collation group (its multiset kept only while mix: the group "
                 "holds more than one spelling)", distinct="none"),
    AggregateDef("bool_and", "linear", ("n", "f"), "NULL if n = 0, else f = 0 (f: Σw over x false)",
                 distinct="dropped"),
    AggregateDef("bool_or", "linear", ("n", "t"), "NULL if n = 0, else t > 0 (t: Σw over x true)",
                 distinct="dropped"),
    AggregateDef("var_samp", "linear", ("s", "q", "n"), _VARIANCE),
    AggregateDef("var_pop", "linear", ("s", "q", "n"), _VARIANCE),
    AggregateDef("stddev_samp", "linear", ("s", "q", "n"), "√ of var_samp"),
    AggregateDef("stddev_pop", "linear", ("s", "q", "n"), "√ of var_pop"),
    AggregateDef("string_agg", "values", ("m",), "the group's values joined in their ORDER BY order",
                 ordered=True),
    AggregateDef("array_agg", "values", ("m",), "the group's values as an array in their ORDER BY order",
                 ordered=True),
]

AGGREGATES: dict[str, AggregateDef] = {a.name: a for a in _ALL}
assert len(AGGREGATES) == len(_ALL), "an aggregate is defined twice"


def aggregate(name: str) -> AggregateDef:
    """The definition of ``name`` (``ValueError``, an internal error, for a name not registered)."""
    adef = AGGREGATES.get(name)
    if adef is None:
        raise ValueError(f"internal: no aggregate {name!r} is registered (freshview.plan.aggregates)")
    return adef


def names(state: StateKind) -> tuple[str, ...]:
    """The aggregates that keep ``state``."""
    return tuple(a.name for a in _ALL if a.state == state)
