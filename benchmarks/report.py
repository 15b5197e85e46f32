"""Where results go: the machine and versions, JSON files, and sections of docs/benchmarks.md.

Each suite owns one section of ``docs/benchmarks.md`` between
``<!-- suite:NAME:begin -->`` and ``<!-- suite:NAME:end -->``; a run replaces
its section and leaves the rest of the page (hand-written analysis) alone.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
OUT = ROOT / "benchmarks" / "out"
RESULTS = ROOT / "docs" / "results"  # JSON results that go with the doc


def machine() -> dict[str, Any]:
    import pyarrow
    import pyspark

    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(), "cpu": cpu, "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "os": platform.platform(), "python": platform.python_version(), "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__, "command": "python3 -m benchmarks " + shlex.join(sys.argv[1:]),
    }


def machine_line(m: dict[str, Any]) -> str:
    return (f"{m['date']} · {m['cpus']} cores ({m['cpu']}), {m['ram_gib']} GiB · {m['os']} · Python {m['python']}, "
            f"PySpark {m['pyspark']}, pyarrow {m['pyarrow']}")


def write_json(name: str, payload: dict[str, Any], directory: Path = OUT) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=str))
    return path


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def p95(values: list[float]) -> float:
    """The 95th percentile, nearest rank (of 20 samples: the second largest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))] if ordered else 0.0


def write_section(suite: str, markdown: str, doc: Path = DOC) -> None:
    """Replace the suite's section of docs/benchmarks.md (appending it the first time)."""
    begin, end = f"<!-- suite:{suite}:begin -->", f"<!-- suite:{suite}:end -->"
    block = f"{begin}\n{markdown.rstrip()}\n{end}"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


class PeakMemory:
    """Peak RSS of this Python process and of Spark's JVM, sampled every 0.2 s."""

    def __init__(self, spark: Any) -> None:
        import psutil

        self._py = psutil.Process()
        self._jvm = None
        try:  # the local JVM that py4j launched (absent under Spark Connect)
            self._jvm = psutil.Process(spark.sparkContext._gateway.proc.pid)
        except Exception:
            pass
        self.python_peak = 0
        self.jvm_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.python_peak = max(self.python_peak, self._py.memory_info().rss)
            if self._jvm is not None:
                try:
                    self.jvm_peak = max(self.jvm_peak, self._jvm.memory_info().rss)
                except Exception:
                    self._jvm = None
            time.sleep(0.2)

    def reset(self) -> None:
        self.python_peak = self.jvm_peak = 0

    def snapshot(self) -> dict[str, float]:
        return {"python_peak_mib": round(self.python_peak / 2**20), "jvm_peak_mib": round(self.jvm_peak / 2**20)}

    def close(self) -> None:
        self._stop.set()
