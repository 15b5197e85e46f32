"""Service options that reach the engine: the execution mode; state the engine cannot read or may not touch."""

from __future__ import annotations

import pytest

import freshview.service.core as service_module
from freshview.service.service import Service, ServiceOptions


class FlowWithModes:
    def __init__(self, spark=None, state_dir=None, *, cache_mb: int = 256, execution: str = "auto", **names) -> None:
        self.spark, self.state_dir, self.execution = spark, state_dir, execution


def test_the_execution_mode_reaches_the_engine(monkeypatch, tmp_path):
    monkeypatch.setattr(service_module, "IncrementalFlow", FlowWithModes)
    svc = Service("dbname=none", tmp_path, spark="S", options=ServiceOptions(execution="spark"))
    flow = svc._new_flow()
    assert isinstance(flow, FlowWithModes) and flow.execution == "spark" and flow.spark == "S"
    assert Service("dbname=none", tmp_path)._new_flow().execution == "auto"


def test_unreadable_state_is_set_aside_for_a_rebuild(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.sqlite").write_bytes(b"an older store's file")
    svc = Service("dbname=none", state, options=ServiceOptions(execution="local"))
    flow = svc._open_flow()
    try:
        assert flow.sources == [] and flow.views == [] and not (state / "state.sqlite").exists()
    finally:
        flow.close()


def test_a_state_directory_in_use_is_refused_and_never_wiped(tmp_path):
    from freshview.errors import StateInUse
    from freshview.runtime.state import SpineStateStore

    state = tmp_path / "state"
    holder = SpineStateStore(state)  # another service's
    holder.set_meta("mine", 1)
    try:
        svc = Service("dbname=none", state, options=ServiceOptions(execution="local"))
        with pytest.raises(StateInUse, match="in use by another process"):
            svc._open_flow()
        assert holder.get_meta("mine") == 1 and (state / "LOCK").exists() and list(state.glob("wal-*.log"))
    finally:
        holder.close()
