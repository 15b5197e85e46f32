"""The service loop: logical replication in, engine steps, result tables and progress out.

One thread does everything, in this order, forever:

1. read the replication stream for a few milliseconds, assembling whole
   source transactions (never split);
2. run the collected transactions as ONE engine step (micro-batching: while a
   step runs, new transactions queue up and form the next batch);
3. inside the step's ``before_commit``, write every view's result changes and
   the source LSN reached into the database in one transaction, then let the
   engine's state commit, then acknowledge the LSN to the slot;
4. between batches, serve ``create_view``/``drop_view`` requests and beat the
   heartbeat.

Crash safety comes from that order.  Positions: ``pg_lsn`` is in
``freshview.progress`` (committed with the results), ``flow_lsn`` is kept
with the engine's state, and the slot's confirmed position trails both.
Database first, engine second means ``flow_lsn <= pg_lsn`` always; after a
crash between the two commits the engine replays the transactions up to
``pg_lsn`` without writing them again.  Transactions at or below
``flow_lsn`` are skipped.  So a SIGKILL at any moment loses nothing and
applies nothing twice.

New base tables are followed through a temporary slot's exported snapshot
at LSN ``Y``: the table's rows are loaded from the snapshot, and changes to it
from transactions that committed before ``Y`` (which the snapshot already
holds) are ignored in the main stream.
"""

from __future__ import annotations

import collections
import inspect
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql as psql

from freshview.connectors.postgres import protocol as p
from freshview.connectors.postgres.catalog import SourceTable, describe_table
from freshview.connectors.postgres.identifiers import qualified
from freshview.connectors.postgres.changes import ChangeError, SourceTransaction, TransactionAssembler, to_deltas
from freshview.connectors.postgres.protocol import format_lsn, parse_lsn
from freshview.connectors.postgres.replication import ReplicationConnection, ReplicationError
from freshview.connectors.postgres.sink import ResultTable, result_shape
from freshview.connectors.postgres.snapshot import read_table
from freshview.connectors.postgres.types import UnsupportedTypeError, sql_type
from freshview.errors import CatalogError, FreshviewError, StateError
from freshview.flow import IncrementalFlow
from freshview.schema import WEIGHT, TableSchema
from freshview.service import batching, control
from freshview.service.metrics import ServiceMetrics
from freshview.service.status import retained_wal_bytes
from freshview.service.names import engine_name, identifier, qualified_from_engine, qualify
from freshview.sql import build_plan

log = logging.getLogger("freshview.service")

_PG_EPOCH = 946_684_800.0  # 2000-01-01 in Unix seconds

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
    execution: str = "auto"  # how the engine runs steps: auto (it chooses per step) | spark | local

    def batching(self) -> batching.Rule:
        return batching.Rule(max_rows=self.max_batch_rows, max_wait_s=self.max_batch_wait_s,
                             catchup_lag_s=self.catchup_lag_s, catchup_wait_s=self.catchup_batch_wait_s,
                             catchup_pause_s=self.catchup_pause_s, poll_s=self.poll_s)


