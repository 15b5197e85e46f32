"""The service loop, database-neutral: a connector's stream in, engine steps, results and positions out.

One thread does everything, in this order, forever:

1. read the connector's stream for a few milliseconds, collecting whole
   source transactions as ``batching`` says (never split);
2. split them into engine steps as ``decide.plan_steps`` says (skip what the
   engine holds, replay without writing what the result tables hold);
3. each step reads straight down (``_step``): the connector's changes
   (keyed: old rows are the engine's to look up, once) -> the engine's
   step, prepared (``TwoPhaseFlow.prepare``) -> every view's result changes
   and the step's position in one database transaction
   (``ResultSink.commit_step``) -> the engine's step committed -> the
   position acknowledged to the source; ``decide`` explains why a crash
   at any point then loses nothing and applies nothing twice;
4. between batches, serve ``create_view``/``drop_view`` requests
   (``requests``; a view is populated beside the loop by a worker of its own,
   ``population``, which the loop offers every step's transactions, shows the
   progress of and joins once caught up; several at once, the rebuilds after
   a lost slot or lost state too), beat the heartbeat, and now and then
   check that each view's requester may still read what it reads (``access``).

A transient fault anywhere (a connection lost, the database restarting, the
state disk full) ends the pass: ``outage`` decides what to close, what to
say and how long to wait, and the service attaches again from the stored
positions (``_resume``); ``run`` raises only what a restart cannot fix.

What the views are (created, dropped, reconciled, their followed tables, DDL on
those, failures) is the ``ViewCatalog``'s (``catalog``, made at every attach);
``Core`` keeps the loop and the positions.  Repairs are ``recovery``.
Everything database-specific is behind ``connectors.base``.

Longer than 800 lines because the loop tends the populations and verifications that run beside it
(their decisions are ``populating``'s and ``verify``'s, their work ``population``'s and ``verification``'s);
the tending moves into those modules when it grows further.
"""

from __future__ import annotations

import collections
import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from freshview.connectors.base import (
    Attached, ChangeError, Connector, Request, StepStats, Stream, StreamError, Transaction, ViewRun, after,
)
from freshview.errors import CatalogError, Fault, FreshviewError, SinkError, StateError
from freshview.flow import ChangeRefused, IncrementalFlow, SourceChange, TwoPhaseFlow
from freshview.runtime.state.files import probe_space
from freshview.service import batching, decide, following, outage, populating, recovery, requests, verify
from freshview.service.catalog import SnapshotProgress, ViewCatalog
from freshview.service.changes import engine_changes
from freshview.service.names import Names
from freshview.service.population import CANCEL_WAIT_S, Plan, Population, Responsive
from freshview.service.verification import Verification, job_for

if TYPE_CHECKING:
    from freshview.service.metrics import ServiceMetrics

log = logging.getLogger("freshview.service")
POPULATING = "populating"  # under the state directory: the populations' scratch engines (``population``)
FILE_ONLY = {"file_only": True}  # a log record the CLI writes to its log file, not to the terminal (cli/logs.py)


