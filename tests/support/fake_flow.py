"""A stand-in for ``IncrementalFlow`` used only to test the harness itself.

It has the public surface ``run_differential`` relies on but no incremental
logic: it integrates deltas into Arrow tables and recomputes each view with
DuckDB.  That lets the harness (streams, oracle, driver, watch checks) be
tested before and independently of the real engine.  ``bug`` injects a
deliberate fault so the self-tests can prove the driver catches it.
"""

from __future__ import annotations

import queue
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

import duckdb
import pyarrow as pa

from freshview.schema import WEIGHT, schema_from_ddl
from tests.support.oracle import table_rows

_END = object()


@dataclass
class FakeBatch:
    table: pa.Table
    step: int


@dataclass
class FakeSummary:
    rows_in: int
    rows_out: int
    duration_ms: float = 0.0
    views: dict[str, Any] = field(default_factory=dict)


class FakeFlow:
    def __init__(self, bug: str | None = None, poll_watch: bool = False) -> None:
        self.poll_watch = poll_watch  # watch_output returns a _PollWatch (like freshview's Watch)
        self.con = duckdb.connect()
        self.sources: dict[str, pa.Table] = {}
        self.views: dict[str, str] = {}
        self.step = 0
        self.bug = bug
        self._watchers: dict[str, list[queue.Queue]] = {}
        self._last: dict[str, pa.Table] = {}

    def register_source(self, name: str, ddl: str, primary_key: list[str] | None = None) -> None:
        schema = schema_from_ddl(ddl, primary_key or ())
        self.sources[name] = schema.arrow().empty_table()
        self.con.register(name, self.sources[name])

    def register_view(self, name: str, sql: str) -> None:
        self.views[name] = sql
        self.con.execute(f'CREATE VIEW "{name}" AS {sql}')
        self._last[name] = self.snapshot(name)

    def tick(self, source: Any, delta: Any = None) -> FakeSummary:
        deltas = source if isinstance(source, dict) else {source: delta}
        self.step += 1
        for name, d in deltas.items():
            self._apply(name, d)
        out = 0
        for view, queues in self._watchers.items():
            now = self.snapshot(view)
            change = _diff(now, self._last[view])
            self._last[view] = now
            out += change.num_rows
            if change.num_rows:
                for q in queues:
                    q.put(FakeBatch(change, self.step))
        for view in self.views:
            self._last[view] = self.snapshot(view)
        return FakeSummary(sum(d.num_rows for d in deltas.values()), out)

    def _apply(self, name: str, delta: pa.Table) -> None:
        current = Counter(table_rows(self.sources[name]))
        cols = [c for c in delta.column_names if c != WEIGHT]
        for row, w in zip(table_rows(delta.select(cols)), delta.column(WEIGHT).to_pylist()):
            if self.bug == "ignore_deletes" and w < 0:
                continue
            current[row] += w
        rows = [r for r, n in current.items() for _ in range(max(n, 0))]
        schema = self.sources[name].schema
        arrays = [pa.array([r[i] for r in rows], type=f.type) for i, f in enumerate(schema)]
        self.sources[name] = pa.Table.from_arrays(arrays, schema=schema)
        self.con.unregister(name)
        self.con.register(name, self.sources[name])

    def snapshot(self, name: str) -> pa.Table:
        relation = self.con.sql(f'SELECT * FROM "{name}"')
        # DuckDB 2.0 renamed arrow() to to_arrow_table().
        fetch = getattr(relation, "to_arrow_table", None) or getattr(relation, "arrow")
        table = fetch()
        return table if isinstance(table, pa.Table) else table.read_all()

    def watch_output(self, name: str) -> Any:
        q: queue.Queue = queue.Queue()
        self._watchers.setdefault(name, []).append(q)
        self._last[name] = self.snapshot(name)
        if self.poll_watch:
            return _PollWatch(q, self.bug)

        def gen() -> Iterator[FakeBatch]:
            while True:
                item = q.get()
                if item is _END:
                    return
                if self.bug == "drop_watch":
                    continue
                yield item

        return gen()

    def explain(self, name: str) -> str:
        return self.views[name]

    def close(self) -> None:
        for queues in self._watchers.values():
            for q in queues:
                q.put(_END)
        self.con.close()


class _PollWatch:
    """A watch with a non-blocking ``poll()``, the shape of freshview's ``Watch``."""

    def __init__(self, q: queue.Queue, bug: str | None) -> None:
        self.q, self.bug = q, bug

    def poll(self) -> list[FakeBatch]:
        out = []
        while True:
            try:
                item = self.q.get_nowait()
            except queue.Empty:
                return out
            if item is not _END and self.bug != "drop_watch":
                out.append(item)


def _diff(new: pa.Table, old: pa.Table) -> pa.Table:
    change: Counter = Counter(table_rows(new))
    change.subtract(table_rows(old))
    rows = [(r, w) for r, w in change.items() if w]
    arrays = [pa.array([r[i] for r, _ in rows], type=f.type) for i, f in enumerate(new.schema)]
    arrays.append(pa.array([w for _, w in rows], type=pa.int64()))
    return pa.Table.from_arrays(arrays, names=new.column_names + [WEIGHT])
