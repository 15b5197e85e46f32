"""One step of one view's circuit: input deltas in, the view's delta out.

The caller owns the transaction: everything an operator writes to the state
store in a step commits or rolls back together.  Spark failures (division
by zero, overflow, bad casts under ANSI mode) become ``ExecutionError`` with
Spark's own one-line message, never a JVM stack trace.
"""

from __future__ import annotations

import re
from typing import Callable

import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

from freshview.circuit import Circuit, Operator
from freshview.errors import ExecutionError
from freshview.plan import nodes as pn
from freshview.runtime.delta import Delta, arrow_schema
from freshview.runtime.operators.aggregate import AggState, Aggregation
from freshview.runtime.operators.join import JoinState, join_delta
from freshview.runtime.operators.linear import filter_delta, project_delta, union_delta

InputFn = Callable[[str], pa.Table | None]


class CircuitRunner:
    def __init__(self, circuit: Circuit, spark, store) -> None:
        self.circuit = circuit
        self.spark = spark
        self.store = store
        self._aggs: dict[str, Aggregation] = {}
        self._memo: dict[str, dict] = {}  # per-operator cache of lowered Spark Columns

    def step(self, inputs: InputFn, force: bool = False) -> pa.Table | None:
        """Evaluate the circuit; ``inputs(relation)`` gives that relation's change (or None)."""
        try:
            delta = self._eval(self.circuit.root, inputs, force)
            if delta is None:
                return None
            return delta.materialize()
        except (PySparkException, Py4JJavaError) as exc:  # pages of JVM frames otherwise
            raise ExecutionError(_spark_message(exc, self.circuit.view)) from None

    def _eval(self, op: Operator, inputs: InputFn, force: bool) -> Delta | None:
        node = op.node
        if isinstance(node, pn.Scan):
            table = inputs(node.relation)
            if table is None or table.num_rows == 0:
                return None
            return Delta.of_arrow(table, self.spark)
        if isinstance(node, pn.Filter):
            d = self._eval(op.inputs[0], inputs, force)
            return filter_delta(node, d, self._memo.setdefault(op.id, {})) if d is not None else None
        if isinstance(node, pn.Project):
            d = self._eval(op.inputs[0], inputs, force)
            return project_delta(node, d, self._memo.setdefault(op.id, {})) if d is not None else None
        if isinstance(node, pn.UnionAll):
            parts = [self._eval(i, inputs, force) for i in op.inputs]
            live = [p for p in parts if p is not None]
            return union_delta(node, live) if live else None
        if isinstance(node, pn.Join):
            left = self._eval(op.inputs[0], inputs, force)
            right = self._eval(op.inputs[1], inputs, force)
            if left is None and right is None:
                return None
            return join_delta(node, JoinState(*op.state), self.store, left, right, self.spark,
                              self._memo.setdefault(op.id, {}))
        if isinstance(node, pn.Aggregate):
            d = self._eval(op.inputs[0], inputs, force)
            agg = self._aggs.get(op.id)
            if agg is None:
                agg = self._aggs[op.id] = Aggregation(node, AggState(op.state[0], tuple(op.state[1:])))
            return agg.step(self.store, d, self.spark, force)
        raise ExecutionError(f"internal: no incremental operator for {type(node).__name__}")

    def output_schema(self) -> pa.Schema:
        return arrow_schema(self.circuit.root.node.columns)


_JAVA_EXCEPTION = re.compile(r"^:?\s*((?:[\w$]+\.)*[\w$]*(?:Exception|Error)): (.*)$", re.M)


def _spark_message(exc: Exception, view: str) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if isinstance(exc, Py4JJavaError) and not first.startswith("["):
        # "An error occurred while calling o12.method." then ": java.lang.OutOfMemoryError: ...": say the latter.
        found = _JAVA_EXCEPTION.search(text)
        if found:
            name = found.group(1).rsplit(".", 1)[-1]
            return f"view {view!r}: step failed: {name}: {found.group(2)[:500]}" + (
                " (raise FRESHVIEW_DRIVER_MEMORY)" if name == "OutOfMemoryError" else "")
    for marker in ("org.apache.spark.SparkArithmeticException: ", "SparkArithmeticException: ",
                   "org.apache.spark.", "java.lang."):
        if marker in text and not first.startswith("["):
            first = text.split(marker, 1)[1].splitlines()[0]
            break
    return f"view {view!r}: step failed: {first[:500]}"
