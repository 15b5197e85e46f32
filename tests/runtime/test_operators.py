"""Each incremental operator against its non-incremental self, under each executor.

A circuit is built directly from plan nodes (no SQL), fed random weighted
changes step by step (hypothesis picks the stream's seed); the integral of its
output must equal a plain Python evaluation of the same operator over the
integrated inputs, after every step.  Step 0 is a first computation (Spark);
the later steps run on the executor under test, in-process or on Spark.
"""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshview import collation
from freshview.circuit import incrementalize
from freshview.plan import nodes as pn
from freshview.plan.expr import AggCall, Call, ColumnRef, Literal
from freshview.runtime.executor import CircuitRunner
from freshview.runtime.kernels.arrow import ArrowKernels
from freshview.runtime.relation import col_name
from freshview.runtime.state import SpineStateStore
from freshview.schema import SqlType
from freshview.sql.dialect import collation_key

INT, NUM, TEXT = SqlType("int4"), SqlType.numeric(10, 2), SqlType("text")
LEFT = pn.Scan("l", (("k", INT), ("v", NUM)))
RIGHT = pn.Scan("r", (("k", INT), ("s", TEXT)))


def arrow(columns, rows: Counter) -> pa.Table:
    items = [(r, w) for r, w in rows.items() if w]
    cols = list(zip(*[r for r, _ in items])) if items else [()] * len(columns)
    arrays = [pa.array(list(c), t.arrow) for c, (_, t) in zip(cols, columns)]
    names = [col_name(i) for i in range(len(columns))] + ["_weight"]
    return pa.Table.from_arrays(arrays + [pa.array([w for _, w in items], pa.int64())], names=names)


def random_change(rng, live: Counter, make_row) -> Counter:
    change: Counter = Counter()
    for _ in range(rng.randint(1, 8)):
        present = [r for r, w in live.items() if w > 0]
        if present and rng.random() < 0.4:
            row = rng.choice(present)
            change[row] -= 1
            live[row] -= 1
        else:
            row = make_row(rng)
            change[row] += 1
            live[row] += 1
    return change


def left_row(rng):
    return (rng.choice([1, 2, 3, None]), rng.choice([Decimal("1.50"), Decimal("-2.00"), Decimal("7.25"), None]))


def right_row(rng):
    return (rng.choice([1, 2, 3, None]), rng.choice(["a", "b", None]))


EXECUTORS = ["local", "spark"]
# Spark steps cost ~0.1-0.3 s each: fewer streams there, the same rules.
EXAMPLES = {"local": 25, "spark": 3}
SEEDS = st.integers(0, 2**16)


def examples(executor: str):
    return settings(max_examples=EXAMPLES[executor], derandomize=True, deadline=None,
                    suppress_health_check=list(HealthCheck))


def kernels_of(executor: str, spark):
    if executor == "local":
        return ArrowKernels()
    from freshview.runtime.kernels.spark import SparkKernels

    return SparkKernels(spark)


def first_kernels(spark):
    """A first computation's kernels on Spark, taking Spark's results in batches of 3 rows (``streams``)."""
    from freshview.runtime.kernels.spark import BulkKernels

    kernels = BulkKernels(spark)
    kernels.BATCH_ROWS = 3
    return kernels


def run(spark, tmp_path, plan, reference, steps=8, seed=0, executor="local", make_right=right_row):
    """Step 0 is a first computation on Spark (``BulkKernels``, results streamed in small batches); later steps
    run on ``executor``'s kernels."""
    store = SpineStateStore(tmp_path / f"s{seed}-{executor}")
    runner = CircuitRunner(incrementalize("t", plan), store)
    rng = random.Random(seed)
    live = {"l": Counter(), "r": Counter()}
    view: Counter = Counter()
    for step in range(steps):
        changes = {"l": random_change(rng, live["l"], left_row), "r": random_change(rng, live["r"], make_right)}
        tables = {"l": arrow(LEFT.columns, changes["l"]), "r": arrow(RIGHT.columns, changes["r"])}
        store.begin()
        kernels = first_kernels(spark) if step == 0 else kernels_of(executor, spark)
        out = runner.step(tables.get, kernels, force=(step == 0))
        kernels.finish()
        store.commit()
        for r in (out.to_pylist() if out is not None else []):
            w = r.pop("_weight")
            view[tuple(r.values())] += w
        view = Counter({r: w for r, w in view.items() if w})
        expect = Counter({r: w for r, w in reference(+live["l"], +live["r"]).items() if w})
        assert view == expect, f"seed={seed} step={step}"
    store.close()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_join_equals_recomputed_join(spark, tmp_path_factory, executor):
    plan = pn.Join(LEFT, RIGHT, (ColumnRef(INT, 0),), (ColumnRef(INT, 0),))

    def reference(l, r):
        out: Counter = Counter()
        for lr, lw in l.items():
            for rr, rw in r.items():
                if lr[0] is not None and lr[0] == rr[0]:
                    out[lr + rr] += lw * rw
        return out

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("j"), plan, reference, seed=seed, executor=executor)

    check()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_aggregate_equals_recomputed_aggregate(spark, tmp_path_factory, executor):
    v = ColumnRef(NUM, 1)
    plan = pn.Aggregate(LEFT, (ColumnRef(INT, 0),), (
        AggCall("count_star", None, SqlType("int8")), AggCall("count", v, SqlType("int8")),
        AggCall("sum", v, SqlType.numeric(None, 2)), AggCall("min", v, NUM), AggCall("max", v, NUM),
    ), ("k",))

    def reference(l, _r):
        groups: dict = {}
        for (k, val), w in l.items():
            groups.setdefault(k, []).extend([val] * w)
        out: Counter = Counter()
        for k, vals in groups.items():
            if not vals:
                continue
            nn = [x for x in vals if x is not None]
            out[(k, len(vals), len(nn), sum(nn) if nn else None, min(nn) if nn else None,
                 max(nn) if nn else None)] += 1
        return out

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("a"), plan, reference, steps=10, seed=seed, executor=executor)

    check()


