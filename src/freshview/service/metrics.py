"""Prometheus metrics of one service: what ``freshview run --metrics-port`` exposes.

Definitions and update rules live here, fed by plain values (a step's
``StepSummary``, a lag in seconds, a slot's position and retained WAL), so
they are tested without a database; the service only calls
``record_step`` / ``record_source`` / ``forget_view`` and the CLI ``serve``.
Each ``ServiceMetrics`` has its own ``CollectorRegistry`` (no global state).

Metrics (``view`` labels are the result tables' names, ``executor`` is
``local`` or ``spark``, ``source`` the replication slot):

* ``freshview_view_lag_seconds{view}``: source commit to result commit, at
  the last step that changed the view;
* ``freshview_view_steps_total{view}``, ``freshview_view_rows_in_total{view}``,
  ``freshview_view_rows_out_total{view}``: steps that ran the view, the
  source/input delta rows it read and the result delta rows it wrote;
* ``freshview_view_step_seconds{executor}``: histogram of one view's step time;
* ``freshview_steps_total``, ``freshview_rows_in_total``: engine steps and the
  (consolidated) source delta rows they took;
* ``freshview_source_position_bytes{source}``: the LSN whose effects are in the
  result tables, as a byte position;
* ``freshview_source_retained_wal_bytes{source}``: WAL the slot keeps on the
  server (``pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)``);
* ``freshview_source_connected``: 1 while the service is connected to the
  database, 0 while it reconnects (``service.outage``);
* ``freshview_state_disk_full``: 1 while stepping is paused because the state
  directory is full;
* ``freshview_reconnects_total``: reconnections after a lost connection;
* ``freshview_faults_total{kind}``: faults ridden out, by kind (``connection``,
  ``disk_full``, ``position_lost``);
* ``freshview_population_rows_read{view}``, ``freshview_population_rows_estimated{view}``,
  ``freshview_population_seconds{view}``, ``freshview_population_phase{view,phase}`` (1 for the
  current phase): a view being populated beside the stream (``service.population``); gone once it
  joins or fails;
* ``freshview_view_verified_total{view,result}``: verifications of the view against its SQL
  (``verify_view``, ``--verify-every``; ``result``: equal, different, error), and
  ``freshview_view_verified_timestamp_seconds{view}``: when the last one ended (Unix time);
* ``freshview_view_last_step_timestamp_seconds{view}``: when a step last ran the view.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ViewStepLike(Protocol):
    rows_in: int
    rows_out: int
    duration_ms: float
    skipped: bool
    executor: str | None


class StepLike(Protocol):
    rows_in: int
    views: Mapping[str, Any]  # engine view name -> ViewStepLike


class ServiceMetrics:
    """The service's metrics in a registry of their own; ``view_name`` maps engine to database names (the
    service sets it to its connector's ``Names.qualified`` when it starts)."""

    def __init__(self, registry: CollectorRegistry | None = None,
                 view_name: Callable[[str], str] = str) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.view_name = view_name
        r = self.registry
        self.lag = Gauge("freshview_view_lag_seconds", "Source commit to result commit at the view's last change",
                         ["view"], registry=r)
        self.view_steps = Counter("freshview_view_steps", "Engine steps that ran the view", ["view"], registry=r)
        self.view_rows_in = Counter("freshview_view_rows_in", "Delta rows the view read", ["view"], registry=r)
        self.view_rows_out = Counter("freshview_view_rows_out", "Delta rows the view wrote to its result",
                                     ["view"], registry=r)
        self.step_seconds = Histogram("freshview_view_step_seconds", "Time of one view's step, by executor",
                                      ["executor"], buckets=STEP_BUCKETS, registry=r)
        self.steps = Counter("freshview_steps", "Engine steps", registry=r)
        self.rows_in = Counter("freshview_rows_in", "Source delta rows the engine steps took", registry=r)
        self.position = Gauge("freshview_source_position_bytes",
                              "LSN whose effects the result tables hold, as a byte position", ["source"], registry=r)
        self.retained_wal = Gauge("freshview_source_retained_wal_bytes",
                                  "WAL the replication slot keeps on the server", ["source"], registry=r)
        self.connected = Gauge("freshview_source_connected",
                               "1 while the service is connected to the database, 0 while it reconnects",
                               registry=r)
        self.disk_full = Gauge("freshview_state_disk_full",
                               "1 while stepping is paused because the state directory is full", registry=r)
        self.reconnects = Counter("freshview_reconnects", "Reconnections after a lost connection", registry=r)
        self.faults = Counter("freshview_faults", "Faults ridden out, by kind", ["kind"], registry=r)
        self.population_rows = Gauge("freshview_population_rows_read", "Rows a populating view has read",
                                     ["view"], registry=r)
        self.population_total = Gauge("freshview_population_rows_estimated",
                                      "Estimated rows a populating view reads", ["view"], registry=r)
        self.population_seconds = Gauge("freshview_population_seconds", "Seconds since the population started",
                                        ["view"], registry=r)
        self.view_last_step = Gauge("freshview_view_last_step_timestamp_seconds", "When a step last ran the view "
                                    "(Unix time)", ["view"], registry=r)
        self.verified = Counter("freshview_view_verified", "Verifications of the view against its SQL, by result",
                                ["view", "result"], registry=r)
        self.verified_at = Gauge("freshview_view_verified_timestamp_seconds", "When the view's last verification "
                                 "ended (Unix time)", ["view"], registry=r)
        self.population_phase = Gauge("freshview_population_phase", "1 for the phase a populating view is in",
                                      ["view", "phase"], registry=r)
        self._phases: dict[str, str] = {}

    def record_verification(self, view: str, result: str) -> None:
        """A verification's outcome (``service.verify``: equal | different | error; ``view``: the database name)."""
        self.verified.labels(view, result).inc()
        self.verified_at.labels(view).set(time.time())

    def record_step(self, summary: StepLike, lag_s: float | None = None) -> None:
        """One engine step: counters for every view that ran, the lag for those whose result changed."""
        self.steps.inc()
        self.rows_in.inc(max(0, summary.rows_in))
        for engine_view, step in summary.views.items():
            if step.skipped:
                continue
            view = self.view_name(engine_view)
            self.view_steps.labels(view).inc()
            self.view_last_step.labels(view).set(time.time())
            self.view_rows_in.labels(view).inc(max(0, step.rows_in))
            self.view_rows_out.labels(view).inc(max(0, step.rows_out))
            if step.executor:
                self.step_seconds.labels(step.executor).observe(max(0.0, step.duration_ms) / 1000)
            if lag_s is not None and step.rows_out:
                self.lag.labels(view).set(max(0.0, lag_s))

    def record_source(self, source: str, position: int | None, retained_wal_bytes: int | None) -> None:
        if position is not None:
            self.position.labels(source).set(position)
        if retained_wal_bytes is not None:
            self.retained_wal.labels(source).set(retained_wal_bytes)

    def record_health(self, connected: bool, disk_full: bool, reconnected: bool = False) -> None:
        """Where the service stands (``outage.Health``); ``reconnected``: it just came back."""
        self.connected.set(1 if connected else 0)
        self.disk_full.set(1 if disk_full else 0)
        if reconnected:
            self.reconnects.inc()

    def record_fault(self, kind: str) -> None:
        self.faults.labels(kind).inc()

    def record_population(self, view: str, progress: Any) -> None:
        """A populating view's progress (``populating.Progress``; ``view`` is the database name)."""
        self.population_rows.labels(view).set(progress.rows_read)
        if progress.rows_total is not None:
            self.population_total.labels(view).set(progress.rows_total)
        self.population_seconds.labels(view).set(progress.elapsed_s)
        phase = progress.phase.value
        before = self._phases.get(view)
        if before is not None and before != phase:
            self.population_phase.labels(view, before).set(0)
        self.population_phase.labels(view, phase).set(1)
        self._phases[view] = phase

    def forget_population(self, view: str) -> None:
        for metric in (self.population_rows, self.population_total, self.population_seconds):
            try:
                metric.remove(view)
            except KeyError:
                pass
        phase = self._phases.pop(view, None)
        if phase is not None:
            self.population_phase.remove(view, phase)

    def forget_view(self, view: str) -> None:
        """A dropped view's series go away (``view`` is the database name)."""
        for metric in (self.lag, self.view_steps, self.view_rows_in, self.view_rows_out, self.verified_at,
                       self.view_last_step):
            try:
                metric.remove(view)
            except KeyError:
                pass

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        """Serve ``/metrics`` on ``addr:port`` from a daemon thread; returns the server (``shutdown()`` stops it)."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server
