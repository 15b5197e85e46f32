"""The service loop, database-neutral: a connector's stream in, engine steps, results and positions out.

One thread does everything, in this order, forever:

1. read the connector's stream for a few milliseconds, collecting whole
   source transactions as ``batching`` says (never split);
2. split them into engine steps as ``decide.plan_steps`` says (skip what the
   engine holds, replay without writing what the result tables hold);
3. inside each step's ``before_commit``, write every view's result changes
   and the step's position in one database transaction
   (``ResultSink.commit_step``), then let the engine's state commit, then
   acknowledge the position to the source; ``decide`` explains why a crash
   at any point then loses nothing and applies nothing twice;
4. between batches, serve ``create_view``/``drop_view`` requests
   (``requests``), beat the heartbeat, and now and then check that each
   view's requester may still read what it reads (``access``).

Following new tables is ``following`` (decisions) plus ``Core.follow`` (the
snapshot); repairs are ``recovery``.  Everything database-specific is behind
``connectors.base``.
"""

from __future__ import annotations

import collections
import inspect
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from freshview.connectors.base import (
    Attached, ChangeError, Connector, PositionLost, ResultSpec, SourceTable, StepStats, Stream, StreamError,
    Transaction,
)
from freshview.errors import FreshviewError, StateError
from freshview.flow import IncrementalFlow
from freshview.plan.shape import result_key
from freshview.schema import WEIGHT
from freshview.service import access, batching, decide, following, recovery, requests
from freshview.service.names import Names

if TYPE_CHECKING:
    from freshview.service.metrics import ServiceMetrics

log = logging.getLogger("freshview.service")

# (table, rows done, estimated total rows or None, finished) while a base table is snapshotted
SnapshotProgress = Callable[[str, int, "int | None", bool], None]


class ServiceError(FreshviewError):
    """The service cannot start or go on (not set up, slot trouble, lost connection ...)."""


@dataclass
class ServiceOptions:
    """How the service batches, polls and reports.  Micro-batching (``batching``) in short: a
    transaction is stepped as soon as nothing more is readable, so a step holds what arrived
    while the previous one ran; the first four knobs only bound that."""

    max_batch_rows: int = 100_000  # a step ends at the first commit reaching this many row changes
    # (a bigger single transaction is one step: transactions are never split)
    max_batch_wait_s: float = 0.1  # stop collecting after this long even if more is readable (bounds
    # the wait of a batch's first transaction under a flood of small ones)
    catchup_lag_s: float = 2.0  # "catching up": the newest transaction read committed this long ago
    catchup_batch_wait_s: float = 5.0  # when catching up, collecting may last this long ...
    catchup_pause_s: float = 0.02  # ... and a pause in the stream shorter than this does not end it
    poll_s: float = 0.1  # how often requests are looked for while the stream is quiet
    heartbeat_s: float = 1.0
    snapshot_chunk_rows: int = 100_000
    progress_every_s: float = 1.0  # position writes when only unrelated tables change
    catalog_check_s: float = 2.0  # how often the followed tables are looked up in the catalog (DDL on idle tables)
    execution: str = "auto"  # how the engine runs steps: auto (it chooses per step) | spark | local
    access_check_s: float = 60.0  # how often each view's requester's rights are checked again (access)

    def batching(self) -> batching.Rule:
        return batching.Rule(max_rows=self.max_batch_rows, max_wait_s=self.max_batch_wait_s,
                             catchup_lag_s=self.catchup_lag_s, catchup_wait_s=self.catchup_batch_wait_s,
                             catchup_pause_s=self.catchup_pause_s, poll_s=self.poll_s)


