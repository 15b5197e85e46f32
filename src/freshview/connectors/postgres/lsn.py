"""PostgreSQL's position: an LSN (a WAL byte offset), ordered as numbers, written ``X/Y``."""

from __future__ import annotations

from dataclasses import dataclass

from freshview.connectors.postgres.protocol import format_lsn, parse_lsn


@dataclass(frozen=True, order=True)
class Lsn:
    """A transaction's position is the end of its commit record; a snapshot's is its consistent
    point (the start of a later record), so a snapshot at Y holds exactly the transactions <= Y."""

    value: int

    def to_text(self) -> str:
        return format_lsn(self.value)

    @classmethod
    def from_text(cls, text: str) -> "Lsn":
        return cls(int(text) if text.isdigit() else parse_lsn(text))

    def __str__(self) -> str:
        return self.to_text()
