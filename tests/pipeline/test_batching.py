"""The pipeline's pure decisions: which messages are replays, where a step ends, what the outbox re-delivers."""

import hypothesis.strategies as st
from hypothesis import given

from freshview.pipeline.batching import cut, fresh, transaction_of
from freshview.pipeline.outbox import recovery


def test_replays_are_the_prefix_at_or_below_the_applied_position():
    assert fresh([5, 6, 7], None) == 0
    assert fresh([5, 6, 7], 6) == 2
    assert fresh([5, 6, 7], 9) == 3
    assert fresh([], 3) == 0


def test_a_step_ends_at_a_transaction_boundary():
    tx = ["a", "a", "b", "b", "b"]
    assert cut(tx, 3, False) == 2  # not inside b
    assert cut(tx, 10, False) == 5
    assert cut(tx, 10, True) == 2  # b may still be arriving
    assert cut(["a", "a", "a"], 2, False) == 3  # one transaction larger than the limit: whole
    assert cut(["a", "a", "a"], 2, True) == 0  # ... once it is all there
    assert cut([None, None, None], 2, True) == 2  # messages without transactions: any boundary
    assert cut([None, "a"], 5, True) == 1
    assert cut([], 5, False) == 0


@given(st.lists(st.sampled_from(["a", "b", "c", None]), max_size=30), st.integers(1, 12), st.booleans())
def test_cut_never_splits_a_transaction_and_respects_the_limit(raw, limit, more):
    # consecutive equal ids are one transaction; make ids of separate runs distinct
    tx, run = [], 0
    for i, t in enumerate(raw):
        if i and t != raw[i - 1]:
            run += 1
        tx.append(None if t is None else f"{t}{run}")
    n = cut(tx, limit, more)
    assert 0 <= n <= len(tx)
    if 0 < n < len(tx):
        assert tx[n] is None or tx[n] != tx[n - 1]
    if more and tx and tx[-1] is not None:
        assert n < len(tx)  # the trailing transaction may still be arriving: held back
    if n > limit:  # only a single transaction runs past the limit
        assert len(set(tx[:n])) == 1 and tx[0] is not None
    if tx and not more and n == 0:
        raise AssertionError("with nothing more to come, a step always takes something")


def test_transaction_ids_with_and_without_the_envelope():
    assert transaction_of({"op": "c", "transaction": {"id": "571:53195832", "total_order": 1}}) == "571:53195832"
    assert transaction_of({"schema": {}, "payload": {"op": "c", "transaction": {"id": 7}}}) == "7"
    assert transaction_of({"op": "c"}) is None and transaction_of(b"junk") is None


def test_the_outbox_redelivers_what_committed_and_discards_the_rest():
    files = [(3, "b"), (1, "a"), (2, "a"), (4, "a")]
    assert recovery(files, 3) == ([(1, "a"), (2, "a"), (3, "b")], [(4, "a")])
    assert recovery(files, 0) == ([], sorted(files))
