"""register_source(dedup=True): an at-least-once feed is applied exactly once.

Re-delivered batches (also with their rows reordered, alone or inside a multi-source tick) are
skipped and the views equal a brute-force recomputation of the de-duplicated feed; the seen set
drops its oldest digests beyond capacity and counts them; it commits with the step (a failed step
records nothing), survives a restart and travels with checkpoint/restore; tick_debezium re-deliveries
are skipped too.  And the caveat: a batch genuinely sent twice is skipped as well.

Only the first test registers views (so needs Spark for their first computation); the others run
the flow on sources alone.
"""

from __future__ import annotations

import collections
import decimal
import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

from freshview import IncrementalFlow
from freshview.errors import CatalogError, DeltaError, StateError

ORDERS = "o_id INT, o_customer INT, amount NUMERIC(10,2)"
CUSTOMERS = "c_id INT, region TEXT, version INT"
VIEWS = {"totals": "SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer",
         "by_region": "SELECT region, SUM(amount) AS total, COUNT(*) AS n FROM orders JOIN customers "
                      "ON o_customer = c_id GROUP BY region"}


@pytest.fixture
def local_flow(tmp_path: Path):
    """``local_flow(name, **kwargs)``: an IncrementalFlow without Spark (sources only), closed at teardown."""
    flows: list[IncrementalFlow] = []

    def factory(name: str = "flow", **kwargs) -> IncrementalFlow:
        flow = IncrementalFlow(state_dir=tmp_path / name, execution="local", **kwargs)
        flows.append(flow)
        return flow
    yield factory
    for flow in reversed(flows):
        flow.close()


def orders_table(rows: list[tuple]) -> pa.Table:
    return pa.table({"o_id": pa.array([r[0] for r in rows], pa.int32()),
                     "o_customer": pa.array([r[1] for r in rows], pa.int32()),
                     "amount": pa.array([r[2] for r in rows], pa.decimal128(10, 2)),
                     "_weight": pa.array([r[3] for r in rows], pa.int64())})


def customers_table(rows: list[tuple]) -> pa.Table:
    return pa.table({"c_id": pa.array([r[0] for r in rows], pa.int32()),
                     "region": pa.array([r[1] for r in rows], pa.string()),
                     "version": pa.array([r[2] for r in rows], pa.int32()),
                     "_weight": pa.array([r[3] for r in rows], pa.int64())})


class Feed:
    """Random keyed changes; every batch is distinct in content (each inserts a fresh order id, and
    each customer change carries a new version), so only re-deliveries repeat one."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.orders: dict[int, tuple] = {}
        self.customers: dict[int, tuple] = {}
        self.next_id = 1000
        self.version = 0

    def orders_batch(self) -> pa.Table:
        r, rows = self.rng, []
        self.next_id += 1
        fresh = (self.next_id, r.randint(1, 5), decimal.Decimal(r.randint(0, 9999)) / 100)
        self.orders[fresh[0]] = fresh
        rows.append((*fresh, 1))
        for oid in r.sample(sorted(set(self.orders) - {fresh[0]}), min(2, len(self.orders) - 1)):
            rows.append((*self.orders.pop(oid), -1))
            if r.random() < 0.6:
                self.orders[oid] = (oid, r.randint(1, 5), decimal.Decimal(r.randint(0, 9999)) / 100)
                rows.append((*self.orders[oid], 1))
        return orders_table(rows)

    def customers_batch(self) -> pa.Table:
        r, rows = self.rng, []
        cid = r.randint(1, 5)
        if cid in self.customers:
            rows.append((*self.customers.pop(cid), -1))
        self.version += 1
        self.customers[cid] = (cid, r.choice(["north", "south", None]), self.version)
        rows.append((*self.customers[cid], 1))
        return customers_table(rows)


def shuffled(table: pa.Table, rng: random.Random) -> pa.Table:
    order = list(range(table.num_rows))
    rng.shuffle(order)
    return table.take(pa.array(order, pa.int64()))


def brute_force(batches: list[dict[str, pa.Table]]) -> dict[str, list[tuple]]:
    """The views' rows recomputed from scratch from the de-duplicated feed, in plain Python."""
    counts: dict[str, collections.Counter] = {"orders": collections.Counter(), "customers": collections.Counter()}
    for batch in batches:
        for name, table in batch.items():
            cols = [c for c in table.column_names if c != "_weight"]
            for row in table.to_pylist():
                counts[name][tuple(row[c] for c in cols)] += row["_weight"]
    orders = [r for r, n in counts["orders"].items() for _ in range(n)]
    customers = [r for r, n in counts["customers"].items() for _ in range(n)]
    totals: dict = {}
    for _, cust, amount in orders:
        total, n = totals.get(cust, (decimal.Decimal(0), 0))
        totals[cust] = (total + amount, n + 1)
    regions: dict = {}
    for _, cust, amount in orders:
        for cid, region, _v in customers:
            if cid == cust:
                total, n = regions.get(region, (decimal.Decimal(0), 0))
                regions[region] = (total + amount, n + 1)
    return {"totals": sorted((k, t, n) for k, (t, n) in totals.items()),
            "by_region": sorted(((k, t, n) for k, (t, n) in regions.items()), key=repr)}


