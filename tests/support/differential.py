"""The differential test driver: freshview vs PostgreSQL on random change streams.

``run_differential`` registers sources and views in an ``IncrementalFlow``
and in the PostgreSQL oracle, feeds both the same random changes step by
step (the flow gets deltas, PostgreSQL gets the integrated tables) and after
every step asserts that every view's snapshot equals PostgreSQL's answer to
the same SQL.  It also checks that the deltas published by
``watch_output`` add up to the change of each view's snapshot.

Typical use in a test::

    def test_group_sum(make_flow, oracle):
        run_differential(
            make_flow, oracle,
            sources={"orders": ("o_id INT, o_customer INT, amount NUMERIC(10,2)", ["o_id"])},
            views=[("totals", "SELECT o_customer, SUM(amount) AS total FROM orders GROUP BY o_customer")],
            seed=1,
        )

A failure message starts with ``seed=S step=I view=V``: rerun with that seed
to replay the exact stream.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import pyarrow as pa

from freshview.runtime.cost import EXECUTORS
from freshview.schema import WEIGHT, schema_from_ddl
from tests.support.oracle import PgOracle, _canon, assert_same_rows, table_rows
from tests.support.streams import Domain, RandomTable

SourceSpec = tuple  # (ddl, primary_key) or (ddl, primary_key, domains)


@dataclass
class DifferentialReport:
    """What a run did, for tests that want to assert the stream was interesting."""

    seed: int
    steps: int = 0
    ticks: int = 0
    source_rows: dict[str, int] = field(default_factory=dict)
    view_rows: dict[str, list[int]] = field(default_factory=dict)  # row count after each step
    empty_view_steps: dict[str, int] = field(default_factory=dict)


def _rows_counter(table: pa.Table) -> Counter:
    return Counter(tuple(_canon(v) for v in r) for r in table_rows(table))


def _element_key(x: Any) -> tuple:
    nan = isinstance(x, float) and x != x
    return (x is None, nan, 0 if x is None or nan else x)


def _sorted_lists(table: pa.Table) -> pa.Table:
    """Every list value of ``table`` with its elements sorted (NULLs last)."""
    for i, f in enumerate(table.schema):
        if pa.types.is_list(f.type):
            values = [None if v is None else sorted(v, key=_element_key) for v in table.column(i).to_pylist()]
            table = table.set_column(i, f, pa.array(values, f.type))
    return table


def _signed_diff(new: Counter, old: Counter) -> Counter:
    out: Counter = Counter(new)
    out.subtract(old)
    return Counter({k: v for k, v in out.items() if v})


class _Watcher:
    """Collects the batches of ``flow.watch_output(view)``.

    A watch with ``poll()`` (freshview's ``Watch``: returns what is pending
    without waiting) is drained on demand.  Otherwise the iterator is assumed
    to block until the next batch and is drained by a daemon thread, so a
    blocking iterator cannot hang the test.
    """

    def __init__(self, flow: Any, view: str, baseline: pa.Table) -> None:
        self.view = view
        self.baseline = _rows_counter(baseline)
        self.batches: list[Any] = []
        self.error: BaseException | None = None
        self.ended = False
        self._lock = threading.Lock()
        self._watch = flow.watch_output(view)
        self._poll: Callable[[], list[Any]] | None = getattr(self._watch, "poll", None)
        if self._poll is None:
            self._iter: Iterator[Any] = iter(self._watch)
            self._thread = threading.Thread(target=self._run, name=f"watch-{view}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            for batch in self._iter:
                with self._lock:
                    self.batches.append(batch)
        except BaseException as exc:  # reported by check()
            self.error = exc
        finally:
            self.ended = True

    def _drain(self) -> None:
        if self._poll is not None:
            try:
                got = list(self._poll())
            except BaseException as exc:  # reported by check()
                self.error = exc
                return
            with self._lock:
                self.batches.extend(got)

    def accumulated(self) -> Counter:
        self._drain()
        with self._lock:
            batches = list(self.batches)
        total: Counter = Counter()
        for batch in batches:
            table = batch.table if hasattr(batch, "table") else batch
            names = [n for n in table.column_names if n != WEIGHT]
            weights = table.column(WEIGHT).to_pylist()
            for row, w in zip(table_rows(table.select(names)), weights):
                total[tuple(_canon(v) for v in row)] += w
        return Counter({k: v for k, v in total.items() if v})

    def check(self, snapshot: pa.Table, context: str, timeout: float) -> None:
        """Wait until the published deltas add up to the snapshot's change, or fail."""
        now = _rows_counter(snapshot)
        want = _signed_diff(now, self.baseline)
        deadline = time.monotonic() + timeout
        while True:
            got = self.accumulated()
            # Accept both semantics for a view registered after data existed:
            # deltas since watching started, or a first batch with the content.
            if got == want or (self.baseline and got == now):
                return
            if self.error is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        missing = _signed_diff(want, got)
        lines = [f"{context}: watch_output deltas do not add up to the snapshot change "
                 f"(received {len(self.batches)} batches, iterator ended={self.ended}, "
                 f"error={self.error!r})"]
        shown = sorted(missing.items(), key=repr)[:20]
        lines += ["  (snapshot change - sum of deltas) per row:"] + [f"    {r!r}: {w:+d}" for r, w in shown]
        raise AssertionError("\n".join(lines))


