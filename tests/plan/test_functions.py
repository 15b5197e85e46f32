"""The function registry (plan.functions): every ``Call`` names a registered function, and both executors
implement every function that can reach them (``bound_away`` ones are replaced by the front end first)."""

from __future__ import annotations

import pytest

from freshview.plan.expr import Call, ColumnRef, Literal
from freshview.plan.functions import FUNCTIONS, may_raise
from freshview.plan.typing import BOOL, FLOAT8, INT4, INT8, TEXT
from freshview.schema import SqlType

x = ColumnRef(INT4, 0, "x")
s = ColumnRef(TEXT, 1, "s")


def test_arrow_implements_every_registered_function():
    from freshview.runtime.expressions import arrow

    needed = {name for name, f in FUNCTIONS.items() if not f.bound_away}
    assert needed - set(arrow.IMPLEMENTATIONS) == set(), "registered, with no Arrow implementation"
    assert set(arrow.IMPLEMENTATIONS) - set(FUNCTIONS) == set(), "implemented in Arrow, not registered"


def test_spark_implements_every_registered_function():
    pytest.importorskip("pyspark")
    from freshview.runtime.expressions import spark

    needed = {name for name, f in FUNCTIONS.items() if not f.bound_away}
    assert needed - set(spark.IMPLEMENTATIONS) == set(), "registered, with no Spark lowering"
    assert set(spark.IMPLEMENTATIONS) - set(FUNCTIONS) == set(), "lowered for Spark, not registered"


def test_a_call_names_a_registered_function():
    with pytest.raises(ValueError, match="no function 'frobnicate'"):
        Call(INT4, "frobnicate", (x,))
    with pytest.raises(ValueError, match="no function 'extract:year'"):  # the old string form
        Call(SqlType.numeric(None, 0), "extract:year", (x,))


def test_a_call_fits_its_definition():
    with pytest.raises(ValueError, match="lower takes 1 arguments, given 2"):
        Call(TEXT, "lower", (s, s))
    with pytest.raises(ValueError, match="extract needs its field"):
        Call(SqlType.numeric(None, 0), "extract", (x,))
    with pytest.raises(ValueError, match="takes no parameter"):
        Call(TEXT, "lower", (s,), "x")
    with pytest.raises(ValueError, match="= returns bool"):
        Call(INT4, "=", (x, x))
    assert Call(BOOL, "=", (x, Literal(INT4, None))).definition.family == "operator"


def test_a_parameter_is_typed_and_the_explain_text_keeps_its_spelling():
    e = Call(SqlType.numeric(None, 0), "extract", (ColumnRef(SqlType("date"), 0, "d"),), "year")
    assert (e.op, e.param) == ("extract", "year")
    assert str(e) == "extract:year($0(d))"
    assert e.map_children(lambda c: c) == e


def test_which_calls_may_raise():
    assert not may_raise(Call(BOOL, "=", (x, x)))
    assert may_raise(Call(INT4, "+", (x, x)))  # integer overflow
    assert not may_raise(Call(FLOAT8, "+", (Literal(FLOAT8, 1.0), Literal(FLOAT8, 2.0))))
    assert may_raise(Call(INT8, "/", (x, x)))
    assert not may_raise(Call(BOOL, "like", (s, Literal(TEXT, "a%"))))
    assert may_raise(Call(BOOL, "like", (s, Literal(TEXT, "a\\"))))  # ends in the escape character
    assert may_raise(Call(BOOL, "like", (s, s)))
    assert not may_raise(Call(TEXT, "substring", (s, x)))
    assert may_raise(Call(TEXT, "substring", (s, x, x)))  # a negative length


def test_each_family_is_its_own_module_in_the_arrow_evaluator():
    from freshview.runtime.expressions import arrow

    module = {"operator": "arrow", "conditional": "arrow", "numeric": "arrow_numeric", "text": "arrow_text",
              "collation": "arrow_collation", "temporal": "arrow_temporal", "json": "arrow_json",
              "array": "arrow_json"}
    for name, impl in arrow.IMPLEMENTATIONS.items():
        assert impl.__module__ == "freshview.runtime.expressions." + module[FUNCTIONS[name].family], name
