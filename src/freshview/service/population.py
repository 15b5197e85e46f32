"""A population: a new view computed beside the service's loop, never instead of it.

``CALL freshview.create_view`` used to be served inside the loop: while a view's tables were read and
its first result computed, every other view froze and nothing was acknowledged on the stream.  Now the
loop hands the work to a ``Population`` (``ViewCatalog.populate`` plans it) and goes on stepping:

1. **reading** (a worker thread, on its own database connections and its own scratch engine under
   ``<state dir>/populating/``): the tables the engine follows already are copied from their *pinned*
   copies in the engine's state (``IncrementalFlow.pin_source``: the committed runs when the population
   started, immutable, so steps committing meanwhile do not disturb them: their run files linked, no row
   copied, ``loading.take``); the tables followed anew are
   read from a new snapshot (``Source.snapshot``), which pins them at its position.  Both through
   ``loading.load``.
2. **computing**: the view's first result in the scratch engine (``loading.compute_first``); an alter
   starts from the state its new circuit shares with the old one, pinned with the copies
   (``Plan.reusing``, ``runtime.reuse``), and a widening's views from their own.
3. **catching up**: the loop offers the population every transaction it processes (``offer``); the
   worker applies, in steps of its own, the changes to its tables committed after their pins
   (``populating.to_apply``), again and again while they are many.
4. **ready**: with only a few changes left, the worker settles its store (every run in a file) and
   waits (back to catching up if many more come); between two of its steps the loop takes the
   scratch engine, applies what is left itself (``finish``) and joins the view (``ViewCatalog.join``):
   the engine adopts the scratch engine's state for it (``IncrementalFlow.adopt_view``, one
   transaction, the run files linked: O(files)), then
   its result table is created, filled and made ``active`` at the loop's position in one database
   transaction, so no step is split and no reader sees it half filled.

Several populations run at once (the loop's ``Core.populations``; ``populating.must_wait`` says which
wait), rebuilds after a lost slot or lost state among them (``Plan.rebuild``).  Progress (``progress``)
is read by the loop, which shows it in ``freshview.views`` and the metrics.  A
failure ends the population with the error (``error``); a fault of the service (a lost connection, a
restart, a kill) abandons it (``cancel``) and the request is retried from the start (``requests``).
Which changes the population takes and when it may join are ``populating``'s pure decisions.
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from freshview.connectors.base import Connector, ResultSpec, SourceTable, Transaction
from freshview.flow import IncrementalFlow
from freshview.runtime.reuse import PinnedCircuit
from freshview.runtime.state import adopt
from freshview.runtime.state.pin import Pinned
from freshview.schema import TableSchema
from freshview.service import loading, populating
from freshview.service.changes import engine_changes
from freshview.service.populating import Phase, Progress
from freshview.service.widening import Widen

log = logging.getLogger("freshview.service")

CATCH_UP_ROWS = 100_000  # row changes per catch-up step (whole transactions)
CANCEL_WAIT_S = 5.0  # how long a cancelled population's worker is waited for


@dataclass(frozen=True)
class Followed:
    """A table the engine follows already: its copy as pinned, at the position ``pin``."""

    engine: str  # the source's engine name
    schema: TableSchema
    pinned: Pinned
    pin: Any  # Position | None: the copy holds the transactions up to here
    since: Any = None  # the snapshot the engine's copy was loaded from then (``populating.stale``)


@dataclass(frozen=True)
class New:
    """A table followed anew, read from the population's snapshot."""

    engine: str
    described: SourceTable
    kept: TableSchema  # the columns the engine keeps (``following.kept_columns``)