def run_differential(
    make_flow: Callable[[], Any],
    oracle: PgOracle,
    sources: Mapping[str, SourceSpec],
    views: Sequence[tuple[str, str]],
    steps: int = 12,
    changes_per_step: tuple[int, int] = (1, 25),
    seed: int = 0,
    initial_rows: int = 30,
    multi_source_ticks: bool = True,
    check_watch: bool = True,
    watch_timeout: float = 10.0,
    null_prob: float = 0.1,
    executions: Sequence[str] = EXECUTORS,
    canon: Callable[[pa.Table], pa.Table] | None = None,
    unordered_lists: Sequence[str] = (),
    oracle_sql: Mapping[str, str] | None = None,
    fixed_rows: Mapping[str, Sequence[tuple]] | None = None,
) -> DifferentialReport:
    """Run a random change stream through freshview and PostgreSQL and compare every view after every step.

    ``sources`` maps a source name to ``(ddl, primary_key)`` or
    ``(ddl, primary_key, domains)`` (``primary_key`` a list, possibly empty;
    ``domains`` as for :class:`RandomTable`).  ``views`` is a list of
    ``(name, sql)`` in dependency order; the first half is registered before
    any data arrives, the second half after the initial load.

    The same stream runs through one flow per execution mode in
    ``executions`` (by default every executor: ``local`` and ``spark``), and
    each is compared with PostgreSQL after every step.

    ``oracle`` may be any object with PgOracle's create_table/load/create_view/query
    (``tests.support.mysql_oracle.MariaDBOracle`` for the MySQL dialect; the flows then
    come from a ``make_flow`` that passes ``dialect="mysql"``).  ``canon``, if given, maps
    both sides before they are compared (e.g. text to collation keys).
    ``unordered_lists``: views whose array columns are compared as multisets of
    elements (array_agg without ORDER BY, where PostgreSQL's order is unspecified).
    ``oracle_sql``: views whose SQL for the oracle differs (a spelling the installed
    PostgreSQL lacks, e.g. 15's aliases for subqueries in FROM).
    ``fixed_rows``: sources whose content is exactly these rows, loaded in step 0
    and never changed (dimension tables; the random steps change the others).
    """
    rng = random.Random(seed)
    report = DifferentialReport(seed=seed)
    flows = {e: make_flow(execution=e) for e in executions}

    tables: dict[str, RandomTable] = {}
    for name, spec in sources.items():
        ddl, pk = spec[0], list(spec[1] or [])
        domains: Mapping[str, Domain] | None = spec[2] if len(spec) > 2 else None
        schema = schema_from_ddl(ddl, pk)
        for flow in flows.values():
            flow.register_source(name, ddl, primary_key=pk or None)
        oracle.create_table(name, schema)
        # One generator per source, seeded from (seed, name): adding a source
        # to a test does not change the streams of the others.
        tables[name] = RandomTable(name, schema, random.Random(f"{seed}:{name}"), domains, null_prob)
    for vname, sql in views:
        oracle.create_view(vname, (oracle_sql or {}).get(vname, sql))

    watchers: dict[tuple[str, str], _Watcher] = {}
    sql_of = dict(views)

    def register(vname: str) -> None:
        for e, flow in flows.items():
            flow.register_view(vname, sql_of[vname])
            if check_watch:
                watchers[e, vname] = _Watcher(flow, vname, flow.snapshot(vname))

    def tick(deltas: dict[str, pa.Table], step: int) -> None:
        names = list(deltas)
        together = (len(names) > 1 and multi_source_ticks) or (len(names) == 1 and rng.random() < 0.5)
        for e, flow in flows.items():
            try:
                if together:
                    flow.tick(deltas)  # (with one source: the dict form)
                else:
                    for name in names:
                        flow.tick(name, deltas[name])
            except Exception as exc:
                sizes = {n: d.num_rows for n, d in deltas.items()}
                raise AssertionError(f"seed={seed} step={step} execution={e}: tick({sizes}) raised {exc!r}") from exc
        report.ticks += 1 if together else len(names)

    def compare(step: int, deltas: dict[str, pa.Table]) -> None:
        for name, table in tables.items():
            oracle.load(name, table.current())
        sizes = {n: d.num_rows for n, d in deltas.items()}
        for vname in registered:
            expected = oracle.query(vname)
            if vname in unordered_lists:
                expected = _sorted_lists(expected)
            for e, flow in flows.items():
                context = (f"seed={seed} step={step} view={vname} execution={e}\n  sql: {sql_of[vname]}\n"
                           f"  deltas: {sizes}")
                actual = flow.snapshot(vname)
                if vname in unordered_lists:
                    actual = _sorted_lists(actual)
                if canon is not None:
                    assert_same_rows(canon(actual), canon(expected), context=context)
                else:
                    assert_same_rows(actual, expected, context=context)
                if (e, vname) in watchers:
                    watchers[e, vname].check(actual, context, watch_timeout)
            report.view_rows.setdefault(vname, []).append(actual.num_rows)
            if actual.num_rows == 0:
                report.empty_view_steps[vname] = report.empty_view_steps.get(vname, 0) + 1

    half = (len(views) + 1) // 2
    registered: list[str] = []
    for vname, _ in views[:half]:
        register(vname)
        registered.append(vname)

    # Step 0: the initial load, inserts only, every source at once.
    fixed = dict(fixed_rows or {})
    initial = {name: t.step(initial_rows, inserts_only=True) for name, t in tables.items() if name not in fixed}
    for name, rows in fixed.items():
        initial[name] = tables[name].load(rows)
    tick(initial, 0)
    for vname, _ in views[half:]:
        register(vname)
        registered.append(vname)
    compare(0, initial)

    names = [n for n in tables if n not in fixed]
    for i in range(1, steps + 1):
        chosen = rng.sample(names, rng.randint(1, len(names)))
        deltas: dict[str, pa.Table] = {}
        for name in chosen:
            if rng.random() < 0.05:
                deltas[name] = tables[name].step(0, inserts_only=True)  # an empty delta
            else:
                deltas[name] = tables[name].step(rng.randint(*changes_per_step))
        tick(deltas, i)
        compare(i, deltas)
        report.steps = i
    report.source_rows = {name: len(t) for name, t in tables.items()}
    return report
