"""Both executors implement the same ops: every op the in-process evaluator knows, Spark lowers, and back.

A function added to one executor only would fail a view under the other at run time; this catches it when
the op is added (``arrow`` registers ``arrow_functions`` and ``arrow_json``; ``spark`` lowers its own
built-ins and ``spark_functions`` and ``spark_json``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from freshview.runtime.expressions import arrow, arrow_json, arrow_text as arrow_functions  # noqa: E402
from freshview.runtime.expressions import spark_functions, spark_json  # noqa: E402


def test_function_modules_cover_the_same_ops():
    arrow_ops = set(arrow_functions.OPS) | set(arrow_json.OPS)
    spark_ops = set(spark_functions.LOWER) | set(spark_json.LOWER)
    assert arrow_ops - spark_ops == set(), "ops the in-process executor has and Spark lacks"
    assert spark_ops - arrow_ops == set(), "ops Spark lowers and the in-process executor lacks"


def test_json_and_array_ops_are_registered_in_process():
    assert set(arrow_json.OPS) <= set(arrow.IMPLEMENTATIONS)
