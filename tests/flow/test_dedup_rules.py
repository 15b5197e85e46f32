"""flow/dedup.py's pure rules (no store, no Spark): digests are order-insensitive and content-exact;
decide skips seen batches, records the others with consecutive sequence numbers, drops the oldest
beyond capacity and counts what it dropped."""

from __future__ import annotations

import decimal
import random

import pyarrow as pa
import pytest

from freshview.flow import dedup
from freshview.flow.dedup import Decision, SeenState, decide
from freshview.formats.debezium import Change


def table(ids, weights, names=None):
    return pa.table({"c0": pa.array(ids, pa.int32()),
                     "c1": pa.array(names if names is not None else [f"n{i}" for i in ids], pa.string()),
                     "c2": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(10, 2)),
                     "_weight": pa.array(weights, pa.int64())})


def test_the_digest_ignores_row_order_and_chunking():
    t = table(list(range(50)), [1] * 25 + [-1] * 25)
    d = dedup.digest(t)
    assert len(d) == dedup.DIGEST_BYTES
    rng = random.Random(1)
    for _ in range(5):
        order = list(range(50))
        rng.shuffle(order)
        assert dedup.digest(t.take(pa.array(order))) == d
    assert dedup.digest(pa.concat_tables([t.slice(0, 10), t.slice(10)])) == d


def test_the_digest_sees_every_value_weight_and_count():
    t = table([1, 2, 3], [1, 1, 1])
    d = dedup.digest(t)
    assert dedup.digest(table([1, 2, 3], [1, 1, -1])) != d  # a weight
    assert dedup.digest(table([1, 2, 4], [1, 1, 1])) != d  # a value
    assert dedup.digest(table([1, 2, 3], [1, 1, 1], ["n1", "n2", None])) != d  # NULL is a value
    assert dedup.digest(table([1, 2], [1, 1])) != d  # a row fewer
    assert dedup.digest(table([1, 2, 3, 3], [1, 1, 1, 1])) != d  # a row repeated (a sum, not XOR)
    assert dedup.digest(table([], [])) != dedup.digest(table([1], [1]))
    # Swapping values between rows changes the rows, so the digest.
    assert dedup.digest(table([1, 2], [1, -1])) != dedup.digest(table([1, 2], [-1, 1]))


def test_debezium_changes_digest_is_order_insensitive_and_includes_the_envelope():
    types = [pa.int32(), pa.string()]
    a = Change(0, "c", None, (1, "x"), 1000, {"lsn": 5})
    b = Change(1, "u", (1, "x"), (1, "y"), 1001, {"lsn": 6})
    c = Change(2, "d", (2, None), None, 1002, {"lsn": 7})
    d = dedup.changes_digest([a, b, c], types)
    assert dedup.changes_digest([c, a, b], types) == d
    assert dedup.changes_digest([a, b], types) != d
    assert dedup.changes_digest([a, b, Change(2, "d", (2, None), None, 1003, {"lsn": 7})], types) != d  # ts_ms
    assert dedup.changes_digest([a, b, Change(2, "d", (2, None), None, 1002, {"lsn": 8})], types) != d  # position
    assert dedup.changes_digest([a, b, Change(2, "d", None, (2, None), 1002, {"lsn": 7})], types) != d  # side


def test_words_round_trip():
    d = dedup.digest(table([7], [1]))
    hi, lo = dedup.words(d)
    assert 0 <= hi < 2**64 and 0 <= lo < 2**64
    with pytest.raises(ValueError):
        dedup.words(b"short")


def test_decide_skips_what_was_seen_and_counts_it():
    state = SeenState(next=5, low=2, skipped=1)
    assert decide(state, seen=True, capacity=10) == Decision(True, None, range(0), SeenState(5, 2, 2))


def test_decide_records_with_consecutive_sequence_numbers_below_capacity():
    state = SeenState()
    for i in range(3):
        decision = decide(state, seen=False, capacity=3)
        assert not decision.skip and decision.record == i and not decision.evict
        state = decision.after
    assert state == SeenState(3, 0, 0) and state.size == 3


def test_decide_drops_the_oldest_beyond_capacity():
    state = SeenState(next=3, low=0)
    decision = decide(state, seen=False, capacity=3)
    assert decision.record == 3 and list(decision.evict) == [0] and decision.after == SeenState(4, 1, 0)
    state = decision.after
    for _ in range(10):
        state = decide(state, seen=False, capacity=3).after
    assert state.size == 3 and state.low == 11  # low: how many were ever dropped
    # A state over capacity (e.g. resumed with a smaller one) drops all the excess at once.
    decision = decide(SeenState(next=10, low=0), seen=False, capacity=4)
    assert list(decision.evict) == list(range(7)) and decision.after.size == 4


def test_capacity_of_one_keeps_only_the_last_batch():
    state = SeenState()
    for i in range(4):
        decision = decide(state, seen=False, capacity=1)
        assert list(decision.evict) == ([i - 1] if i else [])
        state = decision.after
    assert state == SeenState(4, 3, 0)


def test_state_json_round_trip_and_defaults():
    state = SeenState(9, 4, 2)
    assert SeenState.from_json(state.to_json()) == state
    assert SeenState.from_json(None) == SeenState()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True, None])
def test_capacity_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="dedup_capacity"):
        dedup.check_capacity(bad)
    assert dedup.check_capacity(10_000_000) == 10_000_000
