"""IncrementalFlow.tick_debezium and watch_output(format="debezium") against PostgreSQL.

A random stream of Debezium messages (c/u/d/r, updates with and without ``before``, partial
``before`` images, NULLs, duplicate rows in a source without a key, envelopes and JSON text)
goes through ``tick_debezium``; after every step each view equals PostgreSQL running its SQL
over the rows the messages describe, and the view's Debezium output, replayed into a table keyed
as the result table is, equals the view.  Under each executor.
"""

from __future__ import annotations

import collections
import decimal
import json
import random

import pyarrow as pa
import pytest

from freshview.errors import DeltaError
from freshview.formats.debezium import MessageError
from freshview.plan.shape import result_key
from freshview.runtime.cost import EXECUTORS
from freshview.schema import schema_from_ddl
from tests.support.oracle import assert_same_rows

ORDERS = "o_id INT, o_customer INT, amount NUMERIC(10,2), status TEXT"
EVENTS = "kind TEXT, qty INT"  # no primary key: rows repeat
VIEWS = {
    "totals": "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer",
    "open_orders": "SELECT o_id, amount FROM orders WHERE status = 'open'",
    "kinds": "SELECT kind, qty FROM events WHERE qty IS NOT NULL OR kind IS NULL",  # rows repeat
    "everything": "SELECT COUNT(*) AS n, SUM(qty) AS q FROM events",
    "joined": "SELECT e.kind, o.status, COUNT(*) AS n FROM events e JOIN orders o ON e.qty = o.o_customer "
              "GROUP BY e.kind, o.status",
}
KINDS = ["click", "view", "buy", None]
STATUSES = ["open", "paid", None]