SPELLINGS = ["a", "A", "a ", "b", "B", "é", "E", "e", None]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_spelling_equals_recomputed_min_of_each_collation_group(spark, tmp_path_factory, executor):
    """GROUP BY a case-insensitive text column shows the group's least spelling: ``spelling`` is MIN,
    whichever groups hold one spelling (no multiset) or several (seeded when they turn mixed)."""
    s = ColumnRef(TEXT, 1)
    key = collation_key(s, "utf8mb4_general_ci")
    plan = pn.Aggregate(RIGHT, (key, ColumnRef(INT, 0)), (
        AggCall("count_star", None, SqlType("int8")), AggCall("spelling", s, TEXT)), ("g", "k"))

    def mostly_one_spelling(rng):  # most groups keep a single spelling for a while
        spelled = rng.choice(SPELLINGS) if rng.random() < 0.3 else rng.choice(["a", "b", "e", None])
        return (rng.choice([1, 2, None]), spelled)

    def reference(_l, r):
        groups: dict = {}
        for (k, v), w in r.items():
            groups.setdefault((None if v is None else collation.key(v), k), []).extend([v] * w)
        return Counter({g + (len(vs), min((v for v in vs if v is not None), default=None)): 1
                        for g, vs in groups.items() if vs})

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("sp"), plan, reference, steps=12, seed=seed, executor=executor,
            make_right=mostly_one_spelling)

    check()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_linear_filter_and_project(spark, tmp_path_factory, executor):
    pred = Call(SqlType("bool"), ">", (ColumnRef(NUM, 1), Literal(NUM, Decimal("0"))))
    plan = pn.Project(pn.Filter(LEFT, pred), (ColumnRef(INT, 0),), ("k",))

    def reference(l, _r):
        out: Counter = Counter()
        for (k, val), w in l.items():
            if val is not None and val > 0:
                out[(k,)] += w
        return out

    @examples(executor)
    @given(seed=SEEDS)
    def check(seed):
        run(spark, tmp_path_factory.mktemp("f"), plan, reference, seed=seed, executor=executor)

    check()


@pytest.mark.parametrize("threads", [False, True])
def test_the_in_process_join_kernel_joins_the_same_rows_on_acero_threads(monkeypatch, threads):
    # A large join (a first computation's) runs on Acero's threads: the same rows, in some order.
    from freshview.algebra import parallel

    monkeypatch.setattr(parallel, "MIN_ROWS", 8 if threads else 10**12)
    monkeypatch.setattr(parallel, "WORKERS", 2)
    rng = random.Random(3)
    n = 3000
    left = pa.table({"c0": pa.array([rng.choice([1.5, -0.0, 0.0, None]) for _ in range(n)], pa.float64()),
                     "k0": pa.array([rng.choice([None] + list(range(300))) for _ in range(n)], pa.int32()),
                     "lw": pa.array([rng.choice([1, 2, -1]) for _ in range(n)], pa.int64())})
    right = pa.table({"c0": pa.array([rng.choice(["a", "b", None]) for _ in range(n)], pa.string()),
                      "k0": pa.array([rng.choice([None] + list(range(300))) for _ in range(n)], pa.int32()),
                      "rw": pa.array([rng.choice([1, 3]) for _ in range(n)], pa.int64())})
    schema = pa.schema([("c0", pa.float64()), ("c1", pa.string()), ("_weight", pa.int64())])
    got = ArrowKernels().join(left, right, 1, schema, {})
    want: Counter = Counter()
    by_key: dict = {}
    for r in right.to_pylist():
        by_key.setdefault(r["k0"], []).append(r)
    for l in left.to_pylist():
        for r in by_key.get(l["k0"], []) if l["k0"] is not None else []:
            want[(l["c0"], r["c0"])] += l["lw"] * r["rw"]
    counted: Counter = Counter()
    for row in got.to_pylist():
        counted[(row["c0"], row["c1"])] += row["_weight"]
    nonzero = (lambda c: {k: v for k, v in c.items() if v})
    assert got.schema == schema and nonzero(counted) == nonzero(want) and len(nonzero(want)) > 5
