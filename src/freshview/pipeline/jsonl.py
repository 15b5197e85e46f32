"""JSON lines files: one Debezium message per line, as a source (followed as it grows) and as a sink.

Source: the position is the byte offset after a line; only complete lines (ending in a newline) are read.
Sink: appends each emission's messages; ``<state-dir>/sinks/<sink>.json`` records the last emission the
file holds and its size then, so a re-delivery after a crash first cuts off a partial write.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import pyarrow as pa

from freshview.pipeline.io import Message, option

CHUNK = 1 << 20


class JsonLinesSource:
    def __init__(self, name: str, options: Mapping[str, str], state_dir: Path) -> None:
        self.path = Path(option(options, "path", f"source {name!r}"))
        self.offset = 0
        self.buffer = b""
        self.f = None

    def open(self, applied: int | None) -> None:
        self.offset = applied or 0

    def poll(self, max_messages: int, timeout: float) -> list[Message]:
        deadline = time.monotonic() + timeout
        while True:
            out = self._read(max_messages)
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))

    def _read(self, max_messages: int) -> list[Message]:
        if self.f is None:
            if not self.path.exists():
                return []
            self.f = open(self.path, "rb")
        out: list[Message] = []
        now = time.time()
        while len(out) < max_messages:
            nl = self.buffer.find(b"\n")
            if nl < 0:
                self.f.seek(self.offset + len(self.buffer))
                more = self.f.read(CHUNK)
                if not more:
                    break
                self.buffer += more
                continue
            line, self.buffer = self.buffer[:nl], self.buffer[nl + 1:]
            self.offset += nl + 1
            if line.strip():
                out.append(Message(line, self.offset, now))
        return out

    def acknowledge(self, position: int) -> None:
        pass

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None


class JsonLinesSink:
    def __init__(self, name: str, options: Mapping[str, str], state_dir: Path) -> None:
        self.path = Path(option(options, "path", f"sink {name!r}"))
        self.record = Path(state_dir) / "sinks" / f"{name}.json"

    def open(self, view: str, columns: Any, plan: Any, pipeline_id: str) -> None:
        self.record.parent.mkdir(parents=True, exist_ok=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.pipeline_id = pipeline_id

    def _held(self) -> dict:
        try:
            held = json.loads(self.record.read_text())
        except FileNotFoundError:
            return {"seq": 0, "size": 0}
        return held if held.get("pipeline") == self.pipeline_id else {"seq": 0, "size": 0}

    def prepare(self, seq: int, change: pa.Table, encode: Callable[[pa.Table], list[dict]]) -> bytes:
        return b"".join(json.dumps(m, separators=(",", ":")).encode() + b"\n" for m in encode(change))

    def deliver(self, seq: int, payload: bytes, recovering: bool) -> None:
        held = self._held()
        if seq <= held["seq"]:
            return
        with open(self.path, "ab") as f:
            f.truncate(held["size"])  # a write cut short by a crash (or another run's output) goes
            f.seek(held["size"])
            f.write(payload)
            f.flush()
            size = f.tell()
        tmp = self.record.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pipeline": self.pipeline_id, "seq": seq, "size": size}))
        os.replace(tmp, self.record)

    def close(self) -> None:
        pass
