"""What a computing thread costs the service's loop through the GIL, by switch interval
(``service.population.Responsive``).

A "step" makes 50 blocking calls (0.2 ms each, as reads and statements are) with a little Python
between them; timed alone, then beside a thread burning CPU in Python (a population's worker), with
``sys.setswitchinterval`` at CPython's 5 ms and at the 0.5 ms the service uses while populations run.

    python3 -m benchmarks.gil_switch
"""
from __future__ import annotations

import os
import statistics
import sys
import threading
import time


def _step() -> float:
    started = time.perf_counter()
    for _ in range(50):
        time.sleep(0.0002)
        sum(range(200))
    return time.perf_counter() - started


def main() -> int:
    print(f"load average {os.getloadavg()}")
    for interval in (0.005, 0.0005, 0.005, 0.0005):
        sys.setswitchinterval(interval)
        alone = statistics.median(_step() for _ in range(5))
        stop = threading.Event()

        def burn() -> None:
            x = 0
            while not stop.is_set():
                for i in range(10_000):
                    x += i

        thread = threading.Thread(target=burn)
        thread.start()
        time.sleep(0.05)
        beside = sorted(_step() for _ in range(10))
        stop.set()
        thread.join()
        print(f"switch interval {interval * 1000:.1f} ms: step alone {alone * 1000:.1f} ms; beside a busy thread "
              f"median {statistics.median(beside) * 1000:.1f} ms, max {beside[-1] * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
