"""Merges in background threads, so a step never waits for one.

A merge never changes an arrangement's content, only how many runs hold it,
so it can run beside the steps that keep writing: a thread merges a tuple of
committed runs into one (written to its own run file when large, so the
memory it takes is the page cache's), and the store swaps the result in at a
step boundary if those runs are still there, side by side, in the same
arrangement (a drop or a rollback may have removed them: the result is then
thrown away).  There are two threads, one for small merges and one for
large ones, so a merge of millions of rows never holds up the small merges
that keep the number of runs down.  numpy and pyarrow release the GIL in
their kernels, so merging mostly runs on another core.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from freshview.runtime.state import log, policy, runs
from freshview.runtime.state.layout import Layout
from freshview.runtime.state.runs import Run, merge_runs

__all__ = ["MergeJob", "Merger"]


@dataclass(eq=False)
class MergeJob:
    """Merge ``inputs`` (consecutive runs of the arrangement ``owner``) into ``result``."""

    owner: Any
    layout: Layout
    inputs: tuple[Run, ...]
    large: bool = False
    path: str = field(default_factory=log.new_run_path)  # where a large result is written
    result: Run | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Merger:
    """Worker threads merging jobs, small and large apart; the store collects results with ``finished``."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._queues: dict[bool, queue.Queue[MergeJob | None]] = {False: queue.Queue(), True: queue.Queue()}
        self._threads: dict[bool, threading.Thread] = {}
        self._lock = threading.Lock()
        self._finished: list[MergeJob] = []
        self._pending: list[MergeJob] = []

    def submit(self, job: MergeJob) -> None:
        if job.large not in self._threads:
            thread = threading.Thread(target=self._work, args=(self._queues[job.large],), daemon=True,
                                      name=f"freshview-state-merge-{'large' if job.large else 'small'}")
            thread.start()
            self._threads[job.large] = thread
        with self._lock:
            self._pending.append(job)
        self._queues[job.large].put(job)

    def busy(self, owner: Any) -> list[MergeJob]:
        """The jobs not yet collected whose inputs belong to ``owner``."""
        with self._lock:
            return [j for j in self._pending if j.owner is owner]

    def finished(self) -> list[MergeJob]:
        """Jobs done since the last call, in the order they were submitted."""
        with self._lock:
            done, self._finished = self._finished, []
            self._pending = [j for j in self._pending if j not in done]
        return done

    def reserved_paths(self) -> set[str]:
        """Run files of jobs not yet collected (being written, or written): not garbage."""
        with self._lock:
            return {j.path for j in self._pending}

    def wait(self) -> None:
        """Block until every submitted job is done."""
        with self._lock:
            pending = list(self._pending)
        for job in pending:
            job.done.wait()

    def close(self) -> None:
        self.wait()
        for large, thread in self._threads.items():
            self._queues[large].put(None)
            thread.join()
        self._threads = {}

    def _work(self, jobs: queue.Queue[MergeJob | None]) -> None:
        while (job := jobs.get()) is not None:
            try:
                job.result = merge_runs(list(job.inputs), job.layout)
                if job.result is not None and len(job.result) >= policy.FILE_ROWS:
                    log.write_run_file(self._directory, job.result.table, job.path)
                    job.result.attach(log.map_run(self._directory, job.path), job.path)
                if job.result is not None and len(job.result) >= runs.INDEX_MIN_ROWS:
                    job.result.index()  # built here rather than by the first lookup
            except BaseException as exc:  # reported to the store, which raises it at the next step boundary
                job.error = exc
            with self._lock:
                self._finished.append(job)
            job.done.set()
