"""The outbox: each emission's sink payloads, written inside the step that produced them and delivered
after it commits, so a crash between the two re-delivers instead of losing or doubling.

An emission (a step's or a flush's view changes) gets a sequence number committed with the step
(``pipeline/emitted`` in the flow's metadata).  Before the commit each sink's payload is written to
``<dir>/<seq>.<sink>``; after it, each sink delivers it (idempotently: a sink remembers the last
sequence it holds) and the file is removed.  At start, files up to the committed sequence are
delivered again, in order; files above it belong to a step that never committed and are discarded.
"""

from __future__ import annotations

import os
from pathlib import Path


def recovery(files: list[tuple[int, str]], committed: int) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(to deliver in order, to discard) of the outbox's ``(sequence, sink)`` files."""
    deliver = sorted(f for f in files if f[0] <= committed)
    discard = sorted(f for f in files if f[0] > committed)
    return deliver, discard


class Outbox:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)

    def path(self, seq: int, sink: str) -> Path:
        return self.dir / f"{seq:012d}.{sink}"

    def write(self, seq: int, sink: str, payload: bytes) -> None:
        tmp = self.dir / f".{seq:012d}.{sink}.tmp"
        with open(tmp, "wb") as f:
            f.write(payload)
        os.replace(tmp, self.path(seq, sink))

    def read(self, seq: int, sink: str) -> bytes:
        return self.path(seq, sink).read_bytes()

    def remove(self, seq: int, sink: str) -> None:
        self.path(seq, sink).unlink(missing_ok=True)

    def files(self) -> list[tuple[int, str]]:
        out = []
        for p in self.dir.iterdir():
            if p.name.startswith("."):
                p.unlink(missing_ok=True)  # a write cut short
                continue
            seq, _, sink = p.name.partition(".")
            if seq.isdigit() and sink:
                out.append((int(seq), sink))
        return out