def view_rows(flow: IncrementalFlow, name: str) -> list[tuple]:
    rows = [tuple(r.values()) for r in flow.snapshot(name).to_pylist()]
    return sorted(rows, key=repr) if name == "by_region" else sorted(rows)


def test_redelivered_batches_are_skipped_and_views_equal_the_deduplicated_feed(make_flow):
    flow = make_flow(execution="local")
    flow.register_source("orders", ORDERS, primary_key=["o_id"], dedup=True)
    flow.register_source("customers", CUSTOMERS, primary_key=["c_id"], dedup=True)
    for name, sql in VIEWS.items():
        flow.register_view(name, sql)
    feed, rng = Feed(1), random.Random(2)
    applied: list[dict[str, pa.Table]] = []  # the de-duplicated feed
    skipped = 0
    for i in range(60):
        kind = rng.random()
        if kind < 0.5 or not applied:  # a new batch (one source or both)
            batch = {"orders": feed.orders_batch()}
            if rng.random() < 0.5:
                batch["customers"] = feed.customers_batch()
            summary = flow.tick(batch)
            assert summary.deduplicated == []
            applied.append(batch)
        elif kind < 0.8:  # a re-delivery of a recent batch, rows reordered
            again = rng.choice(applied[-10:])
            summary = flow.tick({n: shuffled(t, rng) for n, t in again.items()})
            assert summary.deduplicated == list(again) and summary.rows_in == 0
            assert all(v.skipped for v in summary.views.values())
            skipped += len(again)
        else:  # a new batch of one source with a re-delivered batch of the other: only that one skipped
            old = rng.choice(applied[-10:])
            name = next(iter(old))
            other = "customers" if name == "orders" else "orders"
            new = feed.orders_batch() if other == "orders" else feed.customers_batch()
            summary = flow.tick({name: shuffled(old[name], rng), other: new})
            assert summary.deduplicated == [name] and summary.rows_in == new.num_rows
            applied.append({other: new})
            skipped += 1
        if i % 10 == 9:
            expected = brute_force(applied)
            for view in VIEWS:
                assert view_rows(flow, view) == expected[view], (i, view)
    assert all(expected.values())  # (the check compared rows)
    metrics = flow.metrics()
    assert metrics["dedup_skipped_total"] == skipped > 10
    assert metrics["steps_total"] == 60 and metrics["dedup_dropped_total"] == 0
    assert metrics["dedup_recorded_total"] == metrics["dedup_entries"] == sum(len(b) for b in applied)
    assert metrics["rows_in_total"] == sum(t.num_rows for b in applied for t in b.values())


def test_a_genuinely_repeated_batch_is_skipped_too(local_flow):
    """The caveat: identity is content, so a batch meant to apply twice is taken for a re-delivery."""
    flow = local_flow()
    flow.register_source("events", "kind TEXT, qty INT", dedup=True)  # no key: rows may repeat
    batch = pa.table({"kind": ["click"], "qty": pa.array([1], pa.int32()), "_weight": [1]})
    assert flow.tick("events", batch).deduplicated == []
    assert flow.tick("events", batch).deduplicated == ["events"]
    assert flow.snapshot("events").num_rows == 1
    plain = local_flow("plain")
    plain.register_source("events", "kind TEXT, qty INT")  # without dedup both apply
    plain.tick("events", batch)
    plain.tick("events", batch)
    assert plain.snapshot("events").num_rows == 2


