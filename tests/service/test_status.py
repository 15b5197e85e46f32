"""service.status.describe: the service's line in ``freshview status``, from its progress row."""

from __future__ import annotations

import datetime as dt

from freshview.service.status import describe

LAST_STEP = dt.datetime(2026, 11, 26, 12, 3, 41, tzinfo=dt.timezone.utc)


def test_a_fresh_heartbeat_shows_the_status_the_service_wrote():
    assert describe({"status": "running", "heartbeat_age_s": 0.4}) == "running"
    assert describe({"status": "rebuilding", "heartbeat_age_s": 2}) == "rebuilding"


def test_a_full_state_disk_is_a_pause_with_the_last_step():
    text = describe({"status": "state disk full", "heartbeat_age_s": 1.0, "updated_at": LAST_STEP})
    assert text.startswith("paused: its state directory is full") and "2026-11-26 12:03:41" in text


def test_a_stale_heartbeat_is_a_service_gone_or_cut_off():
    assert describe({"status": "running", "heartbeat_age_s": 42.2}) == \
        "not running, or cannot reach the database (last heartbeat 42 s ago)"
    assert "no heartbeat yet" in describe({"status": "starting", "heartbeat_age_s": None})
    assert "cannot reach" in describe({"status": "state disk full", "heartbeat_age_s": 60})


def test_stopped_and_never_started_are_said_as_they_are():
    assert describe({"status": "stopped", "heartbeat_age_s": 900}) == "stopped"
    assert describe({"status": "never started"}) == "never started"


def test_a_populating_view_shows_its_phase_and_progress():
    from freshview.service.status import view_status

    row = {"status": "populating", "phase": "reading", "rows_read": 1200, "rows_total": 5000, "elapsed_s": 3.4}
    assert view_status(row) == "populating: reading, 1200 rows read of ~5000, 3 s"
    assert view_status({**row, "rows_total": None, "phase": "computing"}) == "populating: computing, 1200 rows read, 3 s"
    assert view_status({**row, "status": "rebuilding"}) == "rebuilding: reading, 1200 rows read of ~5000, 3 s"
    assert view_status({"status": "rebuilding", "phase": None}) == "rebuilding"
    assert view_status({"status": "active", "phase": None}) == "active"
