"""End-to-end latency of a pipeline over NATS JetStream: Debezium messages published at a steady rate
to ``bench.orders``, ``freshview pipeline run`` (a separate process, in-process steps) keeping
``SELECT o_customer, SUM(amount), COUNT(*) FROM orders GROUP BY o_customer``, its changes published to
``bench.totals``.  Latency of a change = when the sink's message arrives at a subscriber − the
``ts_ms`` of the newest input message of its step (set by the producer at publish time).  Starts its
own ``nats-server``.  Not a test: nothing asserts a speed.

    python3 -m benchmarks.pipeline_nats [--rate 1000] [--seconds 30] [--customers 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


async def drive(url: str, rate: int, seconds: float, customers: int) -> tuple[list[float], int, int]:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    for subject in ("bench.orders", "bench.totals"):
        name = "FRESHVIEW_" + subject.replace(".", "_").upper()
        try:
            await js.add_stream(name=name, subjects=[subject])
        except Exception:
            pass
    latencies: list[float] = []
    received = 0

    async def on_msg(msg):
        nonlocal received
        received += 1
        source_ts = json.loads(msg.data).get("source", {}).get("ts_ms")
        if source_ts is not None and measuring:
            latencies.append(time.time() * 1000 - source_ts)
    await nc.subscribe("bench.totals", cb=on_msg)
    rng = random.Random(1)
    live: list[int] = []
    next_id = 1
    sent = 0
    measuring = False
    start = time.perf_counter()
    warmup = 3.0
    while (elapsed := time.perf_counter() - start) < seconds + warmup:
        measuring = elapsed >= warmup
        due = int(elapsed * rate)
        while sent < due:
            r = rng.random()
            now = int(time.time() * 1000)
            if r < 0.6 or not live:
                m = {"op": "c", "after": {"o_id": next_id, "o_customer": rng.randrange(customers),
                                          "amount": f"{rng.randrange(10000) / 100:.2f}"}, "ts_ms": now}
                live.append(next_id)
                next_id += 1
            elif r < 0.9:
                oid = live[rng.randrange(len(live))]
                m = {"op": "u", "after": {"o_id": oid, "o_customer": rng.randrange(customers),
                                          "amount": f"{rng.randrange(10000) / 100:.2f}"}, "ts_ms": now}
            else:
                oid = live.pop(rng.randrange(len(live)))
                m = {"op": "d", "before": {"o_id": oid}, "ts_ms": now}
            await nc.publish("bench.orders", json.dumps(m).encode())
            sent += 1
        await asyncio.sleep(0.001)
    await asyncio.sleep(1.0)
    await nc.close()
    return latencies, sent, received


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.nats import nats_server

    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.pipeline_nats")
    parser.add_argument("--rate", type=int, default=1000, help="messages per second")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--customers", type=int, default=1000)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    with nats_server() as url, tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "bench.sql"
        spec.write_text(f"""
CREATE SOURCE orders (o_id BIGINT PRIMARY KEY, o_customer INT, amount NUMERIC(10,2))
  WITH (connector = 'nats', url = '{url}', subject = 'bench.orders');
CREATE VIEW totals AS SELECT o_customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY o_customer;
CREATE SINK totals_out FROM totals WITH (connector = 'nats', url = '{url}', subject = 'bench.totals');
""")
        proc = subprocess.Popen([sys.executable, "-m", "freshview", "pipeline", "run", str(spec), "--state-dir",
                                 f"{tmp}/state", "--execution", "local", "--quiet"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(4)  # its start-up (no Spark: the views start over empty sources)
        try:
            latencies, sent, received = asyncio.run(drive(url, args.rate, args.seconds, args.customers))
        finally:
            proc.terminate()
            proc.wait(30)
    latencies.sort()

    def q(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))]
    result = {"rate": args.rate, "seconds": args.seconds, "messages_sent": sent, "sink_messages": received,
              "p50_ms": round(q(0.5), 1), "p95_ms": round(q(0.95), 1), "p99_ms": round(q(0.99), 1),
              "mean_ms": round(statistics.fmean(latencies), 1), "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