def test_capacity_drops_the_oldest_digests_and_counts_them(local_flow):
    flow = local_flow()
    flow.register_source("events", "kind TEXT, qty INT", dedup=True, dedup_capacity=3)

    def batch(i: int) -> pa.Table:
        return pa.table({"kind": [f"k{i}"], "qty": pa.array([i], pa.int32()), "_weight": [1]})
    for i in range(5):
        flow.tick("events", batch(i))
    metrics = flow.metrics()
    assert metrics["dedup_dropped_total"] == 2 and metrics["dedup_entries"] == 3
    for i in (2, 3, 4):  # still held
        assert flow.tick("events", batch(i)).deduplicated == ["events"]
    assert flow.tick("events", batch(0)).deduplicated == []  # dropped: applied again
    assert flow.snapshot("events").num_rows == 6
    metrics = flow.metrics()
    assert metrics["dedup_dropped_total"] == 3 and metrics["dedup_entries"] == 3
    assert metrics["dedup_skipped_total"] == 3 and metrics["dedup_recorded_total"] == 6
    assert flow.tick("events", batch(1)).deduplicated == []  # dropped when batch 0 came back
    # The seen set holds its capacity, not every digest ever recorded.
    assert flow.store.count("dedup-seen/events") == 3 and flow.store.count("dedup-order/events") == 3


def test_an_empty_batch_is_neither_recorded_nor_skipped(local_flow):
    flow = local_flow()
    flow.register_source("events", "kind TEXT, qty INT", dedup=True)
    empty = pa.table({"kind": pa.array([], pa.string()), "qty": pa.array([], pa.int32()),
                      "_weight": pa.array([], pa.int64())})
    cancels = pa.table({"kind": ["a", "a"], "qty": pa.array([1, 1], pa.int32()), "_weight": [1, -1]})
    for b in (empty, empty, cancels):
        assert flow.tick("events", b).deduplicated == []
    assert flow.metrics()["dedup_recorded_total"] == 0


def test_a_failed_step_records_nothing(local_flow):
    flow = local_flow()
    flow.register_source("orders", ORDERS, primary_key=["o_id"], dedup=True)
    batch = orders_table([(1, 1, decimal.Decimal("2.50"), 1)])

    def fail(_):
        raise RuntimeError("the sink is down")
    with pytest.raises(RuntimeError):
        flow.tick("orders", batch, before_commit=fail)
    assert flow.metrics()["dedup_recorded_total"] == 0
    assert flow.tick("orders", batch).deduplicated == []  # the retry applies
    assert flow.tick("orders", batch).deduplicated == ["orders"]
    # A batch that fails validation is not recorded either: after the fix it applies.
    bad = orders_table([(2, 1, decimal.Decimal("1"), 1), (9, 1, decimal.Decimal("1"), -1)])
    with pytest.raises(DeltaError):
        flow.tick("orders", bad)
    assert flow.metrics()["dedup_recorded_total"] == 1
    assert flow.snapshot("orders").num_rows == 1


def test_the_seen_set_survives_a_restart_and_the_catalog_keeps_dedup(tmp_path):
    batch = orders_table([(1, 1, decimal.Decimal("2.50"), 1), (2, 2, decimal.Decimal("1.00"), 1)])
    with IncrementalFlow(state_dir=tmp_path / "s", execution="local") as flow:
        flow.register_source("orders", ORDERS, primary_key=["o_id"], dedup=True, dedup_capacity=5)
        flow.register_source("plain", "x INT")
        flow.tick("orders", batch)
    with IncrementalFlow(state_dir=tmp_path / "s", execution="local") as flow:
        # The catalog kept dedup: a re-delivery after the restart is skipped without re-registering.
        assert flow.tick("orders", shuffled(batch, random.Random(1))).deduplicated == ["orders"]
        flow.register_source("orders", ORDERS, primary_key=["o_id"], dedup=True, dedup_capacity=5)  # same: fine
        with pytest.raises(CatalogError, match="dedup_capacity=5"):
            flow.register_source("orders", ORDERS, primary_key=["o_id"], dedup=True, dedup_capacity=6)
        with pytest.raises(CatalogError, match="dedup=True"):
            flow.register_source("orders", ORDERS, primary_key=["o_id"])
        with pytest.raises(CatalogError, match="dedup=False"):
            flow.register_source("plain", "x INT", dedup=True)
        assert flow.metrics()["dedup_skipped_total"] == 1
    with IncrementalFlow(state_dir=tmp_path / "s", execution="local") as flow:
        assert flow.metrics()["dedup_skipped_total"] == 1 and flow.metrics()["dedup_entries"] == 1


