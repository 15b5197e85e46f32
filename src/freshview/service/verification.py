"""A ``verify_view`` done beside the loop: a worker with its own connections (the decisions are ``verify``'s).

The loop's side (``Core``, between and after steps): ``record`` every written
step's changes of the job's views from the moment the verification exists;
end a step at ``waiting()``'s position once the worker knows it; ``deliver``
once the stream has been read past that position; take ``outcome`` once set.
The worker's side: open a snapshot (``Source.snapshot``), publish its
position, wait for the delivery, let the database compare
(``Snapshot.compare``, with ``verify.window_delta`` as the change since the
result tables' position), settle the tolerance, and word the outcome; a
``verify.Retry`` starts over with a new snapshot (at most ``ATTEMPTS``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Mapping

import pyarrow as pa

from freshview.connectors.base import Connector, ResultSpec
from freshview.errors import CatalogError
from freshview.flow import TwoPhaseFlow
from freshview.service import verify
from freshview.service.names import Names
from freshview.sql.rename import reading_as

log = logging.getLogger("freshview.service")

ATTEMPTS = 5  # snapshots tried before giving up (a step straddled the snapshot's position)
DELIVERY_S = 300.0  # how long the worker waits for the loop to pass its snapshot's position (a loop behind,
# stepping a backlog on Spark, may take minutes; the snapshot only holds back vacuum meanwhile)
LIMIT = 200  # differing rows fetched (``settle`` pairs them; a few are shown)


def job_for(flow: TwoPhaseFlow, names: Names, definition: Callable[[str], tuple[str, str] | None], name: str,
            request: int | None, dialect: str) -> verify.Job:
    """What verifying ``name`` (qualified) needs; ``CatalogError`` when it cannot be verified (unknown, not
    active, time-based).  ``definition``: a view's (sql, status) in the control schema.

    A freshview view it reads is read through its definition (a WITH query, ``sql.rename.reading_as``),
    down to the tables: its result table is at the results' position, not the snapshot's, and whether it
    is right is its own verification's question."""
    engine = names.engine(name)
    view = definition(name)
    if view is None or engine not in flow.views:
        raise CatalogError(f"freshview: no view named {name}")
    sql, status = view
    if status != "active":
        raise CatalogError(f"freshview: view {name} is {status}, not active: there is nothing to verify")
    order: list[str] = []  # the views it reads, each after those it reads

    def visit(view_name: str) -> None:
        refusal = verify.refusal(names.qualified(view_name), flow.view_plan(view_name))
        if refusal:
            raise CatalogError(refusal)
        for inner in verify.views_read(flow.view_plan(view_name)):
            if inner in flow.views and inner not in order:
                visit(inner)
                order.append(inner)

    visit(engine)
    ctes = {inner: f"fv_verify_{i}" for i, inner in enumerate(order)}

    def text(view_name: str, view_sql: str) -> str:
        reads = {r: ctes[r] for r in verify.views_read(flow.view_plan(view_name)) if r in ctes}
        view_sql = view_sql.strip().rstrip(";").strip()
        return reading_as(view_sql, dialect, names.default, reads) if reads else view_sql

    withs = []
    for inner in order:
        found = definition(names.qualified(inner))
        if found is None:
            raise CatalogError(f"freshview: view {names.qualified(inner)}, which {name} reads, is gone")
        withs.append(f"{ctes[inner]} AS ({text(inner, found[0])}\n)")
    sql = text(engine, sql)
    if withs:
        sql = f"WITH {', '.join(withs)} SELECT * FROM ({sql}\n) AS fv_verify"
    plan = flow.view_plan(engine)
    return verify.Job(name, sql, ResultSpec.of(name, plan), request)


class _Again(Exception):
    """``verify.Retry`` raised through ``Snapshot.compare``'s change callback."""


class Verification:
    """One job (``verify.Job``) in a worker thread (module docstring)."""

    def __init__(self, job: verify.Job, connect: Callable[[], Connector]) -> None:
        self.job = job
        self.connect = connect
        self.records: list[verify.Recorded] = []  # appended by the loop
        self.snapshot_at: Any = None  # the worker's snapshot's position, while it waits for the delivery
        self.outcome: tuple[str, str] | None = None  # (verify.EQUAL | DIFFERENT | ERROR, what it says)
        self.error: BaseException | None = None  # the worker's fault (a lost connection)
        self._delivered = threading.Event()
        self._delivered_at: Any = None
        self._steps: tuple[verify.Recorded, ...] = ()
        self._cancelled = threading.Event()
        self.plan: Any = None  # the view's plan when it started (the loop's: a rebuilt view is verified again)
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"freshview verify {job.name}")

    # ------------------------------------------------------------------ the loop's side
    def start(self) -> None:
        self.thread.start()

    def record(self, first: Any, last: Any, outputs: Mapping[str, pa.Table]) -> None:
        """A written step (its first and last transaction's positions) and its changes, by qualified name."""
        self.records.append(verify.Recorded(first, last, {v: outputs[v] for v in (self.job.name,) if v in outputs}))

    def waiting(self) -> Any:
        """The snapshot's position while the worker waits for the stream to pass it, else None."""
        at = self.snapshot_at
        return None if at is None or at is self._delivered_at else at

    def deliver(self, at: Any) -> None:
        """The loop has stepped every transaction at or before ``at`` (``waiting()``'s)."""
        self._steps = tuple(self.records)
        self._delivered_at = at
        self._delivered.set()

    @property
    def finished(self) -> bool:
        return self.outcome is not None or self.error is not None

    def cancel(self) -> None:
        self._cancelled.set()
        self._delivered.set()

    # ------------------------------------------------------------------ the worker
    def _run(self) -> None:
        connector = None
        try:
            connector = self.connect()
            self.outcome = self._attempts(connector)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, which decides
            self.error = exc
        finally:
            if connector is not None:
                for close in (connector.source.close, connector.control.close):
                    try:
                        close()
                    except Exception:  # noqa: BLE001 - the connection may be dead already
                        pass

    def _attempts(self, connector: Connector) -> tuple[str, str]:
        job, reason = self.job, ""
        columns = [name for name, _ in job.spec.columns]
        for attempt in range(ATTEMPTS):
            self.snapshot_at = None
            self._delivered.clear()
            with connector.source.snapshot() as snapshot:
                at = self.snapshot_at = snapshot.position
                if not self._delivered.wait(DELIVERY_S) or self._cancelled.is_set():
                    if self._cancelled.is_set():
                        return verify.ERROR, "freshview: the verification was interrupted"
                    return verify.ERROR, (f"freshview: could not verify view {job.name}: the change stream did not "
                                          f"pass the snapshot's position {at.to_text()} within {DELIVERY_S:.0f} s")

                def change(results_at: Any) -> pa.Table | None:
                    found = verify.window_delta(self._steps, results_at, at, job)
                    if isinstance(found, verify.Retry):
                        raise _Again(found.reason)
                    return found

                try:
                    comparison = snapshot.compare(job.spec, job.sql, change, LIMIT)
                except _Again as again:
                    reason = str(again)
                    log.info("verifying %s again (attempt %d): %s", job.name, attempt + 2, reason)
                    continue
            missing, extra = verify.settle(comparison.differences, verify.approximate(job.spec))
            text = verify.report(job.name, at.to_text(), missing, extra, columns)
            return (verify.EQUAL, verify.equal_text(at.to_text())) if text is None else (verify.DIFFERENT, text)
        return verify.ERROR, (f"freshview: could not verify view {job.name} exactly in {ATTEMPTS} attempts "
                              f"(the last: {reason}); try again")
