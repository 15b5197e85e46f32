"""The TPC-DS suite: every TPC-DS view freshview maintains, incremental step vs Spark recompute vs PostgreSQL REFRESH.

As the TPC-H suite (``benchmarks/tpch/suite.py``), one run on one machine with
the same data for all three:

1. ``tpcgen-cli`` data at ``--sf`` (the columns the views read) is loaded
   into an ``IncrementalFlow`` and into a throwaway PostgreSQL (tables + one
   MATERIALIZED VIEW per view); each view is registered and its first
   computation timed.  A query freshview refuses is listed with the reason.
2. ``--warmup`` untimed, then ``--steps`` timed steps of fact-table changes
   (``benchmarks.tpcds.data.RefreshStream``, ``--fraction`` of each fact table
   per kind) go through one ``tick`` each; PostgreSQL gets the same changes.
3. After the last step: Spark SQL recomputes every view from Parquet (median
   of ``--repeats``), PostgreSQL runs ``REFRESH MATERIALIZED VIEW`` (median of
   ``--repeats``), and each incremental result is compared with PostgreSQL's.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import sqlglot

from benchmarks.profiling import StepProfile
from benchmarks.report import machine, machine_line, median, p95, write_json, write_section
from benchmarks.tpcds.data import PRIMARY_KEYS, WEIGHT, RefreshStream, Tables, columns_read, generate
from benchmarks.tpcds.queries import postgres_15_sql
from benchmarks.tpch.suite import LOAD_CHUNK, TARGET_VS_POSTGRES, TARGET_VS_SPARK, Postgres, _ratio, _spark_recompute


def run(sf: float, steps: int, warmup: int, fraction: float, repeats: int, views: dict[str, str],
        workdir: Path | None, cache: Path, use_postgres: bool, write_doc: bool) -> dict[str, Any]:
    from freshview import IncrementalFlow
    from freshview.runtime.spark import get_session

    info = machine()
    workdir = workdir or Path(tempfile.mkdtemp(prefix="freshview-tpcds-"))
    print(f"generating TPC-DS SF {sf:g} with tpcgen-cli ...", flush=True)
    tables = Tables.load(generate(sf, cache), columns_read(views))
    sizes = {name: t.num_rows for name, t in tables.data.items()}
    spark = get_session()
    flow = IncrementalFlow(spark=spark, state_dir=workdir / "state")
    started = time.perf_counter()
    for name, table in tables.data.items():
        flow.register_source(name, tables.ddl(name), primary_key=PRIMARY_KEYS[name])
        for offset in range(0, table.num_rows, LOAD_CHUNK):
            chunk = table.slice(offset, LOAD_CHUNK)
            flow.tick(name, chunk.append_column(WEIGHT, pa.array([1] * chunk.num_rows, pa.int64())))
    source_load_s = time.perf_counter() - started
    print(f"sources loaded into freshview in {source_load_s:.0f} s: {sizes}", flush=True)

    initial_s: dict[str, float] = {}
    refused: dict[str, str] = {}
    for name, sql in views.items():
        started = time.perf_counter()
        try:
            flow.register_view(name, sql)
        except Exception as exc:  # a refusal (UnsupportedSqlError ...): listed with its reason
            refused[name] = str(exc).splitlines()[0]
            print(f"  view {name}: refused: {refused[name]}", flush=True)
            continue
        initial_s[name] = time.perf_counter() - started
        print(f"  view {name}: first computation {initial_s[name]:.1f} s", flush=True)
    chosen = {n: views[n] for n in initial_s}
    pg = Postgres(tables, {n: postgres_15_sql(sql, n) for n, sql in chosen.items()},
                  primary_keys=PRIMARY_KEYS) if use_postgres else None

    stream = RefreshStream(tables, fraction)
    view_ms: dict[str, list[float]] = {n: [] for n in chosen}
    tick_ms: list[float] = []
    rows_in: list[int] = []
    for i in range(warmup + steps):
        deltas = stream.step()
        profile = StepProfile()
        with profile:
            summary = flow.tick(deltas)
        if pg is not None:
            pg.apply(deltas)
        if i < warmup:
            continue
        tick_ms.append(summary.duration_ms)
        rows_in.append(summary.rows_in)
        for name in chosen:
            view = summary.views.get(name)
            view_ms[name].append(view.duration_ms if view and not view.skipped else 0.0)
        print(f"  step {i - warmup + 1}/{steps}: {summary.rows_in} rows in, {summary.duration_ms:.0f} ms", flush=True)

    print("recomputing with Spark and refreshing in PostgreSQL ...", flush=True)
    _spark_recompute(spark, tables, {}, workdir / "parquet", repeats)  # the tables as Parquet, as temp views
    spark_ms: dict[str, float | None] = {}
    for name, text in chosen.items():
        try:
            sql = sqlglot.transpile(text, read="postgres", write="spark")[0]
            spark.sql(sql).toArrow()  # warm-up
            runs = []
            for _ in range(repeats):
                started = time.perf_counter()
                spark.sql(sql).toArrow()
                runs.append((time.perf_counter() - started) * 1000)
            spark_ms[name] = statistics.median(runs)
        except Exception as exc:  # Spark SQL (via sqlglot) may not take every text
            print(f"  {name}: Spark could not run it: {str(exc).splitlines()[0][:200]}", flush=True)
            spark_ms[name] = None
    refresh_ms = pg.refresh(repeats) if pg is not None else {}
    from tests.support.oracle import diff_rows, table_rows

    reference = pg.results() if pg is not None else {}
    if pg is not None:
        pg.close()
    results = []
    for name in chosen:
        med = median(view_ms[name])
        equal = None
        if name in reference:
            only_a, only_e = diff_rows(table_rows(flow.snapshot(name)), reference[name])
            equal = not only_a and not only_e
        row = {"view": name, "step_ms_median": round(med, 1), "step_ms_p95": round(p95(view_ms[name]), 1),
               "spark_recompute_ms": None if spark_ms[name] is None else round(spark_ms[name], 1),
               "postgres_refresh_ms": round(refresh_ms[name], 1) if name in refresh_ms else None,
               "initial_s": round(initial_s[name], 1), "equal": equal, "rows": flow.snapshot(name).num_rows}
        row["vs_spark"] = round(row["spark_recompute_ms"] / med, 1) if med and row["spark_recompute_ms"] else None
        row["vs_postgres"] = round(row["postgres_refresh_ms"] / med, 1) if med and row["postgres_refresh_ms"] else None
        results.append(row)
    flow.close()
    payload = {"suite": "tpcds", "machine": info, "sf": sf, "steps": steps, "warmup": warmup, "fraction": fraction,
               "table_rows": sizes, "source_load_s": round(source_load_s, 1),
               "rows_in_median": statistics.median(rows_in) if rows_in else 0,
               "tick_ms_median": round(median(tick_ms), 1) if tick_ms else None, "views": results,
               "refused": refused, "load": _load()}
    path = write_json(f"tpcds_sf{sf:g}", payload)
    markdown = render(payload)
    print(markdown)
    print(f"JSON: {path}")
    if write_doc:
        write_section(f"tpcds-sf{sf:g}", markdown)
    return payload


def _load() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ")[0]
    except OSError:
        return "?"


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    facts = ", ".join(f"{t} {n:,}" for t, n in r["table_rows"].items() if t.endswith(("sales", "returns")))
    lines = [
        f"### TPC-DS SF {r['sf']:g}: incremental step vs Spark recompute vs PostgreSQL REFRESH",
        "",
        f"{machine_line(m)} · load average at the end {r['load']} (shared machine)  ",
        f"Command: `{m['command']}`  ",
        f"Data: tpcgen-cli 4.0.0 ({facts} rows); each step inserts, deletes and updates "
        f"{r['fraction'] * 100:g}% of every fact table's rows per kind ({r['rows_in_median']:,.0f} source row "
        f"changes), {r['steps']} timed steps after {r['warmup']} warm-up. Whole tick median "
        f"{r['tick_ms_median'] or 0:,.0f} ms; sources loaded in {r['source_load_s']:,.0f} s.",
        "",
        "| view | step median (p95) | Spark recompute | ratio | PG REFRESH | ratio | first computation | equal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in r["views"]:
        spark = f"{v['spark_recompute_ms']:,.0f} ms" if v["spark_recompute_ms"] is not None else "-"
        pg = f"{v['postgres_refresh_ms']:,.0f} ms" if v["postgres_refresh_ms"] is not None else "-"
        lines.append(
            f"| {v['view']} | {v['step_ms_median']:,.0f} ms ({v['step_ms_p95']:,.0f}) | {spark} | "
            f"{_ratio(v['vs_spark'], TARGET_VS_SPARK)} | {pg} | {_ratio(v['vs_postgres'], TARGET_VS_POSTGRES)} | "
            f"{v['initial_s']:,.1f} s | {v['equal']} |")
    if r["refused"]:
        lines += ["", "Not maintained (freshview's refusal):", ""]
        lines += [f"* {name}: {reason}" for name, reason in r["refused"].items()]
    lines += ["", "`equal`: after the last step the incremental result equals PostgreSQL's. "
              f"Targets: step ≥ {TARGET_VS_SPARK:g}× faster than Spark's recompute and ≥ {TARGET_VS_POSTGRES:g}× "
              "faster than PostgreSQL's REFRESH (✗ marks a miss)."]
    return "\n".join(lines)
