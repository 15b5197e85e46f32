"""The query fuzzer's fixed-seed run, part of the default suite.

A few generated cases (a random schema and four random views each, see
``tests/fuzz/generate.py``) run through random change streams under each
executor and are compared with PostgreSQL after every step.  The seeds are
fixed, so a red run replays with the command in its message.  Failures the
fuzzer found are kept as regression tests in ``tests/fuzz/regressions``; the
long run for developers is ``python3 -m tests.fuzz --seconds 3600``.

A test that cannot fail is a defect: ``test_the_fuzzer_catches_a_wrong_result``
feeds the runner a flow that answers one view wrongly.
"""

from __future__ import annotations

import pytest

from tests.fuzz.generate import FEATURES, Case, Table, make_case
from tests.fuzz.run import Stats, run_case

LOCAL_SEEDS = (100, 101, 102)  # 102: the window-in-a-subquery crash it found
SPARK_SEEDS = range(200, 202)
SLOW_SEEDS = range(301, 306)


def _check(stats: Stats, min_passed: int) -> None:
    print(stats.summary())
    assert not stats.invalid, "PostgreSQL rejected generated SQL (a generator bug):\n" + "\n".join(stats.invalid)
    assert not stats.failures, "\n\n".join(f.render() for f in stats.failures)
    assert stats.passed >= min_passed, f"too few views compared: {stats.summary()}"


def test_fuzz_fixed_seeds_in_process(make_flow, oracle):
    stats = Stats()
    for seed in LOCAL_SEEDS:
        run_case(make_case(seed), make_flow, oracle, steps=4, executions=["local"], stats=stats)
    _check(stats, min_passed=len(LOCAL_SEEDS) * 2)


def test_fuzz_fixed_seeds_spark(make_flow, oracle):
    stats = Stats()
    for seed in SPARK_SEEDS:
        run_case(make_case(seed, queries=3), make_flow, oracle, steps=3, executions=["spark"], stats=stats)
    _check(stats, min_passed=len(SPARK_SEEDS))


@pytest.mark.slow
def test_fuzz_more_seeds_both_executors(make_flow, oracle):
    stats = Stats()
    for seed in SLOW_SEEDS:
        run_case(make_case(seed), make_flow, oracle, steps=6, stats=stats)
    _check(stats, min_passed=len(SLOW_SEEDS) * 2)


def test_generation_is_reproducible_and_switchable():
    assert make_case(7).queries == make_case(7).queries
    off = {name: False for name in ("window", "setop", "cte", "derived_table", "exists", "in_subquery",
                                    "scalar_subquery", "group_by", "order_limit")}
    text = " ".join(q for seed in range(30) for q in make_case(seed, features=off).queries)
    for word in (" OVER ", " UNION ", " INTERSECT ", " EXCEPT ", "WITH w", "EXISTS", " LIMIT ", "GROUP BY"):
        assert word not in text
    everything = " ".join(q for seed in range(30) for q in make_case(seed).queries)
    for word in ("LATERAL (", "DISTINCT ON (", "GROUP BY ROLLUP", "(VALUES (", "unnest(", "jsonb_array_elements_text(",
                 " -> ", " ->> ", "= ANY("):
        assert word in everything, word  # the constructs of issue 23 are generated
    assert all(FEATURES[name] for name in ("lateral", "values", "distinct_on", "grouping_sets", "noneq_correlation",
                                           "json", "arrays", "unnest"))


class _WrongFlow:
    """A flow whose snapshots of one view lose a row: the runner must report it."""

    def __init__(self, flow, view):
        self._flow, self._view = flow, view

    def __getattr__(self, name):
        return getattr(self._flow, name)

    def snapshot(self, name, *args, **kwargs):
        table = self._flow.snapshot(name, *args, **kwargs)
        return table.slice(1) if name == self._view and table.num_rows else table


def test_the_fuzzer_catches_a_wrong_result(make_flow, oracle):
    case = Case(1, [Table("t0", [("i1", "int"), ("s1", "text")], [])],
                ["SELECT a0.i1 AS x0, a0.s1 AS x1 FROM t0 AS a0", "SELECT COUNT(*) AS x2 FROM t0 AS a1"])
    stats = run_case(case, lambda **kw: _WrongFlow(make_flow(**kw), "q1"), oracle, steps=2,
                     executions=["local"])
    assert [(f.kind, f.index, f.step) for f in stats.failures] == [("wrong", 1, 0)]
    assert "replay: python3 -m tests.fuzz --seed 1 --only 1" in stats.failures[0].render()
    assert stats.passed == 1