@dataclass(frozen=True)
class Plan:
    """What to populate (``ViewCatalog.populate`` decides it)."""

    name: str  # the view, schema-qualified
    view: str  # its engine name
    view_sql: str  # as the user wrote it
    engine_sql: str  # as the engine compiles it
    request: int | None
    reader: str | None
    blocking: bool  # a CALL waits for it (a failure leaves no trace); else a failure shows in freshview.views
    followed: Mapping[str, Followed] = field(default_factory=dict)  # qualified table -> ...
    new: Mapping[str, New] = field(default_factory=dict)
    rebuild: bool = False  # a view of freshview.views rebuilt (status ``rebuilding``), not a user's request
    replaces: str | None = None  # alter_view: the SQL of the view it replaces (which goes on until it joins)
    widen: Widen | None = None  # followed tables it reads again, wider, and their views computed again (widening)
    stopped: str | None = None  # alter_view of a view that stopped: its status (failed | sink error); no old view
    # engine view -> a circuit pinned with the copies (an alter's old view, a widening's views): what it
    # shares with the view computed here is taken from its state, not computed again (``runtime.reuse``)
    reusing: Mapping[str, PinnedCircuit] = field(default_factory=dict)

    @property
    def action(self) -> str:
        return "alter" if self.replaces is not None else "create"

    @property
    def tables(self) -> frozenset[str]:
        return frozenset((*self.followed, *self.new))

    def engine_name(self, table: str) -> str:
        found = self.followed.get(table) or self.new[table]
        return found.engine


