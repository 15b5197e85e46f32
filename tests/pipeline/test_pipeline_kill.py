"""``freshview pipeline run`` killed with SIGKILL under load, then restarted: every sink's replayed
contents equal the SQL over all messages (no loss, no duplicate: the replay refuses either), and
SIGTERM stops it cleanly."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from freshview.pipeline.spec import parse_pipeline
from tests.pipeline.test_pipeline import VIEWS, Feed, expected, pipeline_text, sink_contents
from tests.support.pipeline import publish

ROOT = Path(__file__).resolve().parents[2]


def start(file, state_dir, log):
    return subprocess.Popen([sys.executable, "-m", "freshview", "pipeline", "run", str(file), "--state-dir",
                             str(state_dir), "--execution", "local", "--max-batch", "50", "--progress-every", "0.5"],
                            stdout=log, stderr=subprocess.STDOUT,  # this checkout's freshview, not an installed one
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"})


def test_sigkill_under_load_loses_and_doubles_nothing(nats_url, pg, tmp_path):
    tag = f"kill{random.randrange(10**6)}"
    text = pipeline_text(nats_url, tag, tmp_path, pg)
    parse_pipeline(text)
    file = tmp_path / "shop.sql"
    file.write_text(text)
    (tmp_path / "customers.jsonl").write_text("")
    feed = Feed(seed=21)
    log = open(tmp_path / "out.log", "w")
    proc = start(file, tmp_path / "state", log)
    stop = threading.Event()

    def produce():
        while not stop.is_set():
            publish(nats_url, f"{tag}.orders", feed.orders_round(40))
            time.sleep(0.05)
    producer = threading.Thread(target=produce)
    producer.start()
    try:
        time.sleep(6)  # start-up, then steps under load
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        time.sleep(1)  # messages keep coming while it is down
        proc = start(file, tmp_path / "state", log)
        time.sleep(4)
    finally:
        stop.set()
        producer.join()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the sinks caught up with every message
        got = sink_contents(nats_url, tag, tmp_path, pg)
        if all(got[v] == expected(feed, v) for v in ("totals", "big")):
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, (tmp_path / "out.log").read_text()
    output = (tmp_path / "out.log").read_text()
    assert "messages in" in output and "stopped:" in output and "Traceback" not in output, output
    got = sink_contents(nats_url, tag, tmp_path, pg)
    for view in VIEWS:
        if view != "regions":  # (no customers in this feed: its join is empty)
            assert got[view] == expected(feed, view), view
    assert len(feed.orders) > 100
