"""Both executors implement the same functions: every function the in-process evaluator knows, Spark lowers,
and back (tests/plan/test_functions.py holds both to the registry, ``plan.functions``).

A function added to one executor only would fail a view under the other at run time; this catches it when
the function is added.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from freshview.runtime.expressions import arrow, spark  # noqa: E402


def test_both_executors_implement_the_same_functions():
    assert set(arrow.IMPLEMENTATIONS) - set(spark.IMPLEMENTATIONS) == set(), "in-process only"
    assert set(spark.IMPLEMENTATIONS) - set(arrow.IMPLEMENTATIONS) == set(), "Spark only"
