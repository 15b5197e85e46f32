"""The in-process Python face of freshview: ``IncrementalFlow``.

It owns the catalog of sources and views and hands their steps to the engine (``runtime.engine``):
``tick`` (or the two-phase ``prepare`` → ``commit``), ``snapshot``, ``watch_output`` and ``explain``;
the adapters around the step each have their module (``debezium``, ``dedup``/``seen_set``,
``watches``, ``vector_sinks``, ``checkpoint``, ``partitioned``).  ``Flow`` is the protocol it shares
with ``PartitionedIncrementalFlow``.  It calls the SQL front end, the circuit compiler and the
runtime; connectors and the service build on it, never the reverse.
"""

from freshview.flow.flow import IncrementalFlow, SourceChange, StepSummary, ViewStep, Watch, source_checks
from freshview.flow.partitioned import PartitionedIncrementalFlow, PartitionedStep
from freshview.flow.partitioning import PartitionError
from freshview.flow.protocol import Flow, PreparedChange, TwoPhaseFlow
from freshview.flow.step import FlowStep

__all__ = ["Flow", "FlowStep", "IncrementalFlow", "PartitionedIncrementalFlow", "PartitionedStep", "PartitionError",
           "PreparedChange", "SourceChange", "StepSummary", "TwoPhaseFlow", "ViewStep", "Watch", "source_checks"]
