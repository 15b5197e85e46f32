"""The in-process Python face of freshview: ``IncrementalFlow``.

It owns the catalog of sources and views, turns ``tick`` calls into atomic
steps (validate deltas, update source state, run dirty views, commit), and
serves ``snapshot``, ``watch_output`` and ``explain``.  It calls the SQL
front end, the circuit compiler and the runtime; connectors and the service
build on it, never the reverse.
"""

from freshview.flow.flow import IncrementalFlow, StepSummary, ViewStep, Watch
from freshview.flow.partitioned import PartitionedIncrementalFlow, PartitionedStep
from freshview.flow.partitioning import PartitionError

__all__ = ["IncrementalFlow", "PartitionedIncrementalFlow", "PartitionedStep", "PartitionError", "StepSummary",
           "ViewStep", "Watch"]
