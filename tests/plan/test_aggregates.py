"""The aggregate registry (plan.aggregates): every ``AggCall`` names a registered aggregate, and the runtime
keeps for each exactly the state and accumulator terms its definition declares."""

from __future__ import annotations

import pytest

from freshview.plan import nodes as pn
from freshview.plan.aggregates import AGGREGATES
from freshview.plan.expr import AggCall, ColumnRef
from freshview.plan.typing import BOOL, INT4, INT8, TEXT
from freshview.schema import SqlType


def _sample(name: str) -> AggCall:
    """One call of aggregate ``name`` over an exact argument of a type it takes."""
    adef = AGGREGATES[name]
    if not adef.argument:
        return AggCall(name, None, INT8)
    arg = {"bool_and": ColumnRef(BOOL, 0), "bool_or": ColumnRef(BOOL, 0), "string_agg": ColumnRef(TEXT, 0),
           "spelling": ColumnRef(TEXT, 0), "array_agg": ColumnRef(INT4, 0)}.get(name, ColumnRef(INT4, 0))
    result = {"count": INT8, "sum": INT8, "bool_and": BOOL, "bool_or": BOOL, "string_agg": TEXT,
              "array_agg": SqlType.array(INT4)}.get(name, arg.type if name in ("min", "max", "spelling")
                                                      else SqlType.numeric(None, 16))
    return AggCall(name, arg, result, separator="," if name == "string_agg" else None)


@pytest.mark.parametrize("name", sorted(AGGREGATES))
def test_the_runtime_keeps_the_declared_terms(name):
    from freshview.runtime.operators.aggregate import _acc_types

    assert tuple(suffix for suffix, _ in _acc_types(_sample(name))) == AGGREGATES[name].terms


@pytest.mark.parametrize("name", sorted(AGGREGATES))
def test_the_circuit_keeps_the_declared_state(name):
    from freshview.circuit.nodes import incrementalize

    agg = _sample(name)
    scan = pn.Scan("t", (("x", agg.arg.type if agg.arg is not None else INT4),))
    op = incrementalize("v", pn.Aggregate(scan, (), (agg,), ())).root
    while op.kind != "aggregate":
        (op,) = op.inputs
    adef = AGGREGATES[name]
    assert len(op.state.extremes) == (adef.state == "extreme")
    assert len(op.state.values) == (adef.state == "values")


def test_an_aggregate_call_names_a_registered_aggregate():
    with pytest.raises(ValueError, match="no aggregate 'median'"):
        AggCall("median", ColumnRef(INT4, 0), INT4)
    with pytest.raises(ValueError, match="count_star takes none"):
        AggCall("count_star", ColumnRef(INT4, 0), INT8)
    with pytest.raises(ValueError, match="sum takes an argument"):
        AggCall("sum", None, INT8)
