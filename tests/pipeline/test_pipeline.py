"""Pipelines end to end, in process: Debezium messages over NATS JetStream and JSON lines into views,
their changes out to NATS, JSON lines and PostgreSQL, each sink's replayed contents equal to the SQL
run by DuckDB over every message delivered so far, after every round, under both executors."""

from __future__ import annotations

import base64
import decimal
import json
import random
import time

import duckdb
import psycopg
import pytest

from freshview.pipeline.runner import PipelineOptions, PipelineRunner
from freshview.pipeline.spec import PipelineError, parse_pipeline
from tests.support.pipeline import Replay, publish, read_subject

VIEWS = {
    "totals": ("SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer",
               ["o_customer"]),
    "big": ("SELECT o_customer, amount FROM orders WHERE amount > 50", None),
    "regions": ("SELECT c.region, SUM(o.amount) AS total, COUNT(o.o_id) AS n FROM orders o "
                "JOIN customers c ON o.o_customer = c.c_id GROUP BY c.region", ["region"]),
}


def pipeline_text(nats_url: str, tag: str, tmp_path, pg_dsn: str) -> str:
    return f"""
CREATE SOURCE orders (o_id INT PRIMARY KEY, o_customer INT, amount NUMERIC(10,2))
  WITH (connector = 'nats', url = '{nats_url}', subject = '{tag}.orders', format = 'debezium_json');
CREATE SOURCE customers (c_id INT PRIMARY KEY, region TEXT)
  WITH (connector = 'jsonl', path = '{tmp_path}/customers.jsonl');
CREATE VIEW totals AS {VIEWS['totals'][0]};
CREATE VIEW big AS {VIEWS['big'][0]};
CREATE VIEW regions AS {VIEWS['regions'][0]};
CREATE SINK totals_out FROM totals WITH (connector = 'nats', url = '{nats_url}', subject = '{tag}.totals',
                                         decimal_handling = 'string');
CREATE SINK big_out FROM big WITH (connector = 'jsonl', path = '{tmp_path}/big.jsonl', decimal_handling = 'string',
                                  schemas = false);
CREATE SINK regions_out FROM regions WITH (connector = 'postgres', dsn = '{pg_dsn}', table = 'public.{tag}_regions');
"""


