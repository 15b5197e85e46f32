"""A flow's prepared step: the engine's two-phase step plus what the flow does when it commits.

``IncrementalFlow.prepare`` (and ``prepare_debezium``, ``prepare_flush``) return a ``FlowStep``:

    step = flow.prepare({"orders": delta})
    write(step.outputs)            # result tables, sinks, an outbox ... (named columns + ``_weight``)
    step.set_meta("position", p)   # a connector's position, committed with the step
    step.commit()                  # durable; then watches and vector sinks get the outputs
    # or step.abort(): the flow is exactly as before ``prepare``

The flow's own writes (its catalog with the step number, dedup seen sets, counters, the last Debezium
message of each source) are already inside the transaction when ``prepare`` returns.  Leaving a
``with step:`` block without ``commit`` aborts.  Counters (``Counters``) are kept in the store and
mirrored in memory; an abort reloads them.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pyarrow as pa

from freshview.flow.vector_sinks import VectorSinks
from freshview.flow.watches import Watches
from freshview.runtime.engine import PreparedStep, StepSummary

METRICS_KEY = "metrics"  # the flow's counters (``IncrementalFlow.metrics``), committed with each step
COUNTERS = ("rows_in_total", "rows_out_total", "dedup_skipped_total", "dedup_dropped_total")
APP_META = "app/"  # a connector's meta keys (``get_meta``/``set_meta``) live under this prefix

__all__ = ["APP_META", "COUNTERS", "Counters", "FlowStep", "METRICS_KEY"]


class Counters:
    """The flow's counters: in the store under ``METRICS_KEY`` (they commit with each step)."""

    def __init__(self) -> None:
        self.values: dict[str, int] = dict.fromkeys(COUNTERS, 0)

    def load(self, store) -> None:
        self.values = {**dict.fromkeys(COUNTERS, 0), **store.get_meta(METRICS_KEY, {})}

    def add(self, store, **increments: int) -> None:
        """Inside a step's transaction."""
        for key, n in increments.items():
            self.values[key] = self.values.get(key, 0) + n
        store.set_meta(METRICS_KEY, self.values)


class FlowStep:
    """A prepared step of an ``IncrementalFlow`` (module docstring)."""

    def __init__(self, prepared: PreparedStep, lock: threading.RLock, watches: Watches, sinks: VectorSinks,
                 counters: Counters, store, started: float) -> None:
        self._prepared = prepared
        self._store = store
        self._lock = lock
        self._watches = watches
        self._sinks = sinks
        self._counters = counters
        self._started = started

    @property
    def step(self) -> int:
        return self._prepared.step

    @property
    def summary(self) -> StepSummary | None:
        """What the step did (None for a flush)."""
        return self._prepared.summary

    @property
    def outputs(self) -> dict[str, pa.Table]:
        """Per view that changed (and is due, under a flush interval): its consolidated change, in the
        view's column names + ``_weight``."""
        return self._prepared.outputs

    @property
    def state(self) -> str:
        return self._prepared.state

    def set_meta(self, key: str, value: Any) -> None:
        """A JSON value a connector keeps with the engine's state (``get_meta``), committed with this step."""
        self._prepared.set_meta(APP_META + key, value)

    def commit(self) -> StepSummary | None:
        """Make the step durable, then hand its outputs to watches and vector sinks; its summary."""
        with self._lock:
            summary = self._prepared.commit()
            if summary is not None:
                summary.duration_ms = (time.perf_counter() - self._started) * 1000
            outputs = self._prepared.outputs
            self._watches.publish(outputs, self.step)
            for name, out in outputs.items():
                if name in self._sinks:
                    self._sinks.publish(name, out, self.step)
            if self._sinks.handles:
                for name, change in self._prepared.source_changes.items():
                    if name in self._sinks:
                        self._sinks.publish(name, change, self.step)
            return summary

    def abort(self) -> None:
        """Roll the step back: the flow is exactly as before ``prepare``."""
        with self._lock:
            if self._prepared.state != "open":
                return
            self._prepared.abort()
            self._counters.load(self._store)

    def __enter__(self) -> "FlowStep":
        return self

    def __exit__(self, *exc) -> None:
        self.abort()