def test_checkpoint_and_restore_carry_the_seen_set(local_flow, tmp_path):
    flow = local_flow()
    flow.register_source("orders", ORDERS, primary_key=["o_id"], dedup=True, dedup_capacity=4)
    feed = Feed(5)
    batches = [feed.orders_batch() for _ in range(6)]
    for b in batches:
        flow.tick("orders", b)
    flow.tick("orders", batches[-1])  # one skipped
    dest = tmp_path / "ckpt"
    flow.checkpoint(str(dest))
    doc = json.loads((dest / "checkpoints" / "00000001.json").read_text())
    assert {"catalog", "metrics", "dedup/orders"} <= set(doc["state"]["meta"])  # every meta key is exported
    assert {"dedup-seen/orders", "dedup-order/orders"} <= set(doc["state"]["arrangements"])
    restored = local_flow("fresh")
    restored.restore(str(dest))
    assert restored.metrics() == flow.metrics()
    assert restored.metrics()["dedup_dropped_total"] == 2
    for b in batches[2:]:  # still held: skipped on the restored flow
        assert restored.tick("orders", shuffled(b, random.Random(3))).deduplicated == ["orders"]
    # Batch 0 (the insert of order 1001) was dropped for capacity: it is applied again.
    if 1001 in restored.snapshot("orders").column("o_id").to_pylist():
        with pytest.raises(DeltaError, match="duplicate primary key"):
            restored.tick("orders", batches[0])
    else:
        assert restored.tick("orders", batches[0]).deduplicated == []
    restored.drop_source("orders")  # drops the seen set too
    assert not restored.store.list_arrangements("dedup-")
    restored.register_source("orders", ORDERS, primary_key=["o_id"])
    assert restored.metrics()["dedup_entries"] == 0


def test_tick_debezium_skips_a_redelivered_batch_of_messages(local_flow):
    flow = local_flow()
    flow.register_source("orders", "o_id INT, status TEXT", primary_key=["o_id"], dedup=True)

    def msg(op, before, after, ts, lsn):
        return {"op": op, "before": before, "after": after, "ts_ms": ts, "source": {"lsn": lsn}}
    first = [msg("c", None, {"o_id": 1, "status": "open"}, 10, 1), msg("c", None, {"o_id": 2, "status": "open"}, 11, 2)]
    second = [msg("u", None, {"o_id": 1, "status": "paid"}, 12, 3), msg("d", {"o_id": 2}, None, 13, 4)]
    assert flow.tick_debezium("orders", first).deduplicated == []
    assert flow.tick_debezium("orders", second).deduplicated == []
    # Re-delivered: without dedup the c of an existing key (and the d of a gone one) would be refused.
    assert flow.tick_debezium("orders", [json.dumps(m) for m in reversed(first)]).deduplicated == ["orders"]
    assert flow.tick_debezium("orders", second).deduplicated == ["orders"]
    assert flow.snapshot("orders").to_pylist() == [{"o_id": 1, "status": "paid"}]
    assert flow.get_meta("debezium/orders")["source"] == {"lsn": 4}
    # The same change at another position is another batch.
    assert flow.tick_debezium("orders", [msg("u", None, {"o_id": 1, "status": "paid"}, 14, 5)]).deduplicated == []


def test_dedup_arguments_are_checked(local_flow):
    flow = local_flow()
    with pytest.raises(CatalogError, match="dedup_capacity"):
        flow.register_source("a", "x INT", dedup=True, dedup_capacity=0)
    with pytest.raises(CatalogError, match="dedup must be"):
        flow.register_source("a", "x INT", dedup="yes")
    assert flow.sources == []
    with pytest.raises(StateError, match="no state"):
        flow.store.scan("dedup-seen/a")