class Truth:
    """The rows the messages describe, and a generator of random messages that keeps it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.orders: dict[int, dict] = {}
        self.events: list[dict] = []

    def order(self, oid: int) -> dict:
        r = self.rng
        return {"o_id": oid, "o_customer": r.choice([None, 1, 2, 3, 4]),
                "amount": r.choice([None, str(decimal.Decimal(r.randint(-500, 5000)) / 100), r.randint(0, 9)]),
                "status": r.choice(STATUSES)}

    def orders_batch(self, n: int) -> list:
        r, out = self.rng, []
        for _ in range(n):
            op = r.random()
            if op < 0.4 or not self.orders:
                oid = r.choice([k for k in range(1, 60) if k not in self.orders] or [999])
                row = self.order(oid)
                self.orders[oid] = row
                msg = {"op": "c", "before": None, "after": row, "ts_ms": 1000 + oid}
            elif op < 0.75:
                oid = r.choice(list(self.orders))
                row = self.order(oid)
                before = r.choice([None, {"o_id": oid}, dict(self.orders[oid])])  # none, key only, whole
                self.orders[oid] = row
                msg = {"op": "u", "before": before, "after": row}
            elif op < 0.9:
                oid = r.choice(list(self.orders))
                old = self.orders.pop(oid)  # before: the key only (REPLICA IDENTITY DEFAULT) or the whole row
                before = r.choice([{"o_id": oid, "o_customer": None, "amount": None, "status": None}, dict(old)])
                msg = {"op": "d", "before": before, "after": None}
            else:  # a snapshot read of a row, present or not
                oid = r.randint(1, 60)
                row = self.order(oid)
                self.orders[oid] = row
                msg = {"op": "r", "after": row}
            out.append(self._spell(msg))
        return out

    def events_batch(self, n: int) -> list:
        r, out = self.rng, []
        for _ in range(n):
            if r.random() < 0.6 or not self.events:
                row = {"kind": r.choice(KINDS), "qty": r.choice([None, 1, 2, 3])}
                self.events.append(row)
                msg = {"op": "c", "after": row}
            elif r.random() < 0.5:
                old = self.events.pop(r.randrange(len(self.events)))
                msg = {"op": "d", "before": old}
            else:
                i = r.randrange(len(self.events))
                old, new = self.events[i], {"kind": r.choice(KINDS), "qty": r.choice([None, 1, 2, 3])}
                self.events[i] = new
                msg = {"op": "u", "before": old, "after": new}
            out.append(self._spell(msg))
        return out

    def _spell(self, msg: dict):
        form = self.rng.random()
        if form < 0.3:
            return json.dumps(msg)
        if form < 0.45:
            return json.dumps({"schema": {"type": "struct"}, "payload": msg}).encode()
        return msg

    def tables(self) -> dict[str, pa.Table]:
        orders = schema_from_ddl(ORDERS, ["o_id"])
        rows = list(self.orders.values())
        o = pa.Table.from_arrays(
            [pa.array([x["o_id"] for x in rows], pa.int32()), pa.array([x["o_customer"] for x in rows], pa.int32()),
             pa.array([None if x["amount"] is None else decimal.Decimal(str(x["amount"])) for x in rows],
                      pa.decimal128(10, 2)), pa.array([x["status"] for x in rows], pa.string())],
            schema=orders.arrow())
        e = pa.table({"kind": pa.array([x["kind"] for x in self.events], pa.string()),
                      "qty": pa.array([x["qty"] for x in self.events], pa.int32())})
        return {"orders": o, "events": e}


class Replayed:
    """A view's Debezium messages applied to a table keyed by the result table's key."""

    def __init__(self, start: pa.Table, counted: bool) -> None:
        """``start``: the view when the watch began."""
        self.rows: dict[tuple, tuple] = {}
        self.counts: collections.Counter = collections.Counter()
        for row in zip(*(c.to_pylist() for c in start.columns)):
            if counted:
                self.counts[row] += 1
            else:
                self.rows[row] = row

    def apply(self, msg: dict, names: list[str]) -> None:
        for image, sign in ((msg["before"], -1), (msg["after"], 1)):
            if image is None:
                continue
            row = tuple(image[n] for n in names)
            if "_fv_count" in image:
                if sign < 0:
                    assert self.counts[row] == image["_fv_count"], (msg, self.counts[row])
                    del self.counts[row]
                else:
                    self.counts[row] = image["_fv_count"]
            else:
                assert (sign < 0) == (row in self.rows.values()), msg
                if sign < 0:
                    self.rows = {k: v for k, v in self.rows.items() if v != row}
                else:
                    self.rows[row] = row

    def table(self, names: list[str]) -> list[tuple]:
        return list(self.rows.values()) + [r for r, n in self.counts.items() for _ in range(n)]


def _norm(rows):
    return sorted((tuple(str(v) if v is not None else None for v in r) for r in rows), key=repr)


@pytest.mark.parametrize("execution", EXECUTORS)
def test_random_debezium_streams_equal_postgresql(make_flow, oracle, execution):
    rng = random.Random(11)
    truth = Truth(rng)
    flow = make_flow(execution=execution)
    flow.register_source("orders", ORDERS, primary_key=["o_id"])
    flow.register_source("events", EVENTS)
    oracle.create_table("orders", schema_from_ddl(ORDERS, ["o_id"]))
    oracle.create_table("events", schema_from_ddl(EVENTS))
    watches, replayed = {}, {}
    for name, sql in VIEWS.items():
        flow.register_view(name, sql)
        oracle.create_view(name, sql)
        watches[name] = flow.watch_output(name, format="debezium", decimal_handling="string")
        start = flow.snapshot(name)
        replayed[name] = Replayed(start.cast(pa.schema([pa.field(f.name, pa.string()) if pa.types.is_decimal(f.type)
                                                         else f for f in start.schema])),
                                  result_key(flow.view_plan(name)).counted)
    steps = 6 if execution == "spark" else 14
    for step in range(steps):
        batches = {}
        if rng.random() < 0.8:
            batches["orders"] = truth.orders_batch(rng.randint(1, 12))
        if rng.random() < 0.8 or not batches:
            batches["events"] = truth.events_batch(rng.randint(1, 12))
        for source, messages in batches.items():
            summary = flow.tick_debezium(source, messages)
            assert summary.step == flow.step
        for name, table in truth.tables().items():
            oracle.load(name, table)
        for name in VIEWS:
            actual = flow.snapshot(name)
            context = f"step {step} view {name} execution {execution}"
            assert_same_rows(actual, oracle.query(name), context=context)
            names = actual.column_names
            for envelope in watches[name].poll():  # Kafka Connect's {"schema", "payload"} by default
                assert envelope["schema"]["name"] == f"freshview.{name}.Envelope"
                msg = envelope["payload"]
                assert msg["source"]["view"] == name and msg["op"] in ("c", "u", "d")
                replayed[name].apply(msg, names)
            assert _norm(replayed[name].table(names)) == _norm(
                zip(*(c.to_pylist() for c in actual.columns)) if actual.num_rows else []), context
    meta = flow.get_meta("debezium/orders")
    assert meta is None or "ts_ms" in meta


def test_a_bad_message_rolls_the_whole_batch_back(make_flow):
    flow = make_flow(execution="local")
    flow.register_source("orders", ORDERS, primary_key=["o_id"])
    flow.register_view("totals", VIEWS["totals"])
    flow.tick_debezium("orders", [{"op": "c", "after": {"o_id": 1, "o_customer": 1, "amount": 5, "status": "open"}}])
    before, step = flow.snapshot("totals"), flow.step
    batch = [{"op": "c", "after": {"o_id": 2, "o_customer": 1, "amount": 5, "status": "open"}},
             {"op": "u", "after": {"o_id": 1, "o_customer": 2, "amount": 1, "status": "paid"}},
             {"op": "d", "before": {"o_id": 3}}]
    with pytest.raises(MessageError, match="source 'orders', message 2: op 'd' for a key that does not exist") as e:
        flow.tick_debezium("orders", batch)
    assert e.value.offset == 2 and isinstance(e.value, DeltaError)
    assert flow.step == step and flow.snapshot("totals").equals(before)
    with pytest.raises(MessageError, match="message 0: column 'amount'"):
        flow.tick_debezium("orders", ['{"op": "c", "after": {"o_id": 5, "o_customer": 1, "amount": "x", '
                                      '"status": null}}'])
    assert flow.step == step


def test_watch_output_formats_are_checked(make_flow):
    flow = make_flow(execution="local")
    flow.register_source("orders", ORDERS, primary_key=["o_id"])
    flow.register_view("totals", VIEWS["totals"])
    with pytest.raises(Exception, match="format must be 'arrow' or 'debezium'"):
        flow.watch_output("totals", format="avro")
    with pytest.raises(Exception, match="decimal_handling"):
        flow.watch_output("totals", format="debezium", decimal_handling="exact")


# ---------------------------------------------------------------------- messages against the source's rows
KEYED = "id INT, name TEXT, amount NUMERIC(10,2)"


@pytest.fixture
def keyed(tmp_path):
    """A flow without Spark, ``orders`` keyed by id holding (1, a, 1) and (2, b, 2)."""
    from freshview import IncrementalFlow

    flow = IncrementalFlow(state_dir=tmp_path / "keyed", execution="local")
    flow.register_source("orders", KEYED, primary_key=["id"])
    flow.tick_debezium("orders", [{"op": "c", "after": {"id": 1, "name": "a", "amount": 1}},
                                  {"op": "c", "after": {"id": 2, "name": "b", "amount": 2}}])
    yield flow
    flow.close()


def _rows(table):
    return sorted(zip(*(c.to_pylist() for c in table.columns)), key=repr)


def _D(x):
    return decimal.Decimal(x).quantize(decimal.Decimal("0.01"))


def test_old_rows_come_from_the_state_by_key_in_one_lookup(keyed, monkeypatch):
    lookups = []
    for method in ("lookup", "lookup_prepared"):  # the source operator reads with the prepared rows
        original = getattr(keyed.store, method)
        monkeypatch.setattr(keyed.store, method,
                            lambda name, keys, original=original: lookups.append(name) or original(name, keys))
    msgs = [{"op": "u", "before": {"id": 1}, "after": {"id": 1, "name": "a2", "amount": 5}},  # partial before
            {"op": "u", "after": {"id": 2, "name": "b2", "amount": 6}},  # no before: the key of after
            {"op": "c", "after": {"id": 3, "name": "c", "amount": 7}},
            {"op": "u", "before": {"id": 3}, "after": {"id": 4, "name": "c", "amount": 7}},  # a key move
            {"op": "d", "before": {"id": 2, "name": None, "amount": None}},
            {"op": "r", "after": {"id": 1, "name": "a3", "amount": 8}}]  # a re-snapshot replaces
    summary = keyed.tick_debezium("orders", msgs)
    assert _rows(keyed.snapshot("orders")) == [(1, "a3", _D(8)), (4, "c", _D(7))]
    assert summary.rows_in == 4  # -(1, a, 1) +(1, a3, 8) -(2, b, 2) +(4, c, 7)
    assert lookups == ["source/orders"]  # one lookup of every key the batch touches


@pytest.mark.parametrize("msgs, reason, offset", [
    ([{"op": "u", "after": {"id": 5, "name": "x", "amount": 1}}], "op 'u' for a key that does not exist", 0),
    ([{"op": "d", "before": {"id": 1}}, {"op": "d", "before": {"id": 1}}], "op 'd' for a key that does not exist", 1),
    ([{"op": "c", "after": {"id": 1, "name": "x", "amount": 1}}], "op 'c' for a key that exists", 0),
    ([{"op": "c", "after": {"id": 7, "name": "x", "amount": 1}},
      {"op": "u", "before": {"id": 7}, "after": {"id": 1, "name": "x", "amount": 1}}], "onto a key that exists", 1),
    ([{"op": "c", "after": {"id": None, "name": "x", "amount": 1}}], "column 'id' is NOT NULL", 0),
    ([{"op": "d", "before": {"id": None, "name": "x"}}], "primary key column 'id' is null", 0),
    # the first refused message wins, whether the rows decide it (0) or not (2)
    ([{"op": "d", "before": {"id": 9}}, {"op": "c", "after": {"id": 7, "name": "x", "amount": 1}},
      {"op": "c", "after": {"id": 7, "name": "x", "amount": 1}}], "op 'd' for a key that does not exist", 0),
    ([{"op": "d", "before": {"id": 1}}, {"op": "c", "after": {"id": 7, "name": "x", "amount": 1}},
      {"op": "c", "after": {"id": 7, "name": "x", "amount": 1}}], "op 'c' for a key that exists", 2),
])
def test_key_refusals_name_the_message(keyed, msgs, reason, offset):
    before = keyed.snapshot("orders")
    with pytest.raises(MessageError, match=reason) as caught:
        keyed.tick_debezium("orders", msgs)
    assert caught.value.offset == offset and caught.value.source == "orders"
    assert keyed.snapshot("orders").equals(before) and keyed.step == 1


def test_an_earlier_source_refuses_before_a_later_one(keyed):
    keyed.register_source("events", EVENTS)
    with pytest.raises(MessageError, match="source 'orders', message 0: op 'u' for a key that does not exist"):
        keyed.tick_debezium({"orders": [{"op": "u", "after": {"id": 5, "name": "x", "amount": 1}}],
                             "events": ["not json"]})
    with pytest.raises(MessageError, match="source 'events', message 0: not JSON"):
        keyed.tick_debezium({"orders": [{"op": "u", "after": {"id": 1, "name": "x", "amount": 1}}],
                             "events": ["not json"]})


def test_truncate_deletes_every_row_then_later_messages_apply(keyed):
    summary = keyed.tick_debezium("orders", [{"op": "t"}, {"op": "c", "after": {"id": 2, "name": "b", "amount": 2}}])
    assert _rows(keyed.snapshot("orders")) == [(2, "b", _D(2))] and summary.rows_in == 1  # -(1, a, 1)


def test_sources_without_a_key_need_whole_present_rows(keyed):
    keyed.register_source("kv", "k TEXT, v INT")
    keyed.tick("kv", pa.table({"k": ["a", "a", "b"], "v": pa.array([1, 1, None], pa.int32()), "_weight": [1, 1, 1]}))
    msgs = [{"op": "d", "before": {"k": "a", "v": 1}}, {"op": "c", "after": {"k": "a", "v": 1}},
            {"op": "u", "before": {"k": "b", "v": None}, "after": {"k": "c", "v": 3}},
            {"op": "c", "after": {"k": "c", "v": 3}}]
    with pytest.raises(MessageError, match="message 2: op 'd' of a row that is not present"):
        keyed.tick_debezium("kv", msgs[:1] * 3)  # two copies: the third delete finds none
    with pytest.raises(MessageError, match="without 'before'"):
        keyed.tick_debezium("kv", [{"op": "u", "after": {"k": "a", "v": 2}}])
    summary = keyed.tick_debezium("kv", msgs)
    assert summary.rows_in == 2  # -(b, NULL) +2 (c, 3)
    assert _rows(keyed.snapshot("kv")) == [("a", 1), ("a", 1), ("c", 3), ("c", 3)]
