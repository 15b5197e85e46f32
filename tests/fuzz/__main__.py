"""The query fuzzer from the command line (the long run for developers).

    python3 -m tests.fuzz --seconds 3600            # new seeds until the hour is up
    python3 -m tests.fuzz --seed 1234 --only 2      # replay one failure
    python3 -m tests.fuzz --seed 1234 --only 2 --executors local --shrink 300   # and shrink it
    python3 -m tests.fuzz --seed 1 --cases 50 --executors local --features +lateral,-window

Starts its own throwaway PostgreSQL (or uses ``$FRESHVIEW_TEST_PG_DSN``) and a
local Spark session.  Prints every failure as it is found, and a summary
(queries run, refusals by message, failures by kind) at the end; exits 1 if
anything failed or PostgreSQL rejected a generated query.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

# The checkout's own src/ first (as pytest's config does), not whatever freshview is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from freshview.runtime.cost import EXECUTORS  # noqa: E402
from tests.fuzz.generate import FEATURES, make_case  # noqa: E402
from tests.fuzz.run import Stats, run_case  # noqa: E402
from tests.fuzz.shrink import shrink  # noqa: E402


def _features(text: str) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, on = (item[1:], item[0] == "+") if item[0] in "+-" else (item, True)
        if name not in FEATURES:
            raise SystemExit(f"unknown feature {name!r}; known: {', '.join(sorted(FEATURES))}")
        out[name] = on
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tests.fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: from the clock)")
    ap.add_argument("--seconds", type=float, default=0, help="run new seeds until this much time passed")
    ap.add_argument("--cases", type=int, default=None, help="number of seeds (default 1, or unbounded with --seconds)")
    ap.add_argument("--queries", type=int, default=4, help="views per seed")
    ap.add_argument("--steps", type=int, default=6, help="change steps after the initial load")
    ap.add_argument("--only", default=None, help="comma-separated query indices of the seed to run")
    ap.add_argument("--executors", default=",".join(EXECUTORS))
    ap.add_argument("--features", default="", help="e.g. +lateral,-window (see tests/fuzz/generate.py FEATURES)")
    ap.add_argument("--shrink", type=float, default=0, metavar="SECONDS",
                    help="shrink each failing query for up to this long (drop clauses while it still fails)")
    ap.add_argument("--print-sql", action="store_true", help="print the schema and queries of each seed")
    args = ap.parse_args(argv)

    from freshview import IncrementalFlow
    from freshview.runtime.spark import get_session, stop_session
    from tests.support.oracle import PgOracle
    from tests.support.pg import postgres_dsn

    first = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    cases = args.cases if args.cases is not None else (None if args.seconds else 1)
    only = [int(x) for x in args.only.split(",")] if args.only else None
    executions = [e.strip() for e in args.executors.split(",") if e.strip()]
    features = _features(args.features)
    stats = Stats()
    deadline = time.monotonic() + args.seconds if args.seconds else None
    spark = get_session()
    try:
        with postgres_dsn() as dsn, PgOracle(dsn) as oracle, tempfile.TemporaryDirectory() as tmp:
            counter = itertools.count()

            def make_flow(**kwargs):
                return IncrementalFlow(spark=spark, state_dir=Path(tmp) / f"flow{next(counter)}", **kwargs)

            seeds = itertools.count(first) if cases is None else range(first, first + cases)
            for seed in seeds:
                if deadline is not None and time.monotonic() > deadline:
                    break
                case = make_case(seed, args.queries, features)
                if args.print_sql:
                    print(f"seed={seed}\n{case.schema_text()}")
                    for i, q in enumerate(case.queries):
                        print(f"  q{i}: {q}")
                before = len(stats.failures), len(stats.invalid)
                run_case(case, make_flow, oracle, steps=args.steps, executions=executions, only=only, stats=stats)
                for f in stats.failures[before[0]:]:
                    print(f.render(), flush=True)
                    if args.shrink:
                        small = shrink(case, f, make_flow, oracle, args.shrink,
                                       log=lambda s: print("  ", s, file=sys.stderr, flush=True))
                        print(f"  shrunk: {small}", flush=True)
                for text in stats.invalid[before[1]:]:
                    print("GENERATOR BUG (PostgreSQL rejected):", text, flush=True)
                print(f"seed={seed} done: {stats.summary().splitlines()[0]}", file=sys.stderr, flush=True)
    finally:
        stop_session()
    print(f"seeds {first}..{first + stats.cases - 1}")
    print(stats.summary())
    return 1 if stats.failures or stats.invalid else 0


if __name__ == "__main__":
    sys.exit(main())