class Feed:
    """Random Debezium messages with NULLs, repeated values, updates with and without ``before``, deletes
    and multi-message transactions; ``orders``/``customers`` hold what they describe."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.orders: dict[int, tuple] = {}
        self.customers: dict[int, tuple] = {}
        self.next_id = 1
        self.tx = 0

    def amount(self):
        return None if self.rnd.random() < 0.1 else f"{self.rnd.choice([10, 20.5, 60, 75.25, 99]):.2f}"

    def customer(self):
        return None if self.rnd.random() < 0.1 else self.rnd.randint(0, 5)

    def orders_round(self, n: int) -> list[dict]:
        out = []
        while len(out) < n:
            self.tx += 1
            tx = {"id": f"tx{self.tx}", "total_order": 1} if self.rnd.random() < 0.5 else None
            for _ in range(self.rnd.randint(1, 4)):
                r = self.rnd.random()
                if r < 0.55 or not self.orders:
                    row = (self.next_id, self.customer(), self.amount())
                    self.next_id += 1
                    self.orders[row[0]] = row
                    m = {"op": "c", "after": dict(zip(("o_id", "o_customer", "amount"), row))}
                elif r < 0.8:
                    oid = self.rnd.choice(list(self.orders))
                    old, new = self.orders[oid], (oid, self.customer(), self.amount())
                    self.orders[oid] = new
                    m = {"op": "u", "after": dict(zip(("o_id", "o_customer", "amount"), new))}
                    if self.rnd.random() < 0.5:
                        m["before"] = dict(zip(("o_id", "o_customer", "amount"), old))
                else:
                    oid = self.rnd.choice(list(self.orders))
                    del self.orders[oid]
                    m = {"op": "d", "before": {"o_id": oid}}
                m["ts_ms"] = int(time.time() * 1000)
                if tx is not None:
                    m["transaction"] = tx
                out.append(m)
        return out

    def customers_round(self) -> list[dict]:
        out = []
        for cid in range(0, 6):
            region = self.rnd.choice(["north", "south", None, "east"])
            if cid in self.customers and self.rnd.random() < 0.3:
                del self.customers[cid]
                out.append({"op": "d", "before": {"c_id": cid}})
            elif cid not in self.customers or self.rnd.random() < 0.5:
                op = "u" if cid in self.customers else "c"
                self.customers[cid] = (cid, region)
                out.append({"op": op, "after": {"c_id": cid, "region": region}})
        return out


def expected(feed: Feed, view: str) -> list[tuple]:
    db = duckdb.connect()
    db.execute("CREATE TABLE orders (o_id INT, o_customer INT, amount DECIMAL(10,2))")
    db.execute("CREATE TABLE customers (c_id INT, region TEXT)")
    if feed.orders:
        db.executemany("INSERT INTO orders VALUES (?, ?, ?)", list(feed.orders.values()))
    if feed.customers:
        db.executemany("INSERT INTO customers VALUES (?, ?)", list(feed.customers.values()))
    rows = db.execute(VIEWS[view][0]).fetchall()
    return sorted((tuple(_norm(v) for v in r) for r in rows), key=repr)


def _norm(v):
    if isinstance(v, (decimal.Decimal, float)):
        return decimal.Decimal(str(v)).normalize()
    return v


def _convert(_name, v):
    if isinstance(v, str):
        try:
            return decimal.Decimal(v).normalize()
        except decimal.InvalidOperation:
            return v
    return v


def sink_contents(nats_url, tag, tmp_path, pg_dsn) -> dict[str, list[tuple]]:
    totals = Replay(["o_customer"]).apply(read_subject(nats_url, f"{tag}.totals"))
    lines = (tmp_path / "big.jsonl").read_text().splitlines() if (tmp_path / "big.jsonl").exists() else []
    big = Replay(None).apply(json.loads(line) for line in lines)
    with psycopg.connect(pg_dsn) as conn:
        regions = conn.execute(f"SELECT region, total, n FROM public.{tag}_regions").fetchall()
    return {"totals": totals.multiset(["o_customer", "total", "n"], _convert),
            "big": big.multiset(["o_customer", "amount"], _convert),
            "regions": sorted((tuple(_norm(v) for v in r) for r in regions), key=repr)}


def run_until(runner: PipelineRunner, total: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    runner.run(until=lambda: runner.progress.messages_in >= total or time.monotonic() > deadline)
    assert runner.progress.messages_in >= total, f"{runner.progress.messages_in} of {total} messages applied"


@pytest.mark.parametrize("execution", ["local", "spark"])
def test_sinks_replay_to_the_sql_over_all_messages_after_every_round(nats_url, pg, spark, tmp_path, execution):
    tag = f"p{execution}{random.randrange(10**6)}"
    spec = parse_pipeline(pipeline_text(nats_url, tag, tmp_path, pg))
    feed = Feed(seed=7 if execution == "local" else 8)
    runner = PipelineRunner(spec, tmp_path / "state", spark=spark,
                            options=PipelineOptions(max_batch=37, execution=execution))
    runner.open()
    total = 0
    try:
        for round_ in range(4):
            orders = feed.orders_round(60)
            publish(nats_url, f"{tag}.orders", orders)
            customers = feed.customers_round()
            with open(tmp_path / "customers.jsonl", "a") as f:
                f.writelines(json.dumps(m) + "\n" for m in customers)
            total += len(orders) + len(customers)
            run_until(runner, total)
            got = sink_contents(nats_url, tag, tmp_path, pg)
            for view in VIEWS:
                assert got[view] == expected(feed, view), f"round {round_}, view {view}"
        assert runner.progress.steps > 4  # batches of at most 37 messages (whole transactions)
    finally:
        runner.close()


def test_a_restart_resumes_without_loss_or_duplicates_and_replays_are_skipped(nats_url, pg, spark, tmp_path):
    tag = f"restart{random.randrange(10**6)}"
    spec = parse_pipeline(pipeline_text(nats_url, tag, tmp_path, pg))
    feed = Feed(seed=11)
    total = 0
    for round_ in range(3):
        runner = PipelineRunner(spec, tmp_path / "state", spark=spark, options=PipelineOptions(execution="local"))
        runner.open()
        try:
            orders = feed.orders_round(50)
            publish(nats_url, f"{tag}.orders", orders)
            total += len(orders)
            run_until(runner, len(orders))
        finally:
            runner.close()
        got = sink_contents(nats_url, tag, tmp_path, pg)
        assert got["totals"] == expected(feed, "totals") and got["big"] == expected(feed, "big")


def test_a_crash_between_commit_and_delivery_redelivers_once(nats_url, pg, spark, tmp_path, monkeypatch):
    """The step commits, then the process dies before the sinks have the emission: the next start
    delivers it from the outbox, and a sink that had it already does not get it twice."""
    tag = f"crash{random.randrange(10**6)}"
    spec = parse_pipeline(pipeline_text(nats_url, tag, tmp_path, pg))
    feed = Feed(seed=12)
    runner = PipelineRunner(spec, tmp_path / "state", spark=spark, options=PipelineOptions(execution="local"))
    runner.open()
    orders = feed.orders_round(30)
    publish(nats_url, f"{tag}.orders", orders)

    class Crash(Exception):
        pass
    delivered = []
    real = runner.sinks["totals_out"].deliver

    def deliver_then_crash(seq, payload, recovering):
        real(seq, payload, recovering)  # this sink got it; the others will not before the "crash"
        delivered.append(seq)
        raise Crash()
    monkeypatch.setattr(runner.sinks["totals_out"], "deliver", deliver_then_crash)
    with pytest.raises(Crash):
        runner.run(until=lambda: False)
    runner.close()  # (the state committed; nothing acknowledged)
    runner = PipelineRunner(spec, tmp_path / "state", spark=spark, options=PipelineOptions(execution="local"))
    runner.open()
    try:
        more = feed.orders_round(10)
        publish(nats_url, f"{tag}.orders", more)
        run_until(runner, len(more))  # only the new ones: the crashed step's messages are not read again
        time.sleep(0.2)
        runner.run_once()
        assert runner.progress.messages_in == len(more)
    finally:
        runner.close()
    got = sink_contents(nats_url, tag, tmp_path, pg)  # Replay refuses a doubled message
    for view in VIEWS:
        if view != "regions":
            assert got[view] == expected(feed, view), view


def test_the_nats_sinks_messages_carry_the_schema_a_consumer_decodes_decimals_with(nats_url, tmp_path):
    """Kafka Connect's JSON converter's default envelope: a consumer reads each precise decimal's scale from
    the message's schema and gets the view's exact value; ``schemas = false`` gives bare messages."""
    tag = f"schema{random.randrange(10**6)}"
    spec = parse_pipeline(f"""