class Service:
    """Keeps the views of one database fresh. ``run()`` blocks until ``stop()``."""

    def __init__(self, dsn: str, state_dir: str | Path, *, spark: Any = None,
                 options: ServiceOptions | None = None, snapshot_progress: SnapshotProgress | None = None,
                 slot: str | None = None, publication: str = control.PUBLICATION,
                 metrics: ServiceMetrics | None = None) -> None:
        self.dsn = dsn
        self.state_dir = Path(state_dir)
        self.spark = spark
        self.options = options or ServiceOptions()
        self.snapshot_progress = snapshot_progress
        self.slot = slot or control.slot_name(dsn)
        self.publication = publication
        self.metrics = metrics  # Prometheus metrics (service.metrics), fed by the hooks marked "metrics hook"
        self._stop = threading.Event()
        self.ready = threading.Event()  # set once the stream is followed and requests are served
        self.pg: psycopg.Connection | None = None
        self.flow: IncrementalFlow | None = None
        self.repl: ReplicationConnection | None = None
        self.decoder = p.Decoder()
        self.assembler = TransactionAssembler()
        self.flow_lsn = 0
        self.pg_lsn = 0
        self.follow_from: dict[str, int] = {}
        self.results: dict[str, ResultTable] = {}
        self.status = "starting"
        self._last_progress_write = 0.0
        self._pending_position: int | None = None  # LSN of unrelated transactions not yet recorded
        self._rate = 0.0
        self._rate_at = time.monotonic()
        # Commit-to-result latency of recent source transactions, in ms (source commit time to the
        # commit of the result transaction holding their effects; both clocks are the server's).
        self.latencies_ms: collections.deque[float] = collections.deque(maxlen=100_000)
        self._result_commit_time = 0.0
        self.steps = 0
        # Where the service's time goes, in seconds since start: reading and decoding the stream
        # (``wait``: blocked on the server meanwhile), building deltas (``lookup``: of that, asking the
        # engine for old rows), the engine step without the result write, the result write.
        self.timings = dict.fromkeys(("read", "wait", "deltas", "lookup", "engine", "write"), 0.0)

    # ------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        if self.spark is None:  # the embedded session: start it while the service connects
            from freshview.runtime.spark import warm_up

            warm_up()
        try:
            self._open()
            self.ready.set()
            next_poll = 0.0
            next_beat = 0.0
            while not self._stop.is_set():
                self._follow_stream()
                now = time.monotonic()
                if now >= next_poll:
                    self._serve_requests()
                    next_poll = now + self.options.poll_s
                if now >= next_beat:
                    self._heartbeat()
                    self._record_source_metrics()  # metrics hook
                    next_beat = now + self.options.heartbeat_s
        finally:
            self._close()

    def _open(self) -> None:
        try:
            self.pg = psycopg.connect(self.dsn, autocommit=True)
        except psycopg.Error as exc:
            raise ServiceError(f"cannot connect to the database: {exc}".strip()) from None
        if not control.is_installed(self.pg):
            raise ServiceError("the freshview schema is missing in this database: run `freshview setup` first")
        control.requeue_running(self.pg)
        self.pg.execute("INSERT INTO freshview.progress (slot) VALUES (%s) ON CONFLICT DO NOTHING", (self.slot,))
        self.pg_lsn = _lsn(self.pg.execute("SELECT lsn FROM freshview.progress WHERE slot = %s",
                                           (self.slot,)).fetchone()[0])
        self.flow = self._open_flow()
        self._attach_slot()

    def _attach_slot(self) -> None:
        """Find (or create) the slot, reconcile engine and result tables, start streaming.

        A lost slot (invalidated, or dropped), a lost state directory or state
        ahead of the database all lead to the same repair: rebuild every view
        from a new snapshot, with status ``rebuilding`` meanwhile.
        """
        assert self.pg is not None and self.flow is not None
        self.flow_lsn = int(self.flow.get_meta("lsn", 0))
        self.follow_from = {k: int(v) for k, v in self.flow.get_meta("follow_from", {}).items()}
        rebuild = None
        slot = self.pg.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s",
                               (self.slot,)).fetchone()
        if self.repl is not None:
            self.repl.close()
        self.repl = self._replication_connection()
        if slot is not None and slot[0] == "lost":
            rebuild = f"replication slot {self.slot} was invalidated (the server removed WAL it still needed)"
            self.repl.drop_slot(self.slot)
            slot = None
        if slot is None:
            if self.flow.sources:
                rebuild = rebuild or f"replication slot {self.slot} is gone"
            self.repl.create_slot(self.slot, export_snapshot=False)
        if self.flow_lsn > self.pg_lsn:
            rebuild = rebuild or "the engine state is ahead of the database (restored from a backup?)"
        if rebuild:
            log.warning("rebuilding every view from a new snapshot: %s", rebuild)
            self._set_status("rebuilding")
        self._reconcile(rebuild)
        self.decoder, self.assembler = p.Decoder(), TransactionAssembler()
        self.repl.start(self.slot, self.publication)
        self._set_status("running")
        log.info("following slot %s from %s (results at %s)", self.slot, format_lsn(self.flow_lsn),
                 format_lsn(self.pg_lsn))

    def _close(self) -> None:
        if self.repl is not None:
            self.repl.close()
        if self.pg is not None and not self.pg.closed:
            try:
                self._set_status("stopped")
            except psycopg.Error:
                pass
            self.pg.close()
        if self.flow is not None:
            self.flow.close()

    def _new_flow(self) -> IncrementalFlow:
        """The engine, with the execution mode asked for when this engine has execution modes."""
        kwargs: dict[str, Any] = {}
        if "execution" in inspect.signature(IncrementalFlow).parameters:
            kwargs["execution"] = self.options.execution
        elif self.options.execution != "auto":
            log.warning("this engine has no execution modes: execution %r is ignored", self.options.execution)
        return IncrementalFlow(self.spark, self.state_dir, **kwargs)

    def _replication_connection(self) -> ReplicationConnection:
        try:
            return ReplicationConnection(self.dsn)
        except ReplicationError as exc:
            raise ServiceError(f"{exc} (the role needs the REPLICATION attribute; see `freshview setup`)") from None

    # ------------------------------------------------------------------ startup reconciliation
    def _reconcile(self, rebuild: str | None) -> None:
        """Make engine state and result tables agree after a crash, a lost slot or a lost state dir."""
        assert self.pg is not None and self.flow is not None
        self.pg.execute("DELETE FROM freshview.views WHERE status = 'creating'")  # requests were requeued
        rows = self.pg.execute("SELECT name, sql, status FROM freshview.views ORDER BY created_at, name").fetchall()
        wanted = {name: sql for name, sql, status in rows if status in ("active", "rebuilding")}
        if rebuild:
            with self.pg.transaction():
                self.pg.execute("UPDATE freshview.views SET status = 'rebuilding', error = %s, updated_at = now() "
                                "WHERE status = 'active'", (rebuild,))
            self._reset_engine()
        for view in reversed(self._flow_views_in_order()):
            if qualified_from_engine(view) not in wanted:
                self.flow.drop_view(view)
        for name, view_sql in wanted.items():
            if engine_name(name) in self.flow.views:
                self.results[name] = ResultTable(name, result_shape(self.flow.view_plan(engine_name(name))))
            else:
                try:
                    self._create(name, view_sql, replace=True)
                except (FreshviewError, ChangeError, psycopg.Error) as exc:
                    self._mark_failed([name], str(exc))
        self._drop_unused_sources()

    def _open_flow(self) -> IncrementalFlow:
        """The engine on the state directory; state it cannot read (another format, damage) is set
        aside like lost state: wiped, and every view rebuilt from a new snapshot (``_attach_slot``)."""
        try:
            return self._new_flow()
        except StateError as exc:
            log.warning("the state in %s cannot be read (%s): starting from empty state; "
                        "every view is rebuilt from a new snapshot", self.state_dir, exc)
            self._wipe_state()
            return self._new_flow()

    def _wipe_state(self) -> None:
        if self.state_dir.exists():
            for entry in self.state_dir.iterdir():
                if entry.name == "freshview.log":  # the CLI's log (cli/logs.py), not state
                    continue
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()

    def _reset_engine(self) -> None:
        assert self.flow is not None
        self.flow.close()
        self._wipe_state()
        self.flow = self._new_flow()
        self.flow_lsn = 0
        self.follow_from = {}

    def _flow_views_in_order(self) -> list[str]:
        assert self.flow is not None
        return list(self.flow.views)  # registration order: a view comes after the views it reads

    # ------------------------------------------------------------------ the stream
    def _follow_stream(self) -> None:
        """Collect whole transactions as ``batching.next_action`` says, then run them as one step."""
        assert self.repl is not None
        rule = self.options.batching()
        batch = batching.Batch()
        collected: list[SourceTransaction] = []
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
                txn, partial = self._read_transaction(action.timeout, action.budget)
            except ReplicationError as exc:
                if collected:
                    self._process(collected)
                self._reconnect(exc)
                return
            if txn is None:
                batch = batch.nothing_more(time.monotonic(), partial)
            else:
                collected.append(txn)
                batch = batch.add(txn.size, txn.commit_time / 1e6 + _PG_EPOCH, time.monotonic())

    def _read_transaction(self, timeout: float, budget: float) -> tuple[SourceTransaction | None, bool]:
        """The next whole transaction, or (None, whether part of one arrived): nothing came within
        ``timeout`` s, or ``budget`` s went by while a transaction was still streaming in."""
        repl = self.repl
        assert repl is not None
        started, waited = time.perf_counter(), repl.waited_s
        until = time.monotonic() + budget
        got = 0
        feed, decoder = self.assembler.feed_payload, self.decoder
        try:
            for payload in repl.payloads(timeout):
                got += 1
                txn = feed(payload, decoder)
                if txn is not None:
                    return txn, True
                if not got % 1024 and time.monotonic() >= until:
                    break
            return None, got > 0
        finally:
            wait = repl.waited_s - waited
            self.timings["wait"] += wait
            self.timings["read"] += time.perf_counter() - started - wait

    def _reconnect(self, exc: Exception) -> None:
        log.warning("replication stream lost (%s); reconnecting", exc)
        if self.repl is not None:
            self.repl.close()
        self.decoder, self.assembler = p.Decoder(), TransactionAssembler()
        for attempt in range(30):
            if self._stop.is_set():
                return
            try:
                self.repl = ReplicationConnection(self.dsn)
                self.repl.start(self.slot, self.publication)
                return
            except ReplicationError as again:
                if "invalidated" in str(again) or "can no longer get changes" in str(again):
                    self.repl.close()
                    self.repl = None
                    self._attach_slot()  # sees the lost slot and rebuilds
                    return
                time.sleep(min(0.2 * 2 ** attempt, 5.0))
        raise ServiceError(f"cannot reconnect to the replication stream: {exc}")

    def _process(self, batch: list[SourceTransaction]) -> None:
        """Split a batch into engine steps: replayed vs new transactions, TRUNCATEs alone."""
        todo = [t for t in batch if t.end_lsn > self.flow_lsn]
        group: list[SourceTransaction] = []
        for txn in todo:
            if group and (self._truncates(txn) or self._truncates(group[-1])
                          or (group[-1].end_lsn <= self.pg_lsn) != (txn.end_lsn <= self.pg_lsn)):
                self._step(group)
                group = []
            group.append(txn)
        if group:
            self._step(group)

    def _truncates(self, txn: SourceTransaction) -> bool:
        return any(self._followed(t) for t in txn.truncated)

    def _followed(self, table: str) -> bool:
        return table in self.follow_from

    def _step(self, group: list[SourceTransaction]) -> None:
        assert self.flow is not None
        end_lsn = group[-1].end_lsn
        write = end_lsn > self.pg_lsn
        self._check_relations(group)
        for _ in range(len(self.flow.views) + len(self.flow.sources) + 1):
            relevant = [self._relevant(t) for t in group]
            started = time.perf_counter()
            try:
                deltas = self._deltas(relevant)
            except ChangeError as exc:
                if exc.table is None or not self._followed(exc.table):
                    raise
                self._fail_table(exc.table, f"freshview: {exc}")
                continue
            if not any(d.num_rows for d in deltas.values()):
                self._pending_position = end_lsn
                if time.monotonic() - self._last_progress_write >= self.options.progress_every_s:
                    self._record_position()
                return
            changes = sum(t.size for t in relevant)
            lag_from = min(t.commit_time for t in group) / 1e6 + _PG_EPOCH
            ticked, written = time.perf_counter(), self.timings["write"]
            self.timings["deltas"] += ticked - started
            try:
                summary = self.flow.tick(deltas, before_commit=lambda out: self._commit(
                    out, end_lsn, write, changes, lag_from))
            except FreshviewError as exc:
                view, source = getattr(exc, "view", None), getattr(exc, "source", None)
                if view is not None:
                    self._mark_failed([qualified_from_engine(view)], f"freshview: {exc}")
                elif source is not None:
                    self._fail_table(qualified_from_engine(source), f"freshview: {exc}")
                else:
                    raise
                continue
            self.timings["engine"] += time.perf_counter() - ticked - (self.timings["write"] - written)
            self._after_commit(end_lsn, write)
            if write:
                self._record_latencies(group)
            if self.metrics is not None:  # metrics hook
                self.metrics.record_step(summary, self._result_commit_time - lag_from if write else None)
            if log.isEnabledFor(logging.DEBUG):
                per_view = ", ".join(f"{n} {v.duration_ms:.0f} ms" for n, v in summary.views.items() if not v.skipped)
                log.debug("%s (%s)", summary, per_view)
            return
        raise ServiceError("a step kept failing after every failing view was stopped")

    def _relevant(self, txn: SourceTransaction) -> SourceTransaction:
        """The transaction's changes to followed tables not already in their snapshots."""
        keep = {t: c for t, c in txn.changes.items()
                if self._followed(t) and txn.commit_lsn >= self.follow_from[t]}
        truncated = [t for t in txn.truncated if self._followed(t) and txn.commit_lsn >= self.follow_from[t]]
        return SourceTransaction(txn.xid, txn.commit_lsn, txn.end_lsn, txn.commit_time, keep, truncated,
                                 txn.relations)

    def _deltas(self, group: list[SourceTransaction]) -> dict[str, pa.Table]:
        assert self.flow is not None
        flow = self.flow
        truncated = {t for txn in group for t in txn.truncated}
        schemas = {q: flow.source_schema(engine_name(q)) for q in self.follow_from}

        def lookup_old(table: str, keys: pa.Table) -> pa.Table:
            if table in truncated:  # the rows it had are gone; later changes see only new rows
                return schemas[table].arrow().empty_table()
            started = time.perf_counter()
            try:
                return flow.source_rows(engine_name(table), keys)
            finally:
                self.timings["lookup"] += time.perf_counter() - started

        deltas = to_deltas(group, schemas, lookup_old)
        for table in truncated:
            current = flow.snapshot(engine_name(table), weighted=True)
            gone = current.set_column(current.num_columns - 1, WEIGHT, pc.negate(current.column(WEIGHT)))
            after = deltas.get(table)
            deltas[table] = gone if after is None else pa.concat_tables([gone, after.cast(gone.schema)])
        return {engine_name(t): d for t, d in deltas.items()}

    def _commit(self, outputs: dict[str, pa.Table], end_lsn: int, write: bool, changes: int,
                lag_from: float) -> None:
        """Runs inside the engine step: results + position into the database, then the engine commits.

        One transaction: one statement per changed view (two for a counted view), then
        one that updates ``freshview.views`` and ``freshview.progress`` and reads the
        server's clock.
        """
        assert self.pg is not None and self.flow is not None
        self.flow.set_meta("lsn", end_lsn)
        if not write:
            return  # replaying what the result tables already hold
        lag_ms = max(0.0, (time.time() - lag_from) * 1000)
        started = time.perf_counter()
        changed: list[str] = []
        added: list[int] = []
        with self.pg.transaction():
            for view, delta in outputs.items():
                name = qualified_from_engine(view)
                table = self.results.get(name)
                if table is None:
                    continue
                table.apply(self.pg, delta)
                changed.append(name)
                added.append(pc.sum(delta.column(WEIGHT)).as_py() or 0)
            row = self.pg.execute(_AFTER_STEP, {
                "lsn": format_lsn(end_lsn), "names": changed, "added": added, "lag": lag_ms, "changes": changes,
                "rate": self._rate_after(changes), "slot": self.slot}).fetchone()
        # The server's clock, like the source commit times (read just before COMMIT).
        self._result_commit_time = float(row[0]) if row else time.time()
        self.timings["write"] += time.perf_counter() - started

    def _after_commit(self, end_lsn: int, write: bool) -> None:
        assert self.repl is not None
        self.flow_lsn = end_lsn
        if write:
            self.pg_lsn = end_lsn
        self._pending_position = None
        self._last_progress_write = time.monotonic()
        self.repl.acknowledge(end_lsn)

    def _record_latencies(self, group: list[SourceTransaction]) -> None:
        assert self.pg is not None
        self.steps += 1
        committed = self._result_commit_time
        self.latencies_ms.extend(max(0.0, committed - (t.commit_time / 1e6 + _PG_EPOCH)) * 1000 for t in group)

    def _rate_after(self, changes: int) -> float:
        """Changes per second, smoothed over about five seconds."""
        now = time.monotonic()
        elapsed = max(now - self._rate_at, 1e-3)
        weight = min(1.0, elapsed / 5.0)
        self._rate = (1 - weight) * self._rate + weight * (changes / elapsed)
        self._rate_at = now
        return self._rate

    def _record_position(self) -> None:
        """Advance the position past transactions that touched no followed table (lets WAL go)."""
        assert self.pg is not None and self.flow is not None and self.repl is not None
        lsn = self._pending_position
        if lsn is None or lsn <= self.flow_lsn:
            self._pending_position = None
            return
        with self.pg.transaction():
            self.pg.execute("UPDATE freshview.progress SET lsn = %s, updated_at = now() WHERE slot = %s "
                            "AND lsn < %s", (format_lsn(lsn), self.slot, format_lsn(lsn)))
        self.flow.set_meta("lsn", lsn)
        self._after_commit(lsn, True)

    def _check_relations(self, group: list[SourceTransaction]) -> None:
        """A DDL change that breaks a followed table stops the views reading it (not the service)."""
        for txn in group:
            for table, rel in txn.relations.items():
                if not self._followed(table):
                    continue
                problem = _incompatible(rel, self.flow.source_schema(engine_name(table)))  # type: ignore[union-attr]
                if problem:
                    self._fail_table(table, f"freshview: {table} changed ({problem}); drop and re-create "
                                            "the view to follow the new definition")

    # ------------------------------------------------------------------ failures
    def _fail_table(self, table: str, error: str) -> None:
        """Stop every view that reads ``table`` and forget the table."""
        assert self.flow is not None
        readers = self.flow.readers(engine_name(table))
        self._mark_failed([qualified_from_engine(v) for v in readers], error)
        self._drop_unused_sources()

    def _mark_failed(self, names: list[str], error: str) -> None:
        """Views (and the views reading them) go to status failed; their tables stay as they were."""
        assert self.flow is not None and self.pg is not None
        doomed: list[str] = []
        todo = [engine_name(n) for n in names]
        while todo:
            view = todo.pop()
            if view in doomed:
                continue
            doomed.append(view)
            if view in self.flow.views:
                todo.extend(self.flow.readers(view))
        for view in reversed(self._flow_views_in_order()):
            if view in doomed:
                self.flow.drop_view(view)
        primary = {engine_name(n) for n in names}
        for view in doomed:
            name = qualified_from_engine(view)
            self.results.pop(name, None)
            message = error if view in primary else f"freshview: a view it reads failed: {error}"
            log.error("view %s failed: %s", name, message)
            self.pg.execute("UPDATE freshview.views SET status = 'failed', error = %s, updated_at = now() "
                            "WHERE name = %s", (message, name))

    # ------------------------------------------------------------------ requests
    def _serve_requests(self) -> None:
        assert self.pg is not None
        while not self._stop.is_set():
            request = control.next_request(self.pg)
            if request is None:
                return
            log.info("request %s: %s %s", request.id, request.action, request.name)
            try:
                if request.action == "create":
                    self._create(request.name, request.sql or "", request=request.id, reader=request.requested_by)
                else:
                    self._drop(request.name, request=request.id, requested_by=request.requested_by)
            except (FreshviewError, ChangeError, CatalogError) as exc:
                message = str(exc) if str(exc).startswith("freshview") else f"freshview: {exc}"
                with self.pg.transaction():
                    control.finish_request(self.pg, request.id, message)

    def _create(self, name: str, view_sql: str, *, replace: bool = False, request: int | None = None,
                reader: str | None = None) -> None:
        assert self.pg is not None and self.flow is not None
        name = qualify(name)
        view = engine_name(name)
        if not replace:
            existing = self.pg.execute("SELECT sql, status FROM freshview.views WHERE name = %s",
                                       (name,)).fetchone()
            if existing is not None:
                if existing[0] == view_sql and existing[1] == "active":
                    with self.pg.transaction():
                        control.finish_request(self.pg, request)  # type: ignore[arg-type]
                    return
                raise CatalogError(f"freshview: view {name} already exists (status {existing[1]}); "
                                   f"drop it first with CALL freshview.drop_view('{name}')")
            if self.pg.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None:
                raise CatalogError(f"freshview: a table named {name} already exists; choose another view name")
            with self.pg.transaction():
                self.pg.execute("INSERT INTO freshview.views (name, sql, status, owner) VALUES (%s, %s, 'creating', "
                                "%s) ON CONFLICT (name) DO NOTHING", (name, view_sql, reader))
        try:
            probe = _TableProbe(self.flow, self.pg)
            build_plan(view_sql, probe)  # SQL errors surface here, with positions, before any work
            if view in self.flow.views:
                self.flow.drop_view(view)
            started = time.perf_counter()
            self._follow({q: t for q, t in probe.tables.items() if not self._followed(q)})
            read = time.perf_counter()
            self.flow.register_view(view, view_sql)
            log.info("view %s: sources read in %.1f s, first computation %.1f s", name, read - started,
                     time.perf_counter() - read)
        except BaseException:
            if request is not None and not replace:
                self.pg.execute("DELETE FROM freshview.views WHERE name = %s AND status = 'creating'", (name,))
            self._drop_unused_sources()
            raise
        result = ResultTable(name, result_shape(self.flow.view_plan(view)))
        initial = self.flow.snapshot(view, weighted=True)
        try:
            with self.pg.transaction():
                if replace:
                    self.pg.execute(psql.SQL("DROP TABLE IF EXISTS {}").format(result.name))
                for statement in result.create_sql():
                    self.pg.execute(statement)
                if reader and reader != self.pg.info.user:  # whoever asked for the view may read it
                    self.pg.execute(psql.SQL("GRANT SELECT ON {} TO {}").format(result.name, psql.Identifier(reader)))
                result.apply(self.pg, initial)
                self.pg.execute(
                    "INSERT INTO freshview.views (name, sql, status, rows, last_lsn, owner) "
                    "VALUES (%s, %s, 'active', %s, %s, %s) "
                    "ON CONFLICT (name) DO UPDATE SET sql = EXCLUDED.sql, status = 'active', error = NULL, "
                    "rows = EXCLUDED.rows, last_lsn = EXCLUDED.last_lsn, updated_at = now(), "
                    "owner = COALESCE(EXCLUDED.owner, freshview.views.owner)",
                    (name, view_sql, pc.sum(initial.column(WEIGHT)).as_py() or 0, format_lsn(self.flow_lsn), reader))
                if request is not None:
                    control.finish_request(self.pg, request)
        except psycopg.Error as exc:
            self.flow.drop_view(view)
            self._drop_unused_sources()
            raise CatalogError(f"freshview: cannot create the result table {name}: {exc}".strip()) from None
        self.results[name] = result
        log.info("view %s created (%d rows)", name, initial.num_rows)

    def _drop(self, name: str, request: int | None = None, requested_by: str | None = None) -> None:
        assert self.pg is not None and self.flow is not None
        name = qualify(name)
        view = engine_name(name)
        known = self.pg.execute("SELECT owner FROM freshview.views WHERE name = %s", (name,)).fetchone()
        if known is None and view not in self.flow.views:
            raise CatalogError(f"freshview: no view named {name}")
        if request is not None:  # a user's request: only the view's creator or an administrator may drop it
            refusal = control.drop_refusal(name, control.drop_rights(self.pg, requested_by,
                                                                     known[0] if known else None))
            if refusal:
                raise CatalogError(refusal)
        if view in self.flow.views:
            readers = self.flow.readers(view)
            if readers:
                raise CatalogError(f"freshview: views {', '.join(qualified_from_engine(r) for r in readers)} "
                                   f"read {name}; drop them first")
            self.flow.drop_view(view)
        self.results.pop(name, None)
        with self.pg.transaction():
            self.pg.execute(psql.SQL("DROP TABLE IF EXISTS {}").format(identifier(name)))
            self.pg.execute("DELETE FROM freshview.views WHERE name = %s", (name,))
            if request is not None:
                control.finish_request(self.pg, request)
        self._drop_unused_sources()
        if self.metrics is not None:  # metrics hook
            self.metrics.forget_view(name)
        log.info("view %s dropped", name)

    # ------------------------------------------------------------------ following base tables
    def _follow(self, tables: dict[str, SourceTable]) -> None:
        """Start following base tables: publish them, then load them from a fresh exported snapshot."""
        if not tables:
            return
        assert self.pg is not None and self.flow is not None
        published = {qualified(s, t) for s, t in self.pg.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
            (self.publication,)).fetchall()}
        for table in tables:
            if table in published:
                continue
            try:
                self.pg.execute(psql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                    psql.Identifier(self.publication), identifier(table)))
            except psycopg.errors.InsufficientPrivilege:
                raise CatalogError(
                    f"freshview: cannot add {table} to publication {self.publication} (not its owner); "
                    f"as the table's owner run: ALTER PUBLICATION {self.publication} ADD TABLE {table};") from None
        with ReplicationConnection(self.dsn) as snap:
            info = snap.create_slot(f"{self.slot}_snap_{os.getpid()}", temporary=True)
            for table, source in tables.items():
                view_name = engine_name(table)
                self.flow.register_source(view_name, source.schema)
                total = self.pg.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                                        (table,)).fetchone()[0]
                estimate = int(total) if total and total > 0 else None

                def progress(done: int, table: str = table, finished: bool = False) -> None:
                    if self.repl is not None:
                        self.repl.send_status()  # keep the main stream alive through long snapshots
                    if self.snapshot_progress is not None:
                        self.snapshot_progress(table, done, estimate, finished)

                progress(0)
                loaded = 0
                for chunk in read_table(self.dsn, info.snapshot_name or "", table, source.schema,
                                        self.options.snapshot_chunk_rows, progress):
                    self.flow.tick(view_name, chunk)
                    loaded += chunk.num_rows
                progress(loaded, finished=True)
                self.follow_from[table] = info.consistent_point
                self.flow.set_meta("follow_from", self.follow_from)
                log.info("following %s from %s", table, format_lsn(info.consistent_point))

    def _drop_unused_sources(self) -> None:
        assert self.flow is not None
        changed = False
        for source in list(self.flow.sources):
            if not self.flow.readers(source):
                self.flow.drop_source(source)
                self.follow_from.pop(qualified_from_engine(source), None)
                changed = True
        if changed:
            self.flow.set_meta("follow_from", self.follow_from)

    # ------------------------------------------------------------------ status
    def _record_source_metrics(self) -> None:
        if self.metrics is not None and self.pg is not None:
            self.metrics.record_source(self.slot, self.pg_lsn, retained_wal_bytes(self.pg, self.slot))

    def _heartbeat(self) -> None:
        assert self.pg is not None
        self.pg.execute("UPDATE freshview.progress SET heartbeat_at = now(), status = %s WHERE slot = %s",
                        (self.status, self.slot))

    def _set_status(self, status: str) -> None:
        assert self.pg is not None
        self.status = status
        self._heartbeat()