class Core:
    """Keeps the views of one database fresh through ``connect()``'s connector. ``run()`` blocks until ``stop()``."""

    def __init__(self, connect: Callable[[], Connector], state_dir: str | Path, *, spark: Any = None,
                 options: ServiceOptions | None = None, snapshot_progress: SnapshotProgress | None = None,
                 metrics: "ServiceMetrics | None" = None) -> None:
        self.connect = connect
        self.metrics = metrics  # Prometheus metrics (service.metrics), fed by the hooks marked "metrics hook"
        self.state_dir = Path(state_dir)
        self.spark = spark
        self.options = options or ServiceOptions()
        self.snapshot_progress = snapshot_progress
        self._stop = threading.Event()
        self.ready = threading.Event()  # set once the stream is followed and requests are served
        self.connector: Connector = None  # type: ignore[assignment]  # set by run()
        self.names: Names = None  # type: ignore[assignment]  # the connector's, set by run()
        self.flow: IncrementalFlow = None  # type: ignore[assignment]
        self.stream: Stream | None = None
        self.at = decide.Positions()
        self.follow_from: dict[str, Any] = {}  # followed table -> the position of its snapshot
        self.status = "starting"
        self._last_progress_write = 0.0
        self._pending_position: Any = None  # reached by unrelated transactions, not yet recorded
        self._rate = 0.0
        self._rate_at = time.monotonic()
        # Commit-to-result latency of recent source transactions, in ms (source commit time to the
        # commit of the result transaction holding their effects; both clocks are the server's).
        self.latencies_ms: collections.deque[float] = collections.deque(maxlen=100_000)
        self.steps = 0
        # Where the service's time goes, in seconds since start: reading and decoding the stream
        # (``wait``: blocked on the server meanwhile), building deltas (``lookup``: of that, asking the
        # engine for old rows), the engine step without the result write, the result write.
        self.timings = dict.fromkeys(("read", "wait", "deltas", "lookup", "engine", "write"), 0.0)

    # ------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        self._stop.set()

    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        if self.spark is None:  # the embedded session: start it while the service connects
            from freshview.runtime.spark import warm_up

            warm_up()
        try:
            self._open()
            self.ready.set()
            next_poll = 0.0
            next_beat = 0.0
            next_check = time.monotonic() + self.options.catalog_check_s
            next_access = 0.0
            while not self._stop.is_set():
                self._follow_stream()
                now = time.monotonic()
                if now >= next_poll:
                    requests.serve(self)
                    next_poll = now + self.options.poll_s
                if now >= next_check:  # DDL on a table no change arrives for (a rename ...)
                    following.check_catalog(self)
                    next_check = now + self.options.catalog_check_s
                if now >= next_access:
                    self._recheck_access()
                    next_access = now + self.options.access_check_s
                if now >= next_beat:
                    self._heartbeat()
                    self._record_source_metrics()  # metrics hook
                    next_beat = now + self.options.heartbeat_s
        finally:
            self._close()

    def _open(self) -> None:
        try:
            self.connector = self.connect()
        except FreshviewError as exc:
            raise ServiceError(str(exc)) from None
        self.names = Names(self.connector.default_schema, self.connector.names)
        if self.metrics is not None:
            self.metrics.view_name = self.names.qualified
        control = self.connector.control
        if not control.is_installed():
            raise ServiceError("the freshview schema is missing or out of date in this database: run "
                               "`freshview setup` (it installs or upgrades it)")
        control.start()
        requests.recover(control)  # requests a dead service was working on: retried once, then failed
        self.flow = self._open_flow()
        self._attach()

    def _attach(self) -> None:
        """Find the source's position, reconcile engine and result tables, start streaming.

        A lost position (slot invalidated or dropped, binlog purged), a lost state
        directory or state ahead of the database all lead to the same repair: rebuild
        every view from a new snapshot, with status ``rebuilding`` meanwhile.
        """
        source = self.connector.source
        self.at = decide.Positions(self._meta_position("position", "lsn"),
                                   self.connector.results.stored_position())
        self.follow_from = {t: source.position_from_text(str(v))
                            for t, v in self.flow.get_meta("follow_from", {}).items()}
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        try:
            attached: Attached = source.attach(self.at.engine, bool(self.flow.sources))
        except FreshviewError as exc:
            raise ServiceError(str(exc)) from None
        rebuild = recovery.rebuild_reason(attached, self.at.engine, self.at.results)
        if rebuild:
            log.warning("rebuilding every view from a new snapshot: %s", rebuild)
            self._set_status("rebuilding")
        self._reconcile(rebuild)
        following.check_catalog(self)  # DDL while the service was stopped
        source.prepare(list(self.follow_from))  # the tables followed so far stay in the stream
        try:
            self.stream = source.stream(decide.stream_start(self.at, self.follow_from))
        except StreamError as exc:
            raise ServiceError(f"cannot follow the change stream: {exc}") from None
        self._set_status("running")
        log.info("following the source from %s (results at %s)", self.at.engine, self.at.results)

    def _meta_position(self, key: str, legacy: str) -> Any:
        value = self.flow.get_meta(key, self.flow.get_meta(legacy))
        return None if value in (None, 0, "0") else self.connector.source.position_from_text(str(value))

    def _close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        if self.connector is not None:
            try:
                self._set_status("stopped")
            except self.connector.errors:
                pass
            self.connector.source.close()
            self.connector.control.close()
        if self.flow is not None:
            self.flow.close()

    def _new_flow(self) -> IncrementalFlow:
        """The engine, with the execution mode asked for when this engine has execution modes."""
        kwargs: dict[str, Any] = {}
        if "execution" in inspect.signature(IncrementalFlow).parameters:
            kwargs["execution"] = self.options.execution
        elif self.options.execution != "auto":
            log.warning("this engine has no execution modes: execution %r is ignored", self.options.execution)
        if self.connector is not None:
            kwargs.update(dialect=self.connector.dialect, default_schema=self.connector.default_schema)
        return IncrementalFlow(self.spark, self.state_dir, **kwargs)

    def _open_flow(self) -> IncrementalFlow:
        """The engine on the state directory; state it cannot read (another format, damage) is set
        aside like lost state: wiped, and every view rebuilt from a new snapshot (``_attach``)."""
        try:
            return self._new_flow()
        except StateError as exc:
            log.warning("the state in %s cannot be read (%s): starting from empty state; "
                        "every view is rebuilt from a new snapshot", self.state_dir, exc)
            recovery.wipe_state(self.state_dir)
            return self._new_flow()

    # ------------------------------------------------------------------ reconciliation
    def _reconcile(self, rebuild: str | None) -> None:
        """Make engine state and result tables agree after a crash, a lost position or a lost state dir."""
        control = self.connector.control
        wanted = recovery.wanted_views(control.views())
        if rebuild:
            control.mark_rebuilding(rebuild)
            self.flow.close()
            recovery.wipe_state(self.state_dir)
            self.flow = self._new_flow()
            self.at = decide.Positions(None, self.at.results)
            self.follow_from = {}
        for view in recovery.views_to_drop(list(self.flow.views), {self.names.engine(n) for n in wanted}):
            self.flow.drop_view(view)
        for name, view_sql in wanted.items():
            if self.names.engine(name) in self.flow.views:
                self.connector.results.attach(self.result_spec(name))
            else:
                try:
                    requests.create(self, name, view_sql, replace=True)
                except (FreshviewError, ChangeError, *self.connector.errors) as exc:
                    self._mark_failed([name], str(exc))
        self.drop_unused_sources()

    def result_spec(self, name: str) -> ResultSpec:
        plan = self.flow.view_plan(self.names.engine(name))
        return ResultSpec(name, tuple(plan.columns), result_key(plan))

    # ------------------------------------------------------------------ the stream
    def _follow_stream(self) -> None:
        """Collect whole transactions as ``batching.next_action`` says, then run them as one batch."""
        rule = self.options.batching()
        batch = batching.Batch()
        collected: list[Transaction] = []
        while True:
            action = batching.next_action(batch, rule, time.monotonic(), time.time())
            if isinstance(action, batching.Step):
                self._process(collected)
                return
            if isinstance(action, batching.Idle):
                if self._pending_position is not None:
                    self._record_position()
                return
            try:
                txn, partial = self._read(action.timeout, action.budget)
            except StreamError as exc:
                if collected:
                    self._process(collected)
                self._reconnect(exc)
                return
            if txn is None:
                batch = batch.nothing_more(time.monotonic(), partial)
            else:
                collected.append(txn)
                batch = batch.add(txn.size, txn.commit_time, time.monotonic())

    def _read(self, timeout: float, budget: float) -> tuple[Transaction | None, bool]:
        stream = self.stream
        assert stream is not None
        started, waited = time.perf_counter(), stream.waited_s
        try:
            return stream.read(timeout, budget)
        finally:
            wait = stream.waited_s - waited
            self.timings["wait"] += wait
            self.timings["read"] += time.perf_counter() - started - wait

    def _reconnect(self, exc: Exception) -> None:
        """A broken stream is reopened (with back-off); a lost position is repaired by a rebuild."""
        log.warning("change stream lost (%s); reconnecting", exc)
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        for attempt in range(30):
            if self._stop.is_set():
                return
            if isinstance(exc, PositionLost):
                log.warning("the source lost the stream's position (%s)", exc)
                self._attach()  # sees the lost position and rebuilds
                return
            try:
                self.stream = self.connector.source.stream(decide.stream_start(self.at, self.follow_from))
                return
            except StreamError as again:
                exc = again
                if not isinstance(again, PositionLost):
                    time.sleep(min(0.2 * 2 ** attempt, 5.0))
        raise ServiceError(f"cannot reconnect to the change stream: {exc}")

    def _process(self, batch: list[Transaction]) -> None:
        for step in decide.plan_steps(batch, self.at, lambda t: following.truncates(t, self.follow_from)):
            self._step(step)

    def _step(self, step: decide.Step) -> None:
        self._check_definitions(step.transactions)
        for _ in range(len(self.flow.views) + len(self.flow.sources) + 1):
            relevant = [following.relevant(t, self.follow_from) for t in step.transactions]
            started = time.perf_counter()
            try:
                deltas = self._deltas(relevant)
            except ChangeError as exc:
                if exc.table is None or exc.table not in self.follow_from:
                    raise
                self._fail_table(exc.table, f"freshview: {exc}")
                continue
            if not any(d.num_rows for d in deltas.values()):
                self._pending_position = step.position
                if time.monotonic() - self._last_progress_write >= self.options.progress_every_s:
                    self._record_position()
                return
            changes = sum(t.size for t in relevant)
            lag_from = min(t.commit_time for t in step.transactions)
            ticked, written = time.perf_counter(), self.timings["write"]
            self.timings["deltas"] += ticked - started
            committed_at: list[float] = []
            try:
                summary = self.flow.tick(deltas, before_commit=lambda out: committed_at.append(
                    self._commit(out, step, changes, lag_from)))
            except FreshviewError as exc:
                view, source = getattr(exc, "view", None), getattr(exc, "source", None)
                if view is not None:
                    self._mark_failed([self.names.qualified(view)], f"freshview: {exc}")
                elif source is not None:
                    self._fail_table(self.names.qualified(source), f"freshview: {exc}")
                else:
                    raise
                continue
            self.timings["engine"] += time.perf_counter() - ticked - (self.timings["write"] - written)
            self._after_commit(step)
            if self.metrics is not None:  # metrics hook
                self.metrics.record_step(summary, committed_at[0] - lag_from if step.write and committed_at else None)
            if step.write:
                self.steps += 1
                now = committed_at[0] if committed_at else time.time()
                self.latencies_ms.extend(max(0.0, now - t.commit_time) * 1000 for t in step.transactions)
            if log.isEnabledFor(logging.DEBUG):
                per_view = ", ".join(f"{n} {v.duration_ms:.0f} ms" for n, v in summary.views.items() if not v.skipped)
                log.debug("%s (%s)", summary, per_view)
            return
        raise ServiceError("a step kept failing after every failing view was stopped")

    def _deltas(self, group: list[Transaction]) -> dict[str, pa.Table]:
        """The connector's deltas, with TRUNCATE expanded (every row the engine holds goes)."""
        flow = self.flow
        truncated = {t for txn in group for t in txn.truncated}
        schemas = {q: flow.source_schema(self.names.engine(q)) for q in self.follow_from}

        def lookup_old(table: str, keys: pa.Table) -> pa.Table:
            if table in truncated:  # the rows it had are gone; later changes see only new rows
                return schemas[table].arrow().empty_table()
            started = time.perf_counter()
            try:
                return flow.source_rows(self.names.engine(table), keys)
            finally:
                self.timings["lookup"] += time.perf_counter() - started

        deltas = self.connector.source.deltas(group, schemas, lookup_old)
        for table in truncated:
            current = flow.snapshot(self.names.engine(table), weighted=True)
            gone = current.set_column(current.num_columns - 1, WEIGHT, pc.negate(current.column(WEIGHT)))
            after = deltas.get(table)
            deltas[table] = gone if after is None else pa.concat_tables([gone, after.cast(gone.schema)])
        return {self.names.engine(t): d for t, d in deltas.items()}

    def _commit(self, outputs: dict[str, pa.Table], step: decide.Step, changes: int, lag_from: float) -> float:
        """Runs inside the engine step: results + position into the database, then the engine commits."""
        self.flow.set_meta("position", step.position.to_text())
        if not step.write:
            return time.time()  # replaying what the result tables already hold
        stats = StepStats(changes, max(0.0, (time.time() - lag_from) * 1000), self._rate_after(changes))
        started = time.perf_counter()
        try:
            return self.connector.results.commit_step(
                {self.names.qualified(v): d for v, d in outputs.items()}, step.position, stats)
        finally:
            self.timings["write"] += time.perf_counter() - started

    def _after_commit(self, step: decide.Step) -> None:
        assert self.stream is not None
        self.at = decide.committed(self.at, step)
        self._pending_position = None
        self._last_progress_write = time.monotonic()
        self.stream.acknowledge(step.position)

    def _rate_after(self, changes: int) -> float:
        """Changes per second, smoothed over about five seconds."""
        now = time.monotonic()
        elapsed = max(now - self._rate_at, 1e-3)
        weight = min(1.0, elapsed / 5.0)
        self._rate = (1 - weight) * self._rate + weight * (changes / elapsed)
        self._rate_at = now
        return self._rate

    def _record_position(self) -> None:
        """Advance the position past transactions that touched no followed table (lets the source free them)."""
        position = decide.position_to_record(self._pending_position, self.at)
        self._pending_position = None
        if position is None:
            return
        self.connector.results.record_position(position)
        self.flow.set_meta("position", position.to_text())
        self.at = decide.Positions(position, position)
        self._last_progress_write = time.monotonic()
        if self.stream is not None:
            self.stream.acknowledge(position)

    def _check_definitions(self, group: tuple[Transaction, ...]) -> None:
        """DDL on a followed table keeps its views right or fails them (not the service): ``following``."""
        following.check_ddl(self, group)

    # ------------------------------------------------------------------ following base tables
    def follow(self, tables: dict[str, SourceTable]) -> None:
        following.follow(self, tables)

    def save_follow_from(self) -> None:
        self.flow.set_meta("follow_from", {t: p.to_text() for t, p in self.follow_from.items()})

    def drop_unused_sources(self) -> None:
        changed = False
        for source in list(self.flow.sources):
            if not self.flow.readers(source):
                self.flow.drop_source(source)
                self.follow_from.pop(self.names.qualified(source), None)
                changed = True
        if changed:
            self.save_follow_from()
            self.connector.source.retain(list(self.follow_from))  # e.g. leaves the publication

    # ------------------------------------------------------------------ failures
    def _fail_table(self, table: str, error: str) -> None:
        """Stop every view that reads ``table`` and forget the table."""
        readers = self.flow.readers(self.names.engine(table))
        self._mark_failed([self.names.qualified(v) for v in readers], error)
        self.drop_unused_sources()

    def _mark_failed(self, names: list[str], error: str) -> None:
        """Views (and the views reading them) go to status failed; their tables stay as they were."""
        doomed: list[str] = []
        todo = [self.names.engine(n) for n in names]
        while todo:
            view = todo.pop()
            if view in doomed:
                continue
            doomed.append(view)
            if view in self.flow.views:
                todo.extend(self.flow.readers(view))
        for view in reversed(list(self.flow.views)):
            if view in doomed:
                self.flow.drop_view(view)
        primary = {self.names.engine(n) for n in names}
        for view in doomed:
            name = self.names.qualified(view)
            self.connector.results.forget(name)
            message = error if view in primary else f"freshview: a view it reads failed: {error}"
            log.error("view %s failed: %s", name, message)
            self.connector.control.mark_failed(name, message)

    def _recheck_access(self) -> None:
        """A view whose requester lost a right it needs fails, and its requester loses its table (``access``)."""
        plans = {self.names.qualified(v): self.flow.view_plan(v) for v in self.flow.views}
        for found in access.recheck(self.connector, plans, self.names):
            self._mark_failed([found.name], found.reason)
            self.connector.results.revoke_reader(found.name, found.requester)

    # ------------------------------------------------------------------ status
    def _record_source_metrics(self) -> None:
        if self.metrics is not None:
            value = getattr(self.at.results, "value", None)  # a numeric position (an LSN), if the source has one
            source = self.connector.source
            self.metrics.record_source(source.label, value if isinstance(value, int) else None,
                                       source.retained_bytes())

    def _heartbeat(self) -> None:
        self.connector.control.heartbeat(self.status)

    def _set_status(self, status: str) -> None:
        self.status = status
        self._heartbeat()
