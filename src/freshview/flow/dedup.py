"""Content-addressed dedup of source batches: a batch's digest, and the seen set's bookkeeping.

A source registered with ``dedup=True`` keeps the digests of the batches it
applied; a batch whose digest is among them is skipped, so an at-least-once
feed (one that may re-deliver a batch after a crash or a retry) is applied
exactly once.  Everything here is pure (no store, no I/O): the flow looks
digests up in its state store and applies what ``decide`` says.

**Digest** (16 bytes): the batch's consolidated delta rows, weights included,
as a multiset.  Each row is hashed twice (its columns' and weight's
``hashing.hash_array`` values combined as ``hashing.hash_rows`` does, from two
different seeds); each lane is the sum of its
row hashes mod 2**64 (an order-independent combiner: any permutation of the
rows gives the same sum, and unlike XOR a row present twice does not cancel),
finalised with the row count.  So a re-delivered batch with its rows in
another order, split differently or given as pandas instead of Arrow, has
the same digest; a batch that differs in any value or weight has another one
(up to 64-bit hash collisions of a value, e.g. two different strings with
one polynomial hash; integers, dates and timestamps hash without collisions).
``changes_digest`` does the same for a batch of Debezium messages (each
message's op, before, after, ts_ms and source block), since their delta is
derived from the source's state and differs on re-delivery.

**The seen set** of a source is ordered: digest ``i`` recorded gets sequence
number ``i`` (``SeenState.next`` counts them), and the entries held are the
sequence numbers ``low .. next - 1``.  When recording one more would exceed
the capacity, the oldest (``low``, ``low + 1``, ...) are dropped, so
``low`` is also how many were ever dropped.

**Caveat**: identity is content.  A batch genuinely sent twice (the same
rows at the same weights, meant to apply twice) is skipped the second time
while the first is still in the seen set; dedup is for feeds where identical
batches are re-deliveries.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from freshview.algebra import hashing

DIGEST_BYTES = 16
DEFAULT_CAPACITY = 10_000_000
_SEEDS = (np.uint64(0x3C6EF372FE94F82B), np.uint64(0xA54FF53A5F1D36F1))
_COUNT_SEEDS = (0x510E527FADE682D1, 0x9B05688C2B3E6C1F)
_G = np.uint64(0x9E3779B97F4A7C15)

__all__ = ["DEFAULT_CAPACITY", "DIGEST_BYTES", "Decision", "SeenState", "changes_digest", "check_capacity",
           "decide", "digest", "words"]


def digest(table: pa.Table) -> bytes:
    """The 16-byte order-insensitive digest of ``table``'s rows (every column, ``_weight`` included)."""
    n = table.num_rows
    # Each column hashed once (hashing.hash_array); each lane combines them per row as hashing.hash_rows
    # does, from its own seed, and sums the rows' hashes.
    hashes = [hashing.hash_array(c, i) for i, c in enumerate(table.columns)] if n else []
    lanes = []
    for seed, count_seed in zip(_SEEDS, _COUNT_SEEDS):
        total = np.uint64(0)
        if n:
            acc = np.full(n, seed, dtype=np.uint64)
            for h in hashes:
                acc ^= h
                acc *= _G
            total = np.add.reduce(hashing._mix(acc), dtype=np.uint64)  # wraps mod 2**64
        lanes.append(_finish(total, n, count_seed))
    return struct.pack("<QQ", *lanes)


def _finish(total: np.uint64, n: int, count_seed: int) -> int:
    """One lane: the sum of row hashes hashed with the row count (so n rows never sum like m rows)."""
    x = hashing._mix(np.array([(n + count_seed) % 2**64], dtype=np.uint64))
    x ^= total
    x *= _G
    return int(hashing._mix(x)[0])


def changes_digest(changes: Sequence[Any], arrow_types: Sequence[pa.DataType]) -> bytes:
    """The digest of a batch of decoded Debezium messages (``formats.debezium.Change``), order-insensitive.

    Each message is a row: op, ts_ms, its source block (as sorted JSON), whether ``before`` and
    ``after`` are present, and their values in the source's column types ``arrow_types``.
    """
    columns: dict[str, pa.Array] = {
        "op": pa.array([c.op for c in changes], pa.string()),
        "ts_ms": pa.array([c.ts_ms for c in changes], pa.int64()),
        "source": pa.array([None if c.source is None else json.dumps(c.source, sort_keys=True, default=str)
                            for c in changes], pa.string()),
    }
    for side in ("before", "after"):
        images = [getattr(c, side) for c in changes]
        columns[f"{side}?"] = pa.array([i is not None for i in images], pa.bool_())
        for k, t in enumerate(arrow_types):
            columns[f"{side}{k}"] = pa.array([None if i is None else i[k] for i in images], t)
    return digest(pa.table(columns))


def words(d: bytes) -> tuple[int, int]:
    """A digest as the two unsigned 64-bit words the seen set stores."""
    if len(d) != DIGEST_BYTES:
        raise ValueError(f"a digest has {DIGEST_BYTES} bytes, not {len(d)}")
    return struct.unpack("<QQ", d)  # type: ignore[return-value]


def check_capacity(capacity: Any) -> int:
    """``capacity`` if it is a positive integer (how many digests a seen set holds), else ValueError."""
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"dedup_capacity must be a positive integer, not {capacity!r}")
    return int(capacity)


@dataclass(frozen=True)
class SeenState:
    """A source's seen set, besides its digests: sequence numbers and counters (kept as JSON)."""

    next: int = 0  # the sequence number the next recorded digest gets (= digests ever recorded)
    low: int = 0  # the oldest sequence number still held (= digests ever dropped for capacity)
    skipped: int = 0  # batches skipped as already seen

    @property
    def size(self) -> int:
        """Digests held now."""
        return self.next - self.low

    def to_json(self) -> dict:
        return {"next": self.next, "low": self.low, "skipped": self.skipped}

    @staticmethod
    def from_json(data: dict | None) -> "SeenState":
        data = data or {}
        return SeenState(int(data.get("next", 0)), int(data.get("low", 0)), int(data.get("skipped", 0)))


@dataclass(frozen=True)
class Decision:
    """What to do with one batch: skip it, or record its digest as ``record`` and drop ``evict``."""

    skip: bool
    record: int | None  # the sequence number the digest is recorded under (None when skipped)
    evict: range  # sequence numbers to drop, oldest first
    after: SeenState


def decide(state: SeenState, seen: bool, capacity: int) -> Decision:
    """A batch whose digest is ``seen`` is skipped; any other is recorded, dropping the oldest digests
    beyond ``capacity``."""
    if seen:
        return Decision(True, None, range(0), SeenState(state.next, state.low, state.skipped + 1))
    record = state.next
    after_next = record + 1
    low = max(state.low, after_next - capacity)
    return Decision(False, record, range(state.low, low), SeenState(after_next, low, state.skipped))