class _TableProbe:
    """Catalog for a first compile: engine relations, else the database's tables (recorded)."""

    def __init__(self, flow: IncrementalFlow, conn: psycopg.Connection) -> None:
        self.flow = flow
        self.conn = conn
        self.tables: dict[str, SourceTable] = {}

    def relation_columns(self, name: str):
        found = self.flow.relation_columns(name)
        if found is not None:
            return found
        table = qualified_from_engine(name)  # the front end names tables as the engine does
        if table not in self.tables:
            try:
                self.tables[table] = describe_table(self.conn, table)
            except CatalogError as exc:
                if "does not exist" in str(exc):
                    return None
                raise
        schema = self.tables[table].schema
        return tuple((c.name, c.type) for c in schema.columns), False


# After a step's result writes: the changed views get their row count and lag, every active view
# the position its table now holds, the service its position and counters; returns the server's clock.
_AFTER_STEP = (
    "WITH views AS (UPDATE freshview.views SET last_lsn = CASE WHEN status = 'active' THEN %(lsn)s::pg_lsn "
    "ELSE last_lsn END, rows = rows + COALESCE((%(added)s::bigint[])[array_position(%(names)s::text[], name)], 0), "
    "lag_ms = CASE WHEN name = ANY(%(names)s::text[]) THEN %(lag)s ELSE lag_ms END, "
    "updated_at = CASE WHEN name = ANY(%(names)s::text[]) THEN now() ELSE updated_at END "
    "WHERE status = 'active' OR name = ANY(%(names)s::text[])) "
    "UPDATE freshview.progress SET lsn = %(lsn)s, steps = steps + 1, changes = changes + %(changes)s, "
    "lag_ms = %(lag)s, changes_per_s = %(rate)s, status = 'running', heartbeat_at = now(), updated_at = now() "
    "WHERE slot = %(slot)s RETURNING extract(epoch FROM clock_timestamp())")


def _incompatible(rel: p.Relation, schema: TableSchema) -> str | None:
    """What a new table definition breaks, if anything (added columns are harmless)."""
    columns = {c.name: c for c in rel.columns}
    for col in schema.columns:
        now = columns.get(col.name)
        if now is None:
            return f"column {col.name} was dropped or renamed"
        try:
            current = sql_type(now.type_oid, now.type_modifier)
        except UnsupportedTypeError:
            return f"column {col.name} now has an unsupported type"
        if current != col.type:
            return f"column {col.name} changed type from {col.type} to {current}"
    return None


def _lsn(value: Any) -> int:
    return 0 if value is None else parse_lsn(str(value))