class ServiceError(FreshviewError):
    """The service cannot start or go on (not set up, no REPLICATION attribute ...): a restart cannot fix it."""


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
    population_progress_s: float = 0.5  # how often a population's progress is written to freshview.views
    snapshot_chunk_rows: int = 100_000
    progress_every_s: float = 1.0  # position writes when only unrelated tables change
    catalog_check_s: float = 2.0  # how often the followed tables are looked up in the catalog (DDL on idle tables)
    execution: str = "auto"  # how the engine runs steps: auto (it chooses per step) | spark | local
    access_check_s: float = 60.0  # how often each view's requester's rights are checked again (access)
    retry_first_s: float = 0.25  # after a fault: the first retry at once, then this long, doubling ...
    retry_cap_s: float = 2.0  # ... up to this (so the service is back this long after the database)
    verify_every_s: float | None = None  # --verify-every: each view verified this often, staggered (verify)
    sink_retry_s: float = 30.0  # a view whose result table refused rows is rebuilt after this long (sink_errors)

    def batching(self) -> batching.Rule:
        return batching.Rule(max_rows=self.max_batch_rows, max_wait_s=self.max_batch_wait_s,
                             catchup_lag_s=self.catchup_lag_s, catchup_wait_s=self.catchup_batch_wait_s,
                             catchup_pause_s=self.catchup_pause_s, poll_s=self.poll_s)

    def backoff(self) -> outage.Backoff:
        return outage.Backoff(self.retry_first_s, self.retry_cap_s)


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
        self.flow: TwoPhaseFlow = None  # type: ignore[assignment]  # an IncrementalFlow, set by run()
        self.stream: Stream | None = None
        self.views: ViewCatalog = None  # type: ignore[assignment]  # set by each attach
        self.at = decide.Positions()
        self.status = "starting"
        self.health = outage.Health()  # connected, reconnecting, unreachable, paused for a full disk
        self._attached = False  # attached once in this process (later attaches follow a fault)
        self._last_progress_write = 0.0
        self._pending_position: Any = None  # reached by unrelated transactions, not yet recorded
        self._rate = 0.0
        self._rate_at = time.monotonic()
        # Commit-to-result latency of recent source transactions, in ms (source commit time to the
        # commit of the result transaction holding their effects; both clocks are the server's).
        self.latencies_ms: collections.deque[float] = collections.deque(maxlen=100_000)
        self.steps = 0
        self.populations: dict[str, Population] = {}  # views being created beside the loop (``population``)
        self._held: list[Request] = []  # creates waiting for a running population (``requests.serve``)
        self._retry = True  # a population ended (or the service attached): waiting creates and rebuilds may start
        self._responsive = Responsive()  # the GIL handed over more often while populations run
        self.verification: Verification | None = None  # a view being verified beside the loop (``verification``)
        self._verify_queue: collections.deque[verify.Job] = collections.deque()  # verify_view requests waiting
        self._verified: dict[str, float] = {}  # view -> when it was last verified (monotonic): --verify-every
        self._verify_since = time.monotonic()
        self._last_read: Any = None  # the position of the last transaction read and processed
        self._next_progress = 0.0
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
        """Keep the views fresh until ``stop()``.  Transient faults (the database restarting, a connection
        killed, the network down, the state disk full) are ridden out (``outage``); ``run`` raises only
        what a restart cannot fix, and nothing raised while closing ever replaces that error."""
        try:
            while not self._stop.is_set():
                try:
                    self._resume()
                    self.ready.set()
                    self._loop()
                except (FreshviewError, StreamError) as exc:
                    kind = outage.kind_of(exc)
                    if kind is None:
                        raise
                    self._ride_out(kind, exc)
        finally:
            self._close()

    def _loop(self) -> None:
        next_poll = 0.0
        next_beat = 0.0
        next_check = time.monotonic() + self.options.catalog_check_s
        next_access = 0.0
        while not self._stop.is_set():
            self._follow_stream()
            now = time.monotonic()
            if self.populations:
                self._tend_populations(now)
            if now >= next_poll:
                self._serve_requests()
                next_poll = now + self.options.poll_s
            self._responsive.update(bool(self.populations))
            self._tend_verification(now)
            if self.views.rebuild_sinks(now):
                self._retry = True
            if now >= next_check:  # DDL on a table no change arrives for (a rename ...)
                self.views.check_catalog(self.at.engine)
                next_check = now + self.options.catalog_check_s
            if now >= next_access:
                self.views.recheck_access(self.at.engine)  # (DDL judged first: renamed columns by their names now)
                next_access = now + self.options.access_check_s
            if now >= next_beat:
                self._heartbeat()
                self._record_source_metrics()  # metrics hook
                next_beat = now + self.options.heartbeat_s

    def _resume(self) -> None:
        """Open what is not open: (after a full disk: once the state directory has room) the database's
        connections, the engine's state, the stream (``_attach``: positions read back, so the stream
        resumes where the engine and the result tables are)."""
        if self.health.state is outage.State.DISK_FULL:
            probe_space(self.state_dir)
        if self.connector is None:
            self._connect()
        if self.flow is None:
            self.flow = self._open_flow()
            if self.spark is None:
                # The embedded session: started while the service attaches (not earlier: a service
                # that cannot connect or read its state stops at once, without waiting for a JVM).
                from freshview.runtime.spark import warm_up

                warm_up()
        if self.stream is None:
            self._attach()
        self._note(*outage.recovered(self.health, time.time()))

    def _connect(self) -> None:
        try:
            connector = self.connect()
        except (Fault, StreamError):  # ridden out by ``run``
            raise
        except FreshviewError as exc:
            raise ServiceError(str(exc)) from None
        self.connector = connector
        self.names = Names(connector.default_schema, connector.names)
        if self.metrics is not None:
            self.metrics.view_name = self.names.qualified
        if not connector.control.is_installed():
            raise ServiceError("the freshview schema is missing or out of date in this database: run "
                               "`freshview setup` (it installs or upgrades it)")

    def _attach(self) -> None:
        """Find the source's position, reconcile engine and result tables, start streaming.

        A lost position (slot invalidated or dropped, binlog purged), a lost state
        directory or state ahead of the database all lead to the same repair: rebuild
        every view from a new snapshot, with status ``rebuilding`` meanwhile.  Runs at
        start and again after every fault: requests a fault interrupted (still ``running`` if the
        connection died under them) go back to the queue; at start, those a dead service was
        working on are retried once, then failed (``requests.recover``).
        """
        self._drop_populations(requeue=False)
        self._held, self._retry = [], True  # (held requests: requeued below with the interrupted ones)
        self._drop_verification()  # (its request, still running, is requeued below)
        source, control = self.connector.source, self.connector.control
        control.start()
        if self._attached:
            for request in control.interrupted_requests():
                control.requeue_request(request.id)
        else:
            requests.recover(control)
            shutil.rmtree(self.state_dir / POPULATING, ignore_errors=True)  # a dead process's populations
        self._attached = True
        self._pending_position = None
        self.at = decide.Positions(self._meta_position("position", "lsn"),
                                   self.connector.results.stored_position())
        self._close_stream()
        try:
            attached: Attached = source.attach(self.at.engine, bool(self.flow.sources))
        except (Fault, StreamError):  # ridden out by ``run``
            raise
        except FreshviewError as exc:
            raise ServiceError(str(exc)) from None
        rebuild = recovery.rebuild_reason(attached, self.at.engine, self.at.results)
        if rebuild:
            log.warning("rebuilding every view from a new snapshot: %s", rebuild)
            self._set_status("rebuilding")
        self._reconcile(rebuild)
        self.views.check_catalog(self.at.engine)  # DDL while the service was stopped
        source.prepare(list(self.follow_from))  # the tables followed so far stay in the stream
        self.stream = source.stream(decide.stream_start(self.at, self.follow_from))
        self._set_status("running")
        log.info("following the source from %s (results at %s)", self.at.engine, self.at.results)

    def _meta_position(self, key: str, legacy: str) -> Any:
        value = self.flow.get_meta(key, self.flow.get_meta(legacy))
        return None if value in (None, 0, "0") else self.connector.source.position_from_text(str(value))

    # ------------------------------------------------------------------ faults
    def _ride_out(self, kind: outage.Kind, exc: BaseException) -> None:
        """A transient fault: close what it broke, say so once, wait the back-off (``run`` then resumes)."""
        health, notice = outage.failed(self.health, kind, outage.reason(exc), time.time())
        self._note(health, notice)
        if notice is not None:  # the details, once per change of state, in the log file only
            log.info("the fault in full:", exc_info=exc, extra=FILE_ONLY)
        if self.metrics is not None:  # metrics hook
            self.metrics.record_fault(kind.value)
        self._close_stream()
        if kind is outage.Kind.LOST:
            self._disconnect()
        elif kind is outage.Kind.DISK_FULL and self.connector is not None:
            try:
                self._set_status(outage.State.DISK_FULL.value)  # `freshview status` shows the pause
            except (Fault, *self.connector.errors):
                self._disconnect()
        self._stop.wait(self.options.backoff().delay(self.health.failures))

    def _note(self, health: outage.Health, notice: outage.Notice | None) -> None:
        """Adopt ``health``; log its notice, and update the metrics when the state changed."""
        before = self.health.state
        self.health = health
        if notice is not None:
            log.log(notice.level, notice.message)
        if self.metrics is not None and (health.state is not before or notice is not None):  # metrics hook
            self.metrics.record_health(health.connected, health.state is outage.State.DISK_FULL,
                                       reconnected=health.state is outage.State.RUNNING and before in (
                                           outage.State.RECONNECTING, outage.State.UNREACHABLE))

    def _close_stream(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            _quietly("the change stream", stream.close)

    def _disconnect(self) -> None:
        """Close the stream and the database connections, which may be dead already; never raises."""
        self._close_stream()
        connector, self.connector = self.connector, None  # type: ignore[assignment]
        if connector is not None:
            _quietly("the source", connector.source.close)
            _quietly("the database connection", connector.control.close)

    def _close(self) -> None:
        """At the end of ``run``: status ``stopped``, everything closed.  Failures are logged, never raised
        (over the error that ended ``run``, if one did; the state's log keeps what was committed)."""
        self._close_stream()
        self._drop_populations(requeue=self.connector is not None)
        self._responsive.update(False)
        self._drop_verification()
        if self.connector is not None:
            _quietly("the status", lambda: self._set_status("stopped"))
        self._disconnect()
        if self.flow is not None:
            _quietly("the engine's state", self.flow.close, logging.WARNING)

    def _new_flow(self) -> IncrementalFlow:
        """The engine on the state directory, in the execution mode asked for."""
        kwargs: dict[str, Any] = {}
        if self.connector is not None:
            kwargs.update(dialect=self.connector.dialect, default_schema=self.connector.default_schema)
        return IncrementalFlow(self.spark, self.state_dir, execution=self.options.execution, **kwargs)

    def _open_flow(self) -> IncrementalFlow:
        """The engine on the state directory; state it cannot read (another format, damage) is set
        aside like lost state: wiped, and every view rebuilt from a new snapshot (``_attach``).  State of
        a newer freshview is left alone (the service stops), a full disk is waited out."""
        try:
            return self._new_flow()
        except Fault:  # (a full disk, state of a newer freshview or in use: never wiped)
            raise
        except StateError as exc:
            log.warning("the state in %s cannot be read (%s): starting from empty state; "
                        "every view is rebuilt from a new snapshot", self.state_dir, exc)
            recovery.wipe_state(self.state_dir)
            return self._new_flow()

    # ------------------------------------------------------------------ reconciliation
    def _reconcile(self, rebuild: str | None) -> None:
        """Make engine state and result tables agree after a crash, a lost position or a lost state dir:
        (a rebuild: every view marked rebuilding, the engine's state wiped) the catalog of views made
        on the engine, then reconciled with the database's (``ViewCatalog.reconcile``)."""
        if rebuild:
            self.connector.control.mark_rebuilding(rebuild)
            self.flow.close()
            recovery.wipe_state(self.state_dir)
            self.flow = self._new_flow()
            self.at = decide.Positions(None, self.at.results)
        self.views = ViewCatalog(self.flow, self.connector, self.names, chunk_rows=self.options.snapshot_chunk_rows,
                                 snapshot_progress=self.snapshot_progress, metrics=self.metrics,
                                 keepalive=self._keepalive, sink_retry_s=self.options.sink_retry_s)
        self.views.reconcile(self.at.engine)

    def _keepalive(self) -> None:
        if self.stream is not None:
            self.stream.keepalive()

    @property
    def follow_from(self) -> dict[str, Any]:
        """Followed table -> the position of its snapshot (the catalog's)."""
        return {} if self.views is None else self.views.follow_from

    # ------------------------------------------------------------------ the stream
    def _follow_stream(self) -> None:
        """Collect whole transactions as ``batching.next_action`` says, then run them as one batch."""
        rule = self.options.batching()
        batch = batching.Batch()
        collected: list[Transaction] = []
        due = self.flow.next_due()  # time-based views: when rows next enter or leave them
        while True:
            action = batching.next_action(batch, rule, time.monotonic(), time.time(), due)
            if isinstance(action, batching.Step):
                if collected:
                    self._process(collected)
                else:
                    self._time_step()
                return
            if isinstance(action, batching.Idle):
                if self._pending_position is not None:
                    self._record_position()
                return
            try:
                txn, partial = self._read(action.timeout, action.budget)
            except StreamError:
                if collected:  # whole transactions: step them before the stream is reopened
                    self._process(collected)
                raise
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

    def _process(self, batch: list[Transaction]) -> None:
        alone = lambda t: following.truncates(t, self.follow_from) or following.alters(t, self.follow_from)  # noqa: E731
        self._last_read = batch[-1].position
        at = self.verification.waiting() if self.verification is not None else None
        # A verification's snapshot position ends a step (``verify``: its change is whole steps up to it)
        parts = [batch] if at is None else [p for p in ([t for t in batch if not after(t.position, at)],
                                                        [t for t in batch if after(t.position, at)]) if p]
        for part in parts:
            for step in decide.plan_steps(part, self.at, alone):
                self._step(step)
                for population in self.populations.values():
                    population.offer(step.transactions)

    # ------------------------------------------------------------------ requests and populations
    def _serve_requests(self) -> None:
        """Answer pending requests and start the views to rebuild: each ``create_view`` that needs populating
        starts a population beside the loop; several run at once (a create that must wait for one is held:
        ``populating.must_wait``)."""
        # (transactions the loop processed after the engine's position touched no followed table: the
        # engine's copies, pinned now, hold them too)
        processed = self._pending_position if self._pending_position is not None else self.at.engine
        retry, self._retry = self._retry, False
        plans = self.views.start_rebuilds(self.at.engine, processed) if retry else []
        plans += requests.serve(self.views, self.at.engine, self.stopping, processed, self._held, self._cancel,
                                retry=retry, verify=self._queue_verification)
        for plan in plans:
            self._start(plan)

    def _start(self, plan: Plan) -> None:
        # A directory of its own (a cancelled population's worker may still be finishing in its old one)
        directory = self.state_dir / POPULATING / f"{plan.view.replace('/', '_')}-{time.time_ns()}"
        population = Population(plan, self.connect, self._scratch_flow, directory, self.options.snapshot_chunk_rows,
                                self.snapshot_progress)
        self.populations[plan.name] = population
        population.start()
        self._next_progress = 0.0
        log.info("%s %s beside the stream (request %s)", "rebuilding" if plan.rebuild else "altering" if plan.replaces
                 else "populating", plan.name,
                 plan.request)

    def _scratch_flow(self, directory: Path) -> IncrementalFlow:
        """A population's own engine: the service's dialect, steps in-process (first computation as the
        service's)."""
        kwargs: dict[str, Any] = {}
        if self.connector is not None:
            kwargs.update(dialect=self.connector.dialect, default_schema=self.connector.default_schema)
        return IncrementalFlow(self.spark, directory, execution="local",
                               first_computation=self.flow.first_computation, **kwargs)

    def _tend_populations(self, now: float) -> None:
        """Between two steps: show the populations' progress; join those caught up; end failed ones."""
        show = now >= self._next_progress
        for population in list(self.populations.values()):
            self._tend(population, show)
        if show:
            self._next_progress = now + self.options.population_progress_s

    def _tend(self, population: Population, show: bool) -> None:
        plan = population.plan
        changed = populating.stale({t: f.since for t, f in plan.followed.items()}, self.follow_from)
        if changed:  # (its pinned copies are not the engine's any more: it starts again)
            log.info("%s followed anew while %s was populated; its population starts again", ", ".join(changed),
                     plan.name)
            self.populations.pop(plan.name, None)
            self._retry = True
            population.cancel(wait_s=0.0)
            self.views.abandon(plan, None)
            return
        if show:
            progress = population.progress()
            self.connector.control.show_population(plan.name, progress.phase.value, progress.rows_read,
                                                   progress.rows_total, progress.elapsed_s)
            if self.metrics is not None:  # metrics hook
                self.metrics.record_population(plan.name, progress)
        if population.error is not None:
            self.populations.pop(plan.name, None)
            self._retry = True
            population.close()
            exc = population.error
            if isinstance(exc, Fault):  # the database or the disk: the request (the rebuild) is tried again
                log.warning("population of %s interrupted: %s; it starts again", plan.name, outage.reason(exc))
                self.views.abandon(plan, None)
            else:
                self.views.abandon(plan, requests.failure_text(plan.action, plan.name, exc, self.views.errors))
            return
        if not population.may_join():
            return
        if self._pending_position is not None:  # the join's position: every transaction offered
            self._record_position()
        try:
            scratch = population.finish()
            if scratch is None:  # more changes came: it catches up first
                return
            self.populations.pop(plan.name, None)
            self._retry = True
            self.views.join(plan, scratch, population.pins, self.at.engine, population.prefilled)
        except Fault:
            self.populations.pop(plan.name, None)
            population.close()
            raise  # ridden out by ``run``; the request is retried once the service is back
        except Exception as exc:  # noqa: BLE001 - a view's failure must not stop the service
            self.populations.pop(plan.name, None)
            self._retry = True
            log.error("view %s could not join", plan.name, exc_info=True)
            self.views.abandon(plan, requests.failure_text(plan.action, plan.name, exc, self.views.errors))
        if plan.name not in self.populations:  # (its engine closed, its directory deleted, off the loop)
            threading.Thread(target=population.close, name=f"freshview population {plan.name} cleanup",
                             daemon=True).start()
            if self.metrics is not None:  # metrics hook
                self.metrics.forget_population(plan.name)

    def _cancel(self, name: str) -> None:
        """A drop of view ``name``: its population (or rebuild) ends, its request answered."""
        self.views.rebuilds.pop(name, None)
        population = self.populations.pop(name, None)
        if population is not None:
            self._retry = True
            population.cancel(wait_s=0.0)  # (the loop goes on; a worker still computing cleans up after itself)
            self.views.abandon(population.plan, f"freshview: view {name} was dropped while it was being "
                                                f"{'altered' if population.plan.replaces else 'populated'}",
                               dropped=True)
            if self.metrics is not None:  # metrics hook
                self.metrics.forget_population(name)

    def _drop_populations(self, requeue: bool) -> None:
        """Abandon the populations (a fault, a stop); their requests go back to the queue when ``requeue``
        (else ``_attach`` requeues them with the other interrupted ones, the held creates too)."""
        populations, self.populations = list(self.populations.values()), {}
        deadline = time.monotonic() + CANCEL_WAIT_S  # (all of them stopped at once, waited for together)
        for population in populations:
            population.cancel(wait_s=0.0)
        for population in populations:
            population.cancel(wait_s=max(0.0, deadline - time.monotonic()))
            if requeue and self.views is not None:
                _quietly("the population's request", lambda: self.views.abandon(population.plan, None))
        if requeue and self.connector is not None:
            for request in self._held:
                _quietly("a held request", lambda: self.connector.control.requeue_request(request.id))
        self._held = []

    # ------------------------------------------------------------------ verifications (``verify``)
    def _queue_verification(self, request: Request) -> None:
        """A ``verify_view`` request waits for its turn (one verification at a time); a view that cannot be
        verified is refused at once (``requests.serve`` answers)."""
        name = self.names.qualify(request.name)
        self._verify_queue.append(job_for(self.flow, self.names, self.connector.control.view, name, request.id,
                                          self.connector.dialect))

    def _next_verification(self, now: float) -> verify.Job | None:
        """A request's job, else the view a periodic self-check verifies now (``verify.next_due``)."""
        if self._verify_queue:
            return self._verify_queue.popleft()
        every = self.options.verify_every_s
        if not every or self.views is None:
            return None
        control = self.connector.control
        name = verify.next_due([self.names.qualified(v) for v in self.flow.views], self._verified,
                               self._verify_since, every, now)
        if name is None:
            return None
        self._verified[name] = now
        try:
            return job_for(self.flow, self.names, control.view, name, None, self.connector.dialect)
        except CatalogError as exc:  # not active (failed ...: nothing to say), or time-based: said on its row
            if "not active" not in str(exc):
                control.record_verification(name, verify.ERROR, str(exc), None)
            return None

    def _tend_verification(self, now: float) -> None:
        """Between two steps: start the next verification; hand it the recorded steps once the stream has
        passed its snapshot's position; record its outcome (``freshview.views``, the request, metrics)."""
        running = self.verification
        if running is None:
            job = self._next_verification(now)
            if job is not None:
                self.verification = Verification(job, self.connect)
                self.verification.plan = self.flow.view_plan(self.names.engine(job.name))
                self.verification.start()
            return
        at = running.waiting()
        if at is not None and (after(self._last_read, at) or not after(at, getattr(self.stream, "reached", None))):
            running.deliver(at)
        if not running.finished:
            return
        self.verification = None
        job, error = running.job, running.error
        engine = self.names.engine(job.name)
        if isinstance(error, Fault) or (engine in self.flow.views and self.flow.view_plan(engine) is not running.plan):
            log.info("verifying %s again: %s", job.name, outage.reason(error) if error else "the view was rebuilt")
            self._verify_queue.appendleft(job)  # the database was lost meanwhile, or the table refilled
            return
        result, detail = running.outcome or (
            verify.ERROR, requests.failure_text("verify", job.name, error, self.views.errors))  # type: ignore[arg-type]
        if engine not in self.flow.views:
            result, detail = verify.ERROR, f"freshview: view {job.name} was dropped or failed while it was verified"
        if error is not None and not isinstance(error, self.views.errors):
            log.error("verifying %s failed", job.name, exc_info=error)
        self.connector.control.record_verification(job.name, result, detail, job.request)
        self._verified[job.name] = now
        (log.info if result == verify.EQUAL else log.warning)("verify %s: %s", job.name, detail)
        if self.metrics is not None:  # metrics hook
            self.metrics.record_verification(job.name, result)

    def _drop_verification(self) -> None:
        """Abandon the verification and the queued ones (their requests, still running, are requeued by the
        next attach, or by the next start)."""
        running, self.verification = self.verification, None
        self._verify_queue.clear()
        if running is not None:
            running.cancel()

    def _step(self, step: decide.Step) -> None:
        """One engine step, straight down: the transactions' changes, the engine's step prepared, every
        view's result changes and the position written in one database transaction, the engine's step
        committed, the position acknowledged (``decide`` says why this order).  A view or a table that
        makes the step fail is stopped, and the step is tried again without it."""
        self.views.check_ddl(step.transactions, self.at.engine)  # keeps the views right or fails them
        for _ in range(len(self.flow.views) + len(self.flow.sources) + 1):
            relevant = [following.relevant(t, self.follow_from) for t in step.transactions]
            started = time.perf_counter()
            try:
                changes = self._changes(relevant)
            except ChangeError as exc:
                if exc.table is None or exc.table not in self.follow_from:
                    raise
                self.views.fail_table(exc.table, f"freshview: {exc}")
                continue
            if all(c.empty for c in changes.values()):
                self._pending_position = step.position
                if time.monotonic() - self._last_progress_write >= self.options.progress_every_s:
                    self._record_position()
                return
            prepared_at = time.perf_counter()
            self.timings["deltas"] += prepared_at - started
            try:
                prepared = self.flow.prepare(changes)
            except Fault:
                raise  # the database or the disk, not a view: ridden out by ``run``
            except FreshviewError as exc:
                if isinstance(exc, ChangeRefused) and exc.found == 0 and exc.source is not None:
                    source = exc.source  # a keyed change to a row the engine does not hold
                    exc = ChangeError(following.missing_row(self.names.qualified(source), exc.key))
                    exc.source = source
                if not self.views.fail_step(exc):  # the view (or the table) it names stops, the step goes on
                    raise
                continue
            try:
                with prepared:  # leaving it without commit (the write failed): the engine is as before
                    self.timings["engine"] += time.perf_counter() - prepared_at
                    prepared.set_meta("position", step.position.to_text())
                    outputs = prepared.outputs
                    committed_at = self._write(outputs, step, sum(t.size for t in relevant),
                                               min(t.commit_time for t in step.transactions), prepared.summary)
                    committing = time.perf_counter()
                    summary = prepared.commit()
                    self.timings["engine"] += time.perf_counter() - committing
            except SinkError as exc:  # a result table changed by hand: its view stops, the step goes on
                self.views.fail_sink(exc, time.monotonic())
                continue
            self._after_commit(step)
            if step.write and self.verification is not None:
                self.verification.record(step.transactions[0].position, step.position,
                                         {self.names.qualified(v): d for v, d in outputs.items()})
            if self.metrics is not None:  # metrics hook
                lag_from = min(t.commit_time for t in step.transactions)
                self.metrics.record_step(summary, committed_at - lag_from if step.write else None)
            if step.write:
                self.steps += 1
                self.latencies_ms.extend(max(0.0, committed_at - t.commit_time) * 1000 for t in step.transactions)
            if log.isEnabledFor(logging.DEBUG) and summary is not None:
                per_view = ", ".join(f"{n} {v.duration_ms:.0f} ms" for n, v in summary.views.items() if not v.skipped)
                log.debug("%s (%s)", summary, per_view)
            return
        raise ServiceError("a step kept failing after every failing view was stopped")

    def _time_step(self) -> None:
        """A step with no source change, at the clock's time: the rows of time-based views whose time bound
        passed enter or leave them, written with the position the result tables are at."""
        position = self.at.results
        if position is None or self.at.engine != position:
            return  # a replay is pending: its own steps come first
        for _ in range(len(self.flow.views) + 1):
            try:
                prepared = self.flow.prepare({})
            except Fault:
                raise
            except FreshviewError as exc:
                if not self.views.fail_step(exc):
                    raise
                continue
            try:
                with prepared:
                    prepared.set_meta("position", position.to_text())
                    started = time.perf_counter()
                    self.connector.results.commit_step(
                        {self.names.qualified(v): d for v, d in prepared.outputs.items()}, position,
                        StepStats(0, 0.0, self._rate_after(0), self._ran(prepared.summary)))
                    self.timings["write"] += time.perf_counter() - started
                    summary = prepared.commit()
            except SinkError as exc:
                self.views.fail_sink(exc, time.monotonic())
                continue
            if self.metrics is not None:
                self.metrics.record_step(summary, None)
            return

    def _changes(self, group: list[Transaction]) -> dict[str, SourceChange]:
        """The connector's changes as the engine's (``changes.engine_changes``)."""
        schemas = {q: self.flow.source_schema(self.names.engine(q)) for q in self.follow_from}

        def source_rows(table: str, keys: pa.Table) -> pa.Table:
            started = time.perf_counter()
            try:
                return self.flow.source_rows(self.names.engine(table), keys)
            finally:
                self.timings["lookup"] += time.perf_counter() - started

        return engine_changes(self.connector.source.deltas, group, schemas, self.names.engine, source_rows)

    def _write(self, outputs: dict[str, pa.Table], step: decide.Step, changes: int, lag_from: float,
               summary: Any = None) -> float:
        """Results + position into the database, in one transaction (nothing when replaying what the
        result tables already hold); the commit time on the server's clock."""
        if not step.write:
            return time.time()
        stats = StepStats(changes, max(0.0, (time.time() - lag_from) * 1000), self._rate_after(changes),
                          self._ran(summary))
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

    def _ran(self, summary: Any) -> dict[str, ViewRun]:
        """The views a step ran (its ``StepSummary``), as ``freshview.views`` shows them."""
        if summary is None:
            return {}
        return {self.names.qualified(v): ViewRun(s.rows_in, s.duration_ms, s.executor)
                for v, s in summary.views.items() if not s.skipped}

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


def _quietly(what: str, close: Callable[[], Any], level: int = logging.DEBUG) -> None:
    """Run a cleanup whose failure must not hide anything (a connection may be dead, the disk full)."""
    try:
        close()
    except Exception as exc:
        log.log(level, "could not close %s cleanly: %s", what, outage.reason(exc))
