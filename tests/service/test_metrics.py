"""service.metrics: update rules from plain step values, one registry per instance, the HTTP endpoint."""

from __future__ import annotations

import urllib.request

from freshview.connectors.postgres.identifiers import PostgresNames
from freshview.flow.flow import StepSummary, ViewStep
from freshview.service.metrics import ServiceMetrics
from freshview.service.names import Names


QUALIFIED = Names("public", PostgresNames()).qualified  # engine -> database names, as the service sets it


def value(m: ServiceMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def summary(**views: ViewStep) -> StepSummary:
    return StepSummary(step=1, rows_in=7, rows_out=sum(v.rows_out for v in views.values()), duration_ms=12.0,
                       views=dict(views))


def test_a_step_counts_per_view_and_observes_time_by_executor():
    m = ServiceMetrics(view_name=QUALIFIED)
    m.record_step(summary(totals=ViewStep(rows_out=3, duration_ms=20.0, executor="local", rows_in=5),
                          **{"sales.big": ViewStep(rows_out=0, duration_ms=1500.0, executor="spark", rows_in=2),
                             "idle": ViewStep(skipped=True)}), lag_s=0.25)
    m.record_step(summary(totals=ViewStep(rows_out=1, duration_ms=4.0, executor="local", rows_in=1)), lag_s=0.5)
    assert value(m, "freshview_steps_total") == 2
    assert value(m, "freshview_rows_in_total") == 14
    assert value(m, "freshview_view_steps_total", view="public.totals") == 2  # engine names -> database names
    assert value(m, "freshview_view_rows_in_total", view="public.totals") == 6
    assert value(m, "freshview_view_rows_out_total", view="public.totals") == 4
    assert value(m, "freshview_view_steps_total", view="sales.big") == 1
    assert value(m, "freshview_view_steps_total", view="public.idle") is None  # skipped views are not counted
    assert value(m, "freshview_view_lag_seconds", view="public.totals") == 0.5
    assert value(m, "freshview_view_lag_seconds", view="sales.big") is None  # its result did not change
    assert value(m, "freshview_view_step_seconds_count", executor="local") == 2
    assert value(m, "freshview_view_step_seconds_sum", executor="local") == 0.024
    assert value(m, "freshview_view_step_seconds_count", executor="spark") == 1
    assert value(m, "freshview_view_step_seconds_bucket", executor="spark", le="1.0") == 0
    assert value(m, "freshview_view_step_seconds_bucket", executor="spark", le="2.5") == 1


def test_a_replayed_step_has_no_lag_and_a_dropped_view_loses_its_series():
    m = ServiceMetrics(view_name=QUALIFIED)
    m.record_step(summary(v=ViewStep(rows_out=2, duration_ms=1.0, executor="local", rows_in=2)), lag_s=None)
    assert value(m, "freshview_view_lag_seconds", view="public.v") is None
    assert value(m, "freshview_view_rows_out_total", view="public.v") == 2
    m.forget_view("public.v")
    m.forget_view("public.never_seen")
    assert value(m, "freshview_view_rows_out_total", view="public.v") is None


def test_source_position_and_retained_wal():
    m = ServiceMetrics()
    m.record_source("freshview_db", 0x1_0000_0010, 4096)
    m.record_source("freshview_db", 0x1_0000_0020, None)  # slot gone: the retained WAL keeps its last value
    assert value(m, "freshview_source_position_bytes", source="freshview_db") == 0x1_0000_0020
    assert value(m, "freshview_source_retained_wal_bytes", source="freshview_db") == 4096


def test_each_instance_has_its_own_registry():
    a, b = ServiceMetrics(), ServiceMetrics()
    a.record_source("s", 1, 1)
    assert value(b, "freshview_source_position_bytes", source="s") is None


def test_serve_exposes_the_registry_over_http():
    m = ServiceMetrics()
    m.record_source("s", 42, 7)
    server = m.serve(0, addr="127.0.0.1")
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'freshview_source_position_bytes{source="s"} 42.0' in text


def test_connection_and_disk_health_and_fault_counters():
    m = ServiceMetrics()
    m.record_health(connected=True, disk_full=False)
    assert value(m, "freshview_source_connected") == 1 and value(m, "freshview_state_disk_full") == 0
    m.record_fault("connection")
    m.record_health(connected=False, disk_full=False)
    assert value(m, "freshview_source_connected") == 0
    m.record_health(connected=True, disk_full=False, reconnected=True)
    m.record_fault("disk_full")
    m.record_health(connected=True, disk_full=True)
    assert value(m, "freshview_state_disk_full") == 1 and value(m, "freshview_source_connected") == 1
    assert value(m, "freshview_reconnects_total") == 1
    assert value(m, "freshview_faults_total", kind="connection") == 1
    assert value(m, "freshview_faults_total", kind="disk_full") == 1


def test_a_population_shows_its_phase_and_progress_until_it_is_forgotten():
    from freshview.service.populating import Phase, Progress

    m = ServiceMetrics()
    m.record_population("public.v", Progress(Phase.READING, 1000, 5000, 1.5))
    m.record_population("public.v", Progress(Phase.COMPUTING, 5000, 5000, 3.0))
    assert value(m, "freshview_population_rows_read", view="public.v") == 5000
    assert value(m, "freshview_population_rows_estimated", view="public.v") == 5000
    assert value(m, "freshview_population_seconds", view="public.v") == 3.0
    assert value(m, "freshview_population_phase", view="public.v", phase="computing") == 1
    assert value(m, "freshview_population_phase", view="public.v", phase="reading") == 0
    m.forget_population("public.v")
    assert value(m, "freshview_population_rows_read", view="public.v") is None
    assert value(m, "freshview_population_phase", view="public.v", phase="computing") is None
