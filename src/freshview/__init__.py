"""freshview: incremental materialized views, maintained on Apache Spark.

Public surface only: ``IncrementalFlow`` (the Python face), ``PartitionedIncrementalFlow``, ``DeltaBatch``,
``StepSummary`` and the error classes.  Layers, in the direction data flows:
``sql`` (text to plan) → ``plan`` → ``circuit`` (incremental operators) →
``runtime`` (Spark execution and state) → ``flow`` (the API); ``algebra``,
``schema`` and ``errors`` sit under all of them.
"""

from freshview.algebra.batch import DeltaBatch
from freshview.errors import (
    CatalogError, DeltaError, ExecutionError, ExecutorEnvironmentError, FreshviewError, SchemaError, SqlError,
    SqlTypeError, StateError, UnknownColumnError, UnknownTableError, UnsupportedSqlError,
)
from freshview.flow import IncrementalFlow, PartitionedIncrementalFlow, PartitionError, StepSummary

__all__ = [
    "IncrementalFlow", "PartitionedIncrementalFlow", "PartitionError", "DeltaBatch", "StepSummary", "FreshviewError", "SqlError",
    "UnsupportedSqlError", "UnknownTableError", "UnknownColumnError", "SqlTypeError",
    "DeltaError", "CatalogError", "StateError", "ExecutionError", "ExecutorEnvironmentError", "SchemaError",
]
__version__ = "0.1.0"
