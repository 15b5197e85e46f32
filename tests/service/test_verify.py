"""``verify_view``'s decisions (``service.verify``), without a database: the change between the result
tables' position and the snapshot's, the tolerance, the message, the periodic schedule."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pytest

from freshview.connectors.base import ResultSpec
from freshview.plan.shape import ResultKey
from freshview.schema import parse_type
from freshview.service import verify
from freshview.service.verify import Job, Recorded, Retry


@dataclass(frozen=True, order=True)
class Pos:
    value: int

    def to_text(self) -> str:
        return f"0/{self.value:X}"


def spec(*columns: tuple[str, str]) -> ResultSpec:
    return ResultSpec("public.v", tuple((n, parse_type(t)) for n, t in columns), ResultKey((0,), False, False))


JOB = Job("public.v", "SELECT ...", spec(("k", "integer")))


def change(values: list[int], weight: int = 1) -> pa.Table:
    return pa.table({"k": pa.array(values, pa.int32()), "_weight": pa.array([weight] * len(values), pa.int64())})


def as_counter(table: pa.Table | None) -> Counter:
    out: Counter = Counter()
    if table is not None:
        for k, w in zip(table.column("k").to_pylist(), table.column("_weight").to_pylist()):
            out[k] += w
    return +out


@pytest.mark.parametrize("seed", range(30))
def test_the_change_between_the_results_and_the_snapshot_is_exactly_the_view_at_the_snapshot(seed):
    """A stream of transactions, each changing the view; steps group them at random (whole transactions,
    in order); the results are at some step's end P, the snapshot at some transaction Y >= P.  Whatever
    the grouping, ``window_delta`` is either a Retry or exactly the view's change over (P, Y], so the
    result table at P plus it is the view at Y."""
    rng = random.Random(seed)
    n = 40
    per_txn = [[rng.randint(0, 5) for _ in range(rng.randint(0, 3))] for _ in range(n + 1)]  # txn i: rows added
    steps: list[Recorded] = []
    i = 1
    while i <= n:
        size = rng.randint(1, 4)
        members = range(i, min(n, i + size - 1) + 1)
        rows = [v for t in members for v in per_txn[t]]
        outputs = {"public.v": change(rows)} if rows else {}
        if rng.random() < 0.1:
            outputs["public.other"] = change([1])  # another view's change: no matter
        steps.append(Recorded(Pos(members[0]), Pos(members[-1]), outputs))
        i = members[-1] + 1
    results_step = rng.randrange(len(steps))
    results_at = steps[results_step].last if rng.random() < 0.9 else None
    snapshot_at = Pos(rng.randint(results_at.value if results_at else 0, n))
    found = verify.window_delta(steps, results_at, snapshot_at, JOB)
    straddles = any(s.first <= snapshot_at < s.last for s in steps)
    if straddles:
        assert isinstance(found, Retry)
        return
    assert not isinstance(found, Retry)
    start = results_at.value if results_at else 0
    expected = Counter(v for t in range(start + 1, snapshot_at.value + 1) for v in per_txn[t])
    assert as_counter(found) == +expected


def test_steps_after_the_snapshot_are_not_taken():
    steps = [Recorded(Pos(1), Pos(2), {"public.v": change([1])}),
             Recorded(Pos(5), Pos(6), {"public.v": change([2])})]
    assert as_counter(verify.window_delta(steps, None, Pos(4), JOB)) == Counter({1: 1})


def test_rows_that_match_within_the_tolerance_are_paired_off_and_the_others_named():
    loose = verify.approximate(spec(("k", "integer"), ("total", "numeric"), ("avg", "double precision"),
                                    ("name", "text")))
    assert loose == (False, True, True, False)
    differences = [(1, ("1", "10.000000000001", "0.3333333333333333", "a")),
                   (-1, ("1", "10.000000000000", "0.33333333333333337", "a")),   # within 1e-9: the same row
                   (1, ("2", "5.00", "1", "b")), (-1, ("2", "6.00", "1", "b")),      # a damaged total
                   (-2, ("3", "1", "1", "c"))]                                     # a row twice too many
    missing, extra = verify.settle(differences, loose)
    assert missing == [(("2", "5.00", "1", "b"), 1)]
    assert extra == [(("2", "6.00", "1", "b"), 1), (("3", "1", "1", "c"), 2)]
    text = verify.report("public.v", "0/1A", missing, extra, ["k", "total", "avg", "name"])
    assert text == ("freshview: view public.v differs from its SQL at 0/1A (4 rows; columns (k, total, avg, name)):\n"
                    "  missing from the result table: (2, 5.00, 1, b)\n"
                    "  extra in the result table:     (2, 6.00, 1, b)\n"
                    "  extra in the result table:     (3, 1, 1, c) x2")
    assert verify.report("public.v", "0/1A", [], [], ["k"]) is None


def test_text_columns_are_never_loose_and_nulls_match_only_nulls():
    missing, extra = verify.settle([(1, ("1", None)), (-1, ("1", "0"))], (False, True))
    assert missing and extra
    missing, extra = verify.settle([(1, ("1.0", "x")), (-1, ("1", "x"))], (False, False))
    assert missing and extra  # '1.0' is not '1' in a text or integer column


def test_a_long_difference_shows_a_few_rows_and_how_many_more():
    missing = [((str(i),), 1) for i in range(12)]
    text = verify.report("public.v", "0/1", missing, [], ["k"])
    assert text.count("missing from") == verify.SHOWN and text.endswith("... and 7 more")


def test_periodic_checks_are_staggered_over_the_period_and_then_come_round_again():
    views = ["a", "b", "c", "d"]
    start, every = 1000.0, 3600.0
    first = {v: min(t for t in range(0, 3601, 60) if verify.next_due(views, {}, start, every, start + t) == v)
             for v in views[:1]}
    assert first == {"a": 900}  # a quarter of the period in
    last: dict[str, float] = {}
    order = []
    for t in range(0, 2 * 3600 + 1, 60):
        now = start + t
        due = verify.next_due(views, last, start, every, now)
        if due is not None:
            last[due] = now
            order.append((t, due))
    assert order == [(900, "a"), (1800, "b"), (2700, "c"), (3600, "d"),
                     (4500, "a"), (5400, "b"), (6300, "c"), (7200, "d")]
    assert verify.next_due([], {}, start, every, start + 10 * every) is None


def test_the_period_is_read_as_an_interval():
    assert verify.every("1h") == 3600 and verify.every("30 minutes") == 1800 and verify.every("90") == 90
    with pytest.raises(Exception, match="cannot read the interval"):
        verify.every("soon")
    with pytest.raises(Exception, match="positive"):
        verify.every("0")


def test_a_freshview_view_read_is_read_through_a_with_query():
    from freshview.sql.rename import reading_as

    as_cte = {"customer_totals": "fv_verify_0"}
    assert reading_as("SELECT region, SUM(total) FROM customer_totals GROUP BY region", "postgres", "public",
                      as_cte) == "SELECT region, SUM(total) FROM fv_verify_0 AS customer_totals GROUP BY region"
    assert reading_as("SELECT c.region FROM public.customer_totals c JOIN orders o ON o.customer = c.customer",
                      "postgres", "public", as_cte) == (
        "SELECT c.region FROM fv_verify_0 c JOIN orders o ON o.customer = c.customer")
    same_name = "WITH customer_totals AS (SELECT 1 AS x) SELECT x FROM customer_totals"
    assert reading_as(same_name, "postgres", "public", as_cte) == same_name
