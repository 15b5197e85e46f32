"""``Flow``: the API ``IncrementalFlow`` and ``PartitionedIncrementalFlow`` share (a ``typing.Protocol``).

Code that only defines sources and views, steps them and reads the results (a test harness, a
benchmark, a pipeline) can take either: one flow in this process, or one whose shards step on Spark
executors.  What only one of them does stays off the protocol: Debezium input, dedup, TTL and vector
sinks; the partitioned flow's partition keys.  ``TwoPhaseFlow`` is a ``Flow`` whose step is two-phase
(``IncrementalFlow``): ``prepare`` applies a step and leaves it open (``PreparedChange``) so a caller
writes its outputs, and a position of its own (``set_meta``), in its own transaction before the
step commits; the service runs on it.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import pyarrow as pa

from freshview.flow.watches import Watch
from freshview.plan import nodes as pn
from freshview.schema import TableSchema

__all__ = ["Flow", "PreparedChange", "StepResult", "TwoPhaseFlow"]


class StepResult(Protocol):
    """What a step did (``StepSummary``, ``PartitionedStep``)."""

    step: int
    rows_in: int
    rows_out: int
    duration_ms: float


@runtime_checkable
class Flow(Protocol):
    """Sources, SQL views over them, atomic steps, snapshots, watches and checkpoints."""

    @property
    def sources(self) -> list[str]: ...

    @property
    def views(self) -> list[str]: ...

    @property
    def step(self) -> int: ...

    def source_schema(self, name: str) -> TableSchema: ...

    def view_columns(self, name: str) -> pn.Columns: ...

    def readers(self, name: str) -> list[str]:
        """Views that read the source or view ``name`` directly."""

    def relation_columns(self, name: str) -> tuple[pn.Columns, bool] | None:
        """The SQL front end's catalog protocol."""

    def register_source(self, name: str, schema: Any, primary_key: Sequence[str] | None = None) -> None: ...

    def register_view(self, name: str, sql: str) -> None: ...

    def register_views(self, views: Sequence[tuple[str, str]]) -> None: ...

    def drop_view(self, name: str) -> None: ...

    def drop_source(self, name: str) -> None: ...

    def tick(self, source: str | Mapping[str, Any], delta: Any = None) -> StepResult:
        """One atomic step: ``tick("orders", delta)`` or ``tick({"a": d1, "b": d2})``."""

    def snapshot(self, name: str, weighted: bool = False) -> pa.Table: ...

    def watch_output(self, name: str, timeout: float | None = None) -> Watch: ...

    def explain(self, name: str) -> str: ...

    def checkpoint(self, uri: str) -> Any: ...

    def checkpoint_full(self, uri: str) -> Any: ...

    def restore(self, uri: str) -> Any: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> None: ...


class PreparedChange(Protocol):
    """A step applied and left open (``FlowStep``): write ``outputs``, then ``commit`` (or ``abort``;
    leaving a ``with`` block without ``commit`` aborts)."""

    @property
    def outputs(self) -> dict[str, pa.Table]:
        """Per view that changed: its change, in the view's column names + ``_weight``."""

    def set_meta(self, key: str, value: Any) -> None:
        """A JSON value kept with the flow's state (``get_meta``), committed with the step."""

    def commit(self) -> Any: ...

    def abort(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> None: ...


@runtime_checkable
class TwoPhaseFlow(Flow, Protocol):
    """A ``Flow`` whose step is two-phase, with metadata kept in its state (``IncrementalFlow``)."""

    def prepare(self, source: str | Mapping[str, Any], delta: Any = None) -> PreparedChange:
        """``tick``'s step, applied and left open.  A delta is weighted rows or a ``SourceChange`` (keyed
        upserts and deletes whose old rows the engine looks up, a truncate, checks)."""

    def load_source(self, name: str, chunks: Iterable[Any]) -> int:
        """A source's rows in bulk, one step: sorted runs into an empty copy no view reads, else ticks."""

    def get_meta(self, key: str, default: Any = None) -> Any: ...

    def set_meta(self, key: str, value: Any) -> None:
        """Outside a prepared step: committed at once."""

    def view_plan(self, name: str) -> pn.Node: ...

    def next_due(self) -> float | None:
        """When a time-based view next changes with no source change (Unix seconds), or None; a step
        with no source change at or after it (``prepare({})``) applies that change."""

    def source_rows(self, name: str, keys: pa.Table) -> pa.Table:
        """A keyed source's rows whose primary key is in ``keys``."""
