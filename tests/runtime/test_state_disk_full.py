"""The state store on a full disk: a commit that cannot be written changes nothing, nothing is left half
written, closing does not raise over the caller's error, and state of a newer freshview is refused as it is."""

from __future__ import annotations

import errno
import json
import logging

import pyarrow as pa
import pytest

from freshview.errors import DiskFull, StateTooNew
from freshview.runtime.state import SpineStateStore, log, policy
from freshview.runtime.state.files import probe_space
from freshview.runtime.state.layout import Layout
from tests.support.disk import fill, small_disk

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])


def delta(keys, weight: int = 1) -> pa.Table:
    keys = list(keys)
    return pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([k * 10 for k in keys], pa.int64()),
                     "_weight": pa.array([weight] * len(keys), pa.int64())})


def contents(store: SpineStateStore) -> dict:
    return {(r["k"], r["v"]): r["_weight"] for r in store.scan("a").to_pylist()}


def test_a_failed_append_cuts_the_log_back_to_its_last_whole_record(tmp_path, monkeypatch):
    path = tmp_path / "wal-0.log"
    first, second, third = (log.encode_record(log.Record({"m": json.dumps(i)})) for i in range(3))
    wal = log.Log(path)
    wal.append(first)
    real_write, calls = log.os.write, []

    def write_half_then_fail(fd, data):  # the disk fills in the middle of the record
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(log.os, "write", write_half_then_fail)
    with pytest.raises(OSError):
        wal.append(second)
    monkeypatch.setattr(log.os, "write", real_write)
    assert path.stat().st_size == len(first) == wal.size
    wal.append(third)  # follows the last whole record, not the torn half
    wal.close()
    assert [r.meta for r in log.Log(path).records] == [{"m": "0"}, {"m": "2"}]


def test_a_full_disk_fails_the_commit_keeps_the_committed_state_and_resumes(tmp_path, caplog):
    with small_disk(tmp_path / "disk", "32m") as disk:
        directory = disk / "state"
        store = SpineStateStore(directory)
        store.ensure_arrangement("a", Layout(SCHEMA, ("k",)))
        store.apply("a", delta(range(50)))
        store.set_meta("position", 1)
        committed = contents(store)
        filler = fill(disk)
        big = delta(range(1000, 1000 + policy.FILE_ROWS))  # a run large enough for a file of its own
        for change in (delta(range(50, 60)), big):
            with pytest.raises(DiskFull, match="No space left"):
                store.apply("a", change)
        with pytest.raises(DiskFull):  # (a few bytes may still fit in the log's last page)
            store.set_meta("position", "x" * 100_000)
        assert contents(store) == committed and store.get_meta("position") == 1
        with pytest.raises(DiskFull):
            probe_space(directory)
        assert not list((directory / log.RUNS).glob("*")) if (directory / log.RUNS).exists() else True
        with caplog.at_level(logging.WARNING, logger="freshview.state"):
            store.close()  # its checkpoint finds no room: a warning, not an error over the caller's
        assert "without a checkpoint" in caplog.text
        store = SpineStateStore(directory)  # still full: the log is replayed
        assert contents(store) == committed and store.get_meta("position") == 1
        filler.unlink()
        probe_space(directory)
        assert not (directory / "SPACE.probe").exists()
        store.apply("a", big)
        store.set_meta("position", 3)
        store.close()
        store = SpineStateStore(directory)
        assert contents(store) == {**committed, **contents_of(big)} and store.get_meta("position") == 3
        store.close()


def contents_of(change: pa.Table) -> dict:
    return {(r["k"], r["v"]): r["_weight"] for r in change.to_pylist()}


def test_a_checkpoint_without_room_fails_no_commit_and_leaves_no_files(tmp_path, monkeypatch, caplog):
    directory = tmp_path / "state"
    store = SpineStateStore(directory, cache_mb=0.01)  # a checkpoint is due after every few commits
    store.ensure_arrangement("a", Layout(SCHEMA, ("k",)))
    store.apply("a", delta(range(10)))
    store.close()
    before = log.read_manifest(directory)
    store = SpineStateStore(directory, cache_mb=0.01)

    def no_room(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(log, "prepare_manifest", no_room)
    with caplog.at_level(logging.WARNING, logger="freshview.state"):
        for i in range(10, 200, 10):
            store.apply("a", delta(range(i, i + 10)))  # commits go on: the log holds them
    assert caplog.text.count("cannot checkpoint") == 1  # said once, retried later
    assert log.read_manifest(directory) == before
    assert sorted(p.name for p in directory.glob("wal-*.log")) == [before.log]
    store._release()
    monkeypatch.undo()
    store = SpineStateStore(directory)
    assert contents(store) == contents_of(delta(range(200)))
    store.close()


def test_state_of_a_newer_freshview_is_refused_and_left_as_it_is(tmp_path):
    directory = tmp_path / "state"
    store = SpineStateStore(directory)
    store.set_meta("m", 1)
    store.close()
    manifest = directory / log.MANIFEST
    data = json.loads(manifest.read_text())
    data["version"] = log.VERSION + 1
    manifest.write_text(json.dumps(data))
    files = sorted(p.name for p in directory.iterdir())
    with pytest.raises(StateTooNew, match="newer freshview"):
        SpineStateStore(directory)
    assert json.loads(manifest.read_text()) == data and sorted(p.name for p in directory.iterdir()) == files