CREATE SOURCE orders (o_id INT PRIMARY KEY, o_customer INT, amount NUMERIC(10,2))
  WITH (connector = 'jsonl', path = '{tmp_path}/orders.jsonl');
CREATE VIEW totals AS SELECT o_customer, SUM(amount) AS total FROM orders GROUP BY o_customer;
CREATE SINK with_schema FROM totals WITH (connector = 'nats', url = '{nats_url}', subject = '{tag}.totals');
CREATE SINK bare FROM totals WITH (connector = 'nats', url = '{nats_url}', subject = '{tag}.bare',
                                   decimal_handling = 'string', schemas = false);
""")
    orders = [{"op": "c", "after": {"o_id": 1, "o_customer": 7, "amount": "12345678.91"}},
              {"op": "c", "after": {"o_id": 2, "o_customer": 7, "amount": "-0.02"}},
              {"op": "c", "after": {"o_id": 3, "o_customer": 8, "amount": "0.10"}}]
    (tmp_path / "orders.jsonl").write_text("".join(json.dumps(m) + "\n" for m in orders))
    runner = PipelineRunner(spec, tmp_path / "state", options=PipelineOptions(execution="local"))
    runner.open()
    try:
        run_until(runner, len(orders))
    finally:
        runner.close()
    totals = {}
    for message in read_subject(nats_url, f"{tag}.totals"):
        assert set(message) == {"schema", "payload"}
        row_fields = next(f for f in message["schema"]["fields"] if f["field"] == "after")["fields"]
        total_field = next(f for f in row_fields if f["field"] == "total")
        assert total_field["name"] == "org.apache.kafka.connect.data.Decimal"
        after = message["payload"]["after"]
        unscaled = int.from_bytes(base64.b64decode(after["total"]), "big", signed=True)
        totals[after["o_customer"]] = decimal.Decimal(unscaled).scaleb(-int(total_field["parameters"]["scale"]))
    assert totals == {7: decimal.Decimal("12345678.89"), 8: decimal.Decimal("0.10")}
    bare = read_subject(nats_url, f"{tag}.bare")
    assert {m["after"]["o_customer"]: m["after"]["total"] for m in bare} == {7: "12345678.89", 8: "0.10"}
    assert all("schema" not in m for m in bare)


def test_a_bad_message_stops_the_pipeline_with_its_position_and_applies_nothing(nats_url, pg, tmp_path):
    tag = f"bad{random.randrange(10**6)}"
    spec = parse_pipeline(pipeline_text(nats_url, tag, tmp_path, pg))
    runner = PipelineRunner(spec, tmp_path / "state", options=PipelineOptions(execution="local"))
    runner.open()
    try:
        publish(nats_url, f"{tag}.orders", [{"op": "c", "after": {"o_id": 1, "o_customer": 1, "amount": "1"}},
                                            {"op": "c", "after": {"o_id": "x", "o_customer": 1, "amount": "1"}}])
        with pytest.raises(PipelineError, match=r"source 'orders', message at position 2: .*o_id"):
            runner.run(until=lambda: False)
        assert runner.flow.snapshot("orders").num_rows == 0
    finally:
        runner.close()


def test_a_flush_interval_sends_one_consolidated_change_per_interval(nats_url, pg, tmp_path):
    tag = f"flush{random.randrange(10**6)}"
    text = pipeline_text(nats_url, tag, tmp_path, pg) + "SET update_aggregate_flush_interval = '1 second';\n"
    spec = parse_pipeline(text)
    feed = Feed(seed=31)
    runner = PipelineRunner(spec, tmp_path / "state", options=PipelineOptions(max_batch=5, execution="local"))
    runner.open()
    try:
        orders = feed.orders_round(120)
        publish(nats_url, f"{tag}.orders", orders)
        started = time.monotonic()
        run_until(runner, len(orders))
        assert runner.progress.steps >= 20  # many small steps ...
        assert runner.progress.emissions <= 2 + (time.monotonic() - started)  # ... few emissions
        deadline = time.monotonic() + 5  # what is held goes out once the interval has passed
        runner.run(until=lambda: time.monotonic() > deadline or
                   sink_contents(nats_url, tag, tmp_path, pg)["totals"] == expected(feed, "totals"))
        got = sink_contents(nats_url, tag, tmp_path, pg)
        assert got["totals"] == expected(feed, "totals") and got["big"] == expected(feed, "big")
    finally:
        runner.close()


def test_the_settings_reach_the_flow(tmp_path):
    spec = parse_pipeline(f"""
CREATE SOURCE orders (o_id INT PRIMARY KEY, amount INT) WITH (connector = 'jsonl', path = '{tmp_path}/o.jsonl');
CREATE VIEW v AS SELECT o_id, amount FROM orders;
SET updating_ttl = '1 hour';
SET update_aggregate_flush_interval = '500 ms';
""")
    runner = PipelineRunner(spec, tmp_path / "state", options=PipelineOptions(execution="local"))
    runner.open()
    try:
        assert runner.flow.state_ttl == 3600 and runner.flow.flush_interval == 0.5
    finally:
        runner.close()
