"""Where a step's time goes: Spark jobs, Spark plan building, state reads and writes, Python.

``StepProfile`` wraps, for the duration of a ``with`` block, collecting results
as Arrow (``spark_jobs``: the jobs themselves), every other py4j call into the
JVM (``spark_plan``: building and analysing DataFrames, shipping Arrow data to
the JVM), and the state store's read and write methods with timers.  The
remainder of the measured wall time is Python in freshview (Arrow glue,
consolidation, bookkeeping).
Timers nest correctly: time spent inside an inner timed call is not counted
twice.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from typing import Any

BUCKETS = ("spark_jobs", "spark_plan", "state_read", "state_write")


class StepProfile:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._patches: list[tuple[Any, str, Any]] = []
        self._depth = 0
        self.wall = 0.0

    def __enter__(self) -> "StepProfile":
        """Patch the timed methods; if one is missing (the engine moved it), undo the others and raise."""
        try:
            from py4j.java_gateway import JavaMember

            from freshview.runtime.state.store import SpineStateStore

            try:  # PySpark 4: the classic (py4j) DataFrame overrides toArrow
                from pyspark.sql.classic.dataframe import DataFrame
            except ImportError:
                from pyspark.sql import DataFrame
            self._patch(DataFrame, "toArrow", "spark_jobs")
            self._patch(JavaMember, "__call__", "spark_plan")
            for name in ("lookup", "scan", "extreme", "count"):
                self._patch(SpineStateStore, name, "state_read")
            for name in ("apply", "apply_report", "load", "commit", "begin"):
                self._patch(SpineStateStore, name, "state_write")
        except BaseException:
            self._restore()
            raise
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._started
        self._restore()

    def _restore(self) -> None:
        for owner, name, original in reversed(self._patches):
            setattr(owner, name, original)
        self._patches.clear()

    def _patch(self, owner: Any, name: str, bucket: str) -> None:
        original = getattr(owner, name)
        profile = self

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if profile._depth:  # nested inside another timed call: already counted
                return original(*args, **kwargs)
            profile._depth += 1
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                profile.seconds[bucket] += time.perf_counter() - started
                profile.calls[bucket] += 1
                profile._depth -= 1

        self._patches.append((owner, name, original))
        setattr(owner, name, timed)

    def breakdown(self) -> dict[str, float]:
        """Milliseconds per bucket, plus the Python remainder and the wall time."""
        out = {b: round(self.seconds[b] * 1000, 1) for b in BUCKETS}
        out["python"] = round(max(0.0, self.wall * 1000 - sum(out.values())), 1)
        out["wall"] = round(self.wall * 1000, 1)
        out["spark_jobs_calls"] = self.calls["spark_jobs"]
        out["py4j_calls"] = self.calls["spark_plan"]
        return out