class Population:
    """One view being populated (module docstring).  ``start`` runs the worker; the other methods are the
    loop's, called between its steps."""

    def __init__(self, plan: Plan, connect: Callable[[], Connector], scratch_flow: Callable[[Path], IncrementalFlow],
                 directory: Path, chunk_rows: int,
                 snapshot_progress: Callable[[str, int, int | None, bool], None] | None = None) -> None:
        self.plan = plan
        self.snapshot_progress = snapshot_progress  # (table, rows done, estimate, finished): the service's hook
        self.connect = connect
        self.scratch_flow = scratch_flow
        self.directory = directory
        self.chunk_rows = chunk_rows
        self.started = time.monotonic()
        self.phase = Phase.READING
        self.error: BaseException | None = None
        self.flow: IncrementalFlow | None = None
        self.connector: Connector | None = None
        # table -> the position after which its changes are applied (new tables: once the snapshot is taken)
        self.pins: dict[str, Any] = {t: f.pin for t, f in plan.followed.items()}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # offers, the loop's join, a cancel: the waiting worker
        self._joining = False  # the loop takes the scratch engine (``finish``): the worker ends
        self._queue: list[Transaction] = []  # offered, not applied yet
        self._queued_rows = 0
        self._seen: Any = None  # the last position offered
        self._read_done = 0  # rows loaded from tables finished
        self._reading = 0  # rows loaded of the table being read
        self._total: int | None = sum(f.pinned.rows for f in plan.followed.values()) if plan.followed else None
        self._cancelled = threading.Event()
        # the result table written aside by the worker (``_prefill``) and its rows; the join renames it into place
        self.prefilled: tuple[str, pa.Table] | None = None
        self._joined = False
        self._thread = threading.Thread(target=self._run, name=f"freshview population {plan.name}", daemon=True)

    # ------------------------------------------------------------------ the loop's side
    def start(self) -> None:
        self._thread.start()

    def offer(self, transactions: Sequence[Transaction]) -> None:
        """Transactions the loop processed (in order, whole): the population keeps its tables' changes."""
        taken, self._seen = populating.offered(transactions, self.plan.tables, self._seen)
        if taken:
            with self._lock:
                self._queue.extend(taken)
                self._queued_rows += sum(t.size for t in taken)
                self._changed.notify_all()

    def progress(self) -> Progress:
        with self._lock:
            return Progress(self.phase, self._read_done + self._reading, self._total,
                            time.monotonic() - self.started, self._queued_rows)

    def may_join(self) -> bool:
        return populating.may_join(self.phase, self._queued_rows)

    def finish(self) -> IncrementalFlow | None:
        """(Between two steps of the loop, ``may_join`` true.)  Take the scratch engine from the waiting
        worker, apply what is left, and return it caught up to the loop's position; None if the worker went
        back to catching up meanwhile (more changes arrived)."""
        with self._lock:
            if not self.may_join():
                return None
            self._joining = True
            self._changed.notify_all()
        self._thread.join()
        assert self.flow is not None
        with self._lock:
            left, self._queue, self._queued_rows = self._queue, [], 0
            self._joined = True  # (what it wrote aside is the join's now)
        self._apply(left)
        return self.flow

    def cancel(self, wait_s: float = CANCEL_WAIT_S) -> None:
        """Stop the worker (it stops between two of its chunks or steps) and drop everything it made; the
        worker is waited for up to ``wait_s`` (a drop of the view waits for nothing)."""
        self._cancelled.set()
        with self._lock:
            self._changed.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(wait_s)  # a first computation cannot be interrupted: it is left to end
        if self._thread.is_alive():
            log.info("the population of %s is left to end in the background", self.plan.name)
            return  # (its engine and directory are its own; the next population of the view has another)
        self.close()

    def close(self) -> None:
        with self._lock:  # (the loop's cancel and the worker's end may both close it)
            flow, self.flow = self.flow, None
            connector, self.connector = self.connector, None
            aside = self.prefilled[0] if self.prefilled is not None and not self._joined else None
        if aside is not None and connector is not None:  # (written aside, never joined: not left behind)
            connector.results.drop_prefill(aside)
        for what, close in (("the population's engine", flow and flow.close),
                            ("the population's source", connector and connector.source.close),
                            ("the population's connection", connector and connector.control.close)):
            if close:
                try:
                    close()
                except Exception as exc:  # noqa: BLE001 - cleanup: the population's own outcome matters
                    log.debug("could not close %s cleanly: %s", what, exc)
        shutil.rmtree(self.directory, ignore_errors=True)

    # ------------------------------------------------------------------ the worker
    def _run(self) -> None:
        try:
            self._populate()
        except BaseException as exc:  # noqa: BLE001 - the loop reports it (``error``)
            if not self._cancelled.is_set():
                self.error = exc
                log.info("population of %s failed", self.plan.name, exc_info=True)
            self._set_phase(Phase.FAILED)
        if self._cancelled.is_set():  # nobody will join it: what it made goes
            self.close()

    def _populate(self) -> None:
        plan = self.plan
        self.connector = self.connect()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        flow = self.flow = self.scratch_flow(self.directory)
        for followed in plan.followed.values():
            flow.register_source(followed.engine, followed.schema)
            self._loaded(loading.take(flow, followed.engine, followed.pinned))
        if plan.new:
            self._read_new(flow)
        self._set_phase(Phase.COMPUTING)
        started = time.perf_counter()
        for reader in plan.widen.readers if plan.widen is not None else ():  # (over the wider copies)
            loading.compute_first(flow, reader.view, reader.engine_sql, plan.reusing.get(reader.view))
        loading.compute_first(flow, plan.view, plan.engine_sql, plan.reusing.get(plan.view))
        log.info("view %s: first computation %.1f s (beside the stream)", plan.name, time.perf_counter() - started)
        if plan.replaces is None and not self._cancelled.is_set():  # (an alter writes into the table it keeps,
            # by difference: ``Altering._swap``)
            self._prefill(flow)
        self._set_phase(Phase.CATCHING_UP)
        settled = False
        while not self._cancelled.is_set():
            if not settled and self._queued_rows <= populating.JOIN_ROWS:
                adopt.settle(flow.store)  # its runs in files: the join links them (``runtime.state.adopt``)
                settled = True
            with self._lock:
                if settled and self._queued_rows <= populating.JOIN_ROWS:
                    self.phase = Phase.READY  # the loop applies the rest and joins it ...
                    self._changed.wait_for(lambda: self._joining or self._cancelled.is_set() or
                                           self._queued_rows > populating.JOIN_ROWS)
                    if self._joining or self._cancelled.is_set():
                        return
                    self.phase = Phase.CATCHING_UP  # ... unless more changes came first
                batch, self._queue, self._queued_rows = self._queue, [], 0
            self._apply(batch)
            settled = settled and not batch

    def _prefill(self, flow: IncrementalFlow) -> None:
        """The view's rows written aside now, beside the loop (``ResultSink.prefill``): the join then writes
        only what changed since.  If it cannot be, the join writes them all, as before."""
        assert self.connector is not None
        started = time.perf_counter()
        rows = flow.snapshot(self.plan.view, weighted=True)
        try:
            name = self.connector.results.prefill(ResultSpec.of(self.plan.name, flow.view_plan(self.plan.view)),
                                                  rows, self.plan.request)
        except Exception as exc:  # noqa: BLE001 - the join fills the table instead
            log.warning("view %s: its rows could not be written aside (%s); the join writes them", self.plan.name,
                        exc)
            return
        if name is not None:
            with self._lock:
                self.prefilled = (name, rows)
            log.info("view %s: %d rows written aside in %.1f s (beside the stream)", self.plan.name, rows.num_rows,
                     time.perf_counter() - started)

    def _read_new(self, flow: IncrementalFlow) -> None:
        assert self.connector is not None
        with self.connector.source.snapshot() as snap:
            for table, new in self.plan.new.items():
                estimate = snap.estimate(table)
                if estimate is not None:
                    with self._lock:
                        self._total = (self._total or 0) + estimate
                flow.register_source(new.engine, new.kept)

                def progress(done: int, table: str = table, estimate: int | None = estimate,
                             finished: bool = False) -> None:
                    self._reading = done
                    if self.snapshot_progress is not None:
                        self.snapshot_progress(table, done, estimate, finished)

                progress(0)
                chunks = snap.read(new.described, self.chunk_rows, progress, new.kept.names)
                loaded = loading.load(flow, new.engine, self._checked(chunks))
                progress(loaded, finished=True)
                self._loaded(loaded)
            with self._lock:
                self.pins.update(dict.fromkeys(self.plan.new, snap.position))
        log.info("view %s: new tables read from the snapshot at %s", self.plan.name, snap.position)

    def _checked(self, chunks: Any) -> Any:
        for chunk in chunks:
            if self._cancelled.is_set():
                raise InterruptedError("the population was cancelled")
            yield chunk

    def _loaded(self, rows: int) -> None:
        with self._lock:
            self._read_done += rows
            self._reading = 0

    def _set_phase(self, phase: Phase) -> None:
        with self._lock:
            self.phase = phase

    def _apply(self, transactions: Sequence[Transaction]) -> None:
        """Catch-up steps in the scratch engine: the changes committed after their tables' pins."""
        flow, connector, plan = self.flow, self.connector, self.plan
        assert flow is not None and connector is not None
        with self._lock:
            pins = dict(self.pins)
        for batch in populating.batches(populating.to_apply(transactions, pins), CATCH_UP_ROWS):
            schemas = {t: flow.source_schema(plan.engine_name(t)) for t in plan.tables}
            changes = engine_changes(connector.source.deltas, batch, schemas, plan.engine_name,
                                     lambda table, keys: flow.source_rows(plan.engine_name(table), keys))
            if changes:
                flow.tick(changes)


class Responsive:
    """While populations run, the interpreter hands the GIL over every ``SWITCH_S`` instead of every 5 ms
    (``sys.setswitchinterval``).  A worker computing in Python holds the GIL; each time the loop comes
    back from a blocking call (a read of the stream, a statement) it waits up to the switch interval to
    get it again, so a step of a few dozen such calls took ~0.4 s instead of ~15 ms beside a busy thread,
    and ~45-80 ms with 0.5 ms (``benchmarks/gil_switch.py``; ``population_lag.py`` measures a probe view's
    lag).  ``update`` says
    whether populations run; the interval is put back once none does."""

    SWITCH_S = 0.0005

    def __init__(self) -> None:
        self._saved: float | None = None

    def update(self, busy: bool) -> None:
        if busy and self._saved is None:
            self._saved = sys.getswitchinterval()
            sys.setswitchinterval(min(self._saved, self.SWITCH_S))
        elif not busy and self._saved is not None:
            sys.setswitchinterval(self._saved)
            self._saved = None
