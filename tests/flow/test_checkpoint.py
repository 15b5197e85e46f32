"""IncrementalFlow.checkpoint / checkpoint_full / restore: a restored flow equals the flow it was taken from
and a flow that never checkpointed, after more steps too; deltas write only new files; a crash while
writing leaves the previous checkpoint; unknown formats are refused."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from freshview.errors import StateError
from freshview.flow import checkpoint as ckpt

SOURCES = {"orders": ("o_id INT, o_customer INT, amount NUMERIC(10,2)", ["o_id"]),
           "customers": ("c_id INT, region TEXT", ["c_id"])}
VIEWS = {"totals": "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer",
         "by_region": "SELECT region, SUM(total) AS total FROM totals JOIN customers ON o_customer = c_id "
                      "GROUP BY region",
         "ids": "SELECT o_id FROM orders WHERE amount > 10"}


def build(make_flow, **kwargs):
    flow = make_flow(execution="local", **kwargs)
    for name, (ddl, key) in SOURCES.items():
        flow.register_source(name, ddl, primary_key=key)
    for name, sql in VIEWS.items():
        flow.register_view(name, sql)
    return flow


class Stream:
    """Random keyed changes (inserts, updates, deletes) for both sources."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.orders: dict[int, tuple] = {}
        self.customers: dict[int, tuple] = {}

    def step(self) -> dict[str, pa.Table]:
        r = self.rng
        rows = []
        for _ in range(r.randint(1, 6)):
            oid = r.randint(1, 40)
            if oid in self.orders:
                rows.append((*self.orders.pop(oid), -1))
                if r.random() < 0.5:
                    continue
            self.orders[oid] = (oid, r.randint(1, 6), r.randint(0, 5000) / 100)
            rows.append((*self.orders[oid], 1))
        orders = pa.table({"o_id": pa.array([x[0] for x in rows], pa.int32()),
                           "o_customer": pa.array([x[1] for x in rows], pa.int32()),
                           "amount": pa.array([None if x[2] is None else str(x[2]) for x in rows]).cast(
                               pa.decimal128(10, 2)) if rows else pa.array([], pa.decimal128(10, 2)),
                           "_weight": [x[3] for x in rows]})
        out = {"orders": orders}
        cid = r.randint(1, 6)
        crows = []
        if cid in self.customers:
            crows.append((*self.customers.pop(cid), -1))
        self.customers[cid] = (cid, r.choice(["north", "south", None]))
        crows.append((*self.customers[cid], 1))
        out["customers"] = pa.table({"c_id": pa.array([x[0] for x in crows], pa.int32()),
                                     "region": pa.array([x[1] for x in crows], pa.string()),
                                     "_weight": [x[2] for x in crows]})
        return out


def same(a, b) -> None:
    for name in [*SOURCES, *VIEWS]:
        left, right = a.snapshot(name), b.snapshot(name)
        key = [(c, "ascending") for c in left.column_names]
        assert left.sort_by(key).equals(right.sort_by(key)), name
    assert a.step == b.step


def test_restore_equals_the_original_and_a_flow_that_never_checkpointed(make_flow, tmp_path):
    dest = str(tmp_path / "ckpt")
    original, reference = build(make_flow), build(make_flow)
    stream = Stream(3)
    batches = [stream.step() for _ in range(30)]
    for i, batch in enumerate(batches[:20]):
        for flow in (original, reference):
            flow.tick(batch)
        if i == 4:
            info = original.checkpoint_full(dest)
            assert info.kind == "full" and info.checkpoint == 1 and info.step == 5 and info.files > 0
        elif i > 4:
            info = original.checkpoint(dest)
            assert info.kind == "delta" and info.step == i + 1
    original.set_meta("position", "0/16B3748")  # a connector's position travels with the state
    original.checkpoint(dest)
    restored = make_flow(execution="local")
    info = restored.restore(dest)
    assert info.step == 20 and info.files > 0
    assert sorted(restored.sources) == sorted(SOURCES) and sorted(restored.views) == sorted(VIEWS)
    assert restored.get_meta("position") == "0/16B3748"
    same(restored, original)
    for batch in batches[20:]:  # the next ticks resume from the restored step
        for flow in (original, reference, restored):
            flow.tick(batch)
    same(restored, original)
    same(restored, reference)


def test_a_delta_writes_only_new_files_and_the_first_checkpoint_is_full(make_flow, tmp_path):
    uri = (tmp_path / "c").as_uri()  # file://
    flow = build(make_flow)
    stream = Stream(5)
    flow.tick(stream.step())
    first = flow.checkpoint(uri)
    assert first.kind == "full" and first.files > 0
    again = flow.checkpoint(uri)
    assert again.kind == "delta" and again.files == 0  # nothing changed since
    flow.tick(stream.step())
    third = flow.checkpoint(uri)
    assert 0 < third.files <= first.files + 10
    doc = json.loads((tmp_path / "c" / "checkpoints" / "00000003.json").read_text())
    assert doc["parent"] == 2 and doc["kind"] == "delta" and doc["step"] == 2


def test_a_crash_while_writing_leaves_the_previous_checkpoint(make_flow, tmp_path, monkeypatch):
    dest = str(tmp_path / "c")
    flow = build(make_flow)
    stream = Stream(7)
    flow.tick(stream.step())
    flow.checkpoint_full(dest)
    flow.tick(stream.step())
    real = ckpt._write_bytes

    def crash(fs, path, data):
        if path.endswith(ckpt.LATEST):
            raise OSError("disk gone")
        real(fs, path, data)
    monkeypatch.setattr(ckpt, "_write_bytes", crash)
    with pytest.raises(StateError, match="cannot write a checkpoint"):
        flow.checkpoint(dest)
    monkeypatch.setattr(ckpt, "_write_bytes", real)
    restored = make_flow(execution="local")
    assert restored.restore(dest).step == 1


def test_restore_refuses_what_it_cannot_read_and_keeps_its_state(make_flow, tmp_path):
    flow = build(make_flow)
    flow.tick(Stream(9).step())
    with pytest.raises(StateError, match="no checkpoint"):
        flow.restore(str(tmp_path / "empty"))
    dest = tmp_path / "c"
    flow.checkpoint_full(str(dest))
    doc_path = dest / "checkpoints" / "00000001.json"
    doc = json.loads(doc_path.read_text())
    doc["version"] = 99
    doc_path.write_text(json.dumps(doc))
    with pytest.raises(StateError, match="format version 99"):
        flow.restore(str(dest))
    doc_path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(StateError, match="not a freshview checkpoint"):
        flow.restore(str(dest))
    assert flow.step == 1 and flow.snapshot("totals").num_rows > 0  # untouched


def test_a_long_chain_of_small_deltas_restores_whole(make_flow, tmp_path):
    dest = str(tmp_path / "c")
    flow = build(make_flow)
    stream = Stream(11)
    for _ in range(40):
        flow.tick(stream.step())
        flow.checkpoint(dest)
    restored = make_flow(execution="local")
    assert restored.restore(dest).checkpoint == 40
    same(restored, flow)


def test_upload_plans():
    assert ckpt.to_upload(["runs/a", "runs/b"], {"runs/a"}, full=False) == ["runs/b"]
    assert ckpt.to_upload(["runs/a", "runs/b"], {"runs/a"}, full=True) == ["runs/a", "runs/b"]
