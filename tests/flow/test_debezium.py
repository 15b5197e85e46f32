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
