"""A dedup source's seen set in the flow's state store; the rules it follows are ``flow.dedup`` (pure).

Two arrangements per source, both O(1) rows touched per step whatever the capacity: ``dedup-seen/<s>``
(the digest's two words, the key) answers "seen?" with one lookup, and ``dedup-order/<s>`` (keyed by
an insertion sequence number, the digest as values) finds the oldest digests to drop; the meta key
``dedup/<s>`` holds the counters (``dedup.SeenState``).  ``decide`` reads (before the step), ``record``
writes inside the step's transaction, so a failed step records nothing.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import negate
from freshview.circuit import arrangements
from freshview.flow import dedup
from freshview.runtime.state.layout import Layout
from freshview.schema import WEIGHT

SEEN_LAYOUT = Layout(pa.schema([("hi", pa.uint64()), ("lo", pa.uint64())]), ("hi", "lo"))
SEEN_ORDER_LAYOUT = Layout(pa.schema([("seq", pa.int64()), ("hi", pa.uint64()), ("lo", pa.uint64())]), ("seq",))

__all__ = ["SEEN_LAYOUT", "SEEN_ORDER_LAYOUT", "decide", "drop", "ensure", "record", "seen", "state"]


def ensure(store, source: str) -> None:
    """Create the source's seen set (inside a transaction)."""
    store.ensure_arrangement(arrangements.dedup_seen(source), SEEN_LAYOUT)
    store.ensure_arrangement(arrangements.dedup_order(source), SEEN_ORDER_LAYOUT)


def drop(store, source: str) -> None:
    """Forget the source's seen set, if it has one (inside a transaction)."""
    for name in (arrangements.dedup_seen(source), arrangements.dedup_order(source)):
        if store.has_arrangement(name):
            store.drop_arrangement(name)
    store.delete_meta(arrangements.dedup_meta(source))


def state(store, source: str) -> dedup.SeenState:
    return dedup.SeenState.from_json(store.get_meta(arrangements.dedup_meta(source)))


def seen(store, source: str, digest: bytes) -> bool:
    """Whether ``digest`` is in the source's seen set (one lookup by digest)."""
    hi, lo = dedup.words(digest)
    found = store.lookup(arrangements.dedup_seen(source), pa.table({"hi": pa.array([hi], pa.uint64()),
                                                                     "lo": pa.array([lo], pa.uint64())}))
    return bool(found.num_rows) and bool(pc.any(pc.greater(found.column(WEIGHT), 0)).as_py())


def decide(store, source: str, digest: bytes, capacity: int) -> dedup.Decision:
    """Skip the batch (seen before), or record its digest and drop the oldest beyond ``capacity``."""
    return dedup.decide(state(store, source), seen(store, source, digest), capacity)


def record(store, source: str, digest: bytes, decision: dedup.Decision) -> int:
    """Inside the step's transaction: apply ``decision`` (the digest recorded, the oldest dropped, the
    counters); how many digests were dropped."""
    dropped = 0
    if not decision.skip:
        hi, lo = dedup.words(digest)
        order = pa.table({"seq": pa.array([decision.record], pa.int64()), "hi": pa.array([hi], pa.uint64()),
                          "lo": pa.array([lo], pa.uint64()), WEIGHT: pa.array([1], pa.int64())})
        if decision.evict:  # the oldest digests, found by sequence number, leave both arrangements
            old = store.lookup(arrangements.dedup_order(source),
                               pa.table({"seq": pa.array(list(decision.evict), pa.int64())}))
            old = old.filter(pc.greater(old.column(WEIGHT), 0))
            order = pa.concat_tables([order, negate(old).cast(order.schema)])
            dropped = len(decision.evict)
        store.apply(arrangements.dedup_order(source), order)
        store.apply(arrangements.dedup_seen(source), order.select(["hi", "lo", WEIGHT]))
    store.set_meta(arrangements.dedup_meta(source), decision.after.to_json())
    return dropped
