"""Entry point of the benchmark suites (not tests: nothing here asserts a speed).

    python3 -m benchmarks run --suite tpch --sf 1            # TPC-H views: step vs Spark vs PostgreSQL
    python3 -m benchmarks run --suite tpch --sf 0.1 --steps 20 --views q1,q3,jfa
    python3 -m benchmarks run --suite tpcds --sf 1           # TPC-DS views (tpcgen-cli data), as tpch
    python3 -m benchmarks run --suite peers --sf 0.1          # the peers' workload (research/peers.md); and --sf 1
    python3 -m benchmarks.step_vs_recompute --rows 1000000 5000000 20000000   # state-size scaling
    python3 -m benchmarks.service_latency                    # the PostgreSQL service end to end
    python3 -m benchmarks.sink_write                         # one step's result write into PostgreSQL
    python3 -m benchmarks.snapshot_read                      # the snapshot readers: rows/s, CSV vs binary COPY + projection
    python3 -m benchmarks.mysql_cdc                          # MariaDB: snapshot rows/s, binlog decode + delta changes/s
    python3 -m benchmarks.debezium                           # Debezium JSON messages decoded and applied per second

Results print as Markdown, go to ``benchmarks/out/*.json`` (the peers suite:
``docs/results/peers_sf<sf>.json``) and (``--write-doc``) replace the suite's
section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.report import ROOT


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a suite")
    run.add_argument("--suite", choices=["tpch", "tpcds", "peers"], default="tpch")
    run.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor")
    run.add_argument("--steps", type=int, default=20, help="timed refresh steps (peers: the workload's 20)")
    run.add_argument("--warmup", type=int, default=3, help="untimed steps first (tpch only)")
    run.add_argument("--fraction", type=float, default=0.001,
                     help="share of lineitem inserted, deleted and updated per step (0.001 = 0.1%%; tpch only)")
    run.add_argument("--repeats", type=int, default=3, help="timed recomputes/refreshes per view (median; tpch only)")
    run.add_argument("--views", default="all", help="comma-separated view names (tpch: q1..q22, jfa; tpcds: q1..q99) or all")
    run.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL REFRESH")
    run.add_argument("--write-doc", action="store_true", help="replace the suite's section of docs/benchmarks.md")
    run.add_argument("--workdir", type=Path, default=None, help="state and Parquet files (default: temporary)")
    run.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / "data", help="generated TPC-H data")
    run.add_argument("--pg-bindir", type=Path, default=None,
                     help="peers: a PostgreSQL bin directory whose tree has pg_ivm installed; times pg_ivm's step too")
    run.add_argument("--modes", default="auto,local,spark",
                     help="peers: freshview's execution modes to run (comma-separated)")
    args = parser.parse_args()

    if args.suite == "peers":
        from benchmarks.peers import suite as peers

        peers.run(args.sf, args.steps, args.workdir, args.cache, not args.no_postgres, args.write_doc,
                  args.pg_bindir, [m.strip() for m in args.modes.split(",")])
        return
    if args.suite == "tpcds":
        from benchmarks.tpcds import suite as tpcds
        from benchmarks.tpcds.queries import VIEWS as DS

        chosen = list(DS) if args.views == "all" else [v.strip() for v in args.views.split(",")]
        if unknown := [v for v in chosen if v not in DS]:
            parser.error(f"unknown views {unknown}; choose from q1..q99")
        tpcds.run(args.sf, args.steps, args.warmup, args.fraction, args.repeats, {v: DS[v] for v in chosen},
                  args.workdir, args.cache, not args.no_postgres, args.write_doc)
        return
    from benchmarks.tpch import suite
    from benchmarks.tpch.queries import VIEWS

    views = list(VIEWS) if args.views == "all" else [v.strip() for v in args.views.split(",")]
    unknown = [v for v in views if v not in VIEWS]
    if unknown:
        parser.error(f"unknown views {unknown}; choose from {list(VIEWS)}")
    suite.run(args.sf, args.steps, args.warmup, args.fraction, args.repeats, views, args.workdir, args.cache,
              not args.no_postgres, args.write_doc)


if __name__ == "__main__":
    main()
