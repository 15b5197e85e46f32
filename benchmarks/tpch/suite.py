"""The TPC-H suite: every supported TPC-H view, incremental step vs Spark recompute vs PostgreSQL REFRESH.

One run, one machine, the same data for all three:

1. ``tpchgen-cli`` data at ``--sf`` is loaded into an ``IncrementalFlow``
   (sources) and into a throwaway PostgreSQL (tables + one MATERIALIZED VIEW
   per query); each view is registered, and its first computation timed.
2. ``--warmup`` untimed, then ``--steps`` timed refresh steps (RF1 inserts,
   RF2 deletes, price updates; ``--fraction`` of lineitem each) go through one
   ``tick`` each, with a profile of where the time went; the same changes
   are applied to PostgreSQL's tables (untimed).
3. After the last step, on the current data: Spark SQL recomputes every view
   from Parquet files (median of ``--repeats`` after a warm-up), PostgreSQL
   runs ``REFRESH MATERIALIZED VIEW`` (median of ``--repeats``), and each
   incremental result is compared with Spark's.

The per-view step time is the view's share of the tick (its operators and
output); the tick's total also includes applying the changes to the sources.
"""

from __future__ import annotations

import io
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from benchmarks.profiling import StepProfile
from benchmarks.report import PeakMemory, machine, machine_line, median, p95, write_json, write_section
from benchmarks.tpch.data import PRIMARY_KEYS, WEIGHT, RefreshStream, Tables, generate
from benchmarks.tpch.queries import VIEWS

TARGET_VS_SPARK = 20.0
TARGET_VS_POSTGRES = 10.0
LOAD_CHUNK = 1_000_000


def run(sf: float, steps: int, warmup: int, fraction: float, repeats: int, views: list[str],
        workdir: Path | None, cache: Path, use_postgres: bool, write_doc: bool) -> dict[str, Any]:
    from freshview import IncrementalFlow
    from freshview.runtime.spark import get_session

    info = machine()
    workdir = workdir or Path(tempfile.mkdtemp(prefix="freshview-tpch-"))
    chosen = {name: VIEWS[name] for name in views}
    print(f"generating TPC-H SF {sf:g} with tpchgen-cli ...", flush=True)
    tables = Tables.load(generate(sf, cache))
    sizes = {name: t.num_rows for name, t in tables.data.items()}
    pg = Postgres(tables, chosen) if use_postgres else None
    spark = get_session()
    memory = PeakMemory(spark)
    flow = IncrementalFlow(spark=spark, state_dir=workdir / "state")

    started = time.perf_counter()
    load_sources(flow, tables)
    source_load_s = time.perf_counter() - started
    print(f"sources loaded into freshview in {source_load_s:.0f} s: {sizes}", flush=True)
    initial_s: dict[str, float] = {}
    for name, sql in chosen.items():
        started = time.perf_counter()
        flow.register_view(name, sql)
        initial_s[name] = time.perf_counter() - started
        print(f"  view {name}: first computation {initial_s[name]:.1f} s", flush=True)
    load_memory = memory.snapshot()

    stream = RefreshStream(tables, fraction)
    view_ms: dict[str, list[float]] = {n: [] for n in chosen}
    rows_out: dict[str, list[int]] = {n: [] for n in chosen}
    tick_ms: list[float] = []
    rows_in: list[int] = []
    profiles: list[dict[str, float]] = []
    memory.reset()
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
        profiles.append(profile.breakdown())
        for name in chosen:
            view = summary.views.get(name)
            view_ms[name].append(view.duration_ms if view and not view.skipped else 0.0)
            rows_out[name].append(view.rows_out if view else 0)
        print(f"  step {i - warmup + 1}/{steps}: {summary.rows_in} rows in, {summary.duration_ms:.0f} ms", flush=True)
    step_memory = memory.snapshot()

    print("recomputing with Spark and refreshing in PostgreSQL ...", flush=True)
    spark_ms, spark_results = _spark_recompute(spark, tables, chosen, workdir / "parquet", repeats)
    refresh_ms = pg.refresh(repeats) if pg is not None else {}
    from tests.support.oracle import diff_rows, table_rows

    reference = pg.results() if pg is not None else {n: table_rows(t) for n, t in spark_results.items()}
    if pg is not None:
        pg.close()

    results = []
    for name in chosen:
        # PostgreSQL's numeric is exact; Spark's decimal AVG/division keep 6 fractional digits.
        only_a, only_e = diff_rows(table_rows(flow.snapshot(name)), reference[name])
        med, high = median(view_ms[name]), p95(view_ms[name])
        row = {
            "view": name, "step_ms_median": round(med, 1), "step_ms_p95": round(high, 1),
            "rows_out_median": statistics.median(rows_out[name]), "spark_recompute_ms": round(spark_ms[name], 1),
            "postgres_refresh_ms": round(refresh_ms[name], 1) if name in refresh_ms else None,
            "initial_s": round(initial_s[name], 1), "equal": not only_a and not only_e,
            "checked_against": "postgres" if pg is not None else "spark",
            "rows": flow.snapshot(name).num_rows,
        }
        row["vs_spark"] = round(row["spark_recompute_ms"] / med, 1) if med else None
        row["vs_postgres"] = round(row["postgres_refresh_ms"] / med, 1) if med and row["postgres_refresh_ms"] else None
        results.append(row)
    flow.close()
    memory.close()
    payload = {
        "suite": "tpch", "machine": info, "sf": sf, "steps": steps, "warmup": warmup, "fraction": fraction,
        "table_rows": sizes, "source_load_s": round(source_load_s, 1), "rows_in_median": statistics.median(rows_in),
        "tick_ms_median": round(median(tick_ms), 1), "tick_ms_p95": round(p95(tick_ms), 1),
        "profile_median": {k: statistics.median(p[k] for p in profiles) for k in profiles[0]},
        "memory_after_load": load_memory, "memory_during_steps": step_memory, "views": results,
    }
    path = write_json(f"tpch_sf{sf:g}", payload)
    markdown = render(payload)
    print(markdown)
    print(f"JSON: {path}")
    if write_doc:
        write_section(f"tpch-sf{sf:g}", markdown)
    return payload


def load_sources(flow: Any, tables: Tables) -> None:
    """Register each table as a source (with its primary key) and load its rows in chunks: in bulk
    (``load_source``), or through ``tick`` on a freshview without it."""
    for name, table in tables.data.items():
        flow.register_source(name, tables.ddl(name), primary_key=PRIMARY_KEYS[name])
        if hasattr(flow, "load_source"):
            flow.load_source(name, (table.slice(o, LOAD_CHUNK) for o in range(0, table.num_rows, LOAD_CHUNK)))
            continue
        for offset in range(0, table.num_rows, LOAD_CHUNK):
            chunk = table.slice(offset, LOAD_CHUNK)
            flow.tick(name, chunk.append_column(WEIGHT, pa.array([1] * chunk.num_rows, pa.int64())))


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        f"### TPC-H SF {r['sf']:g}: incremental step vs Spark recompute vs PostgreSQL REFRESH",
        "",
        f"{machine_line(m)}  ",
        f"Command: `{m['command']}`  ",
        f"Data: tpchgen-cli, lineitem {r['table_rows']['lineitem']:,} rows, orders {r['table_rows']['orders']:,}; "
        f"each step RF1 + RF2 + price updates, {r['rows_in_median']:,.0f} source row changes "
        f"({r['fraction'] * 100:g}% of lineitem per kind), {r['steps']} timed steps after {r['warmup']} warm-up.",
        "",
        "| view | step median (p95) | rows out | Spark recompute | ratio | PG REFRESH | ratio | first computation "
        "| equal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in r["views"]:
        pg = f"{v['postgres_refresh_ms']:,.0f} ms" if v["postgres_refresh_ms"] is not None else "-"
        lines.append(
            f"| {v['view']} | {v['step_ms_median']:,.0f} ms ({v['step_ms_p95']:,.0f}) | {v['rows_out_median']:,.0f} | "
            f"{v['spark_recompute_ms']:,.0f} ms | {_ratio(v['vs_spark'], TARGET_VS_SPARK)} | {pg} | "
            f"{_ratio(v['vs_postgres'], TARGET_VS_POSTGRES)} | {v['initial_s']:,.1f} s | {v['equal']} |")
    p = r["profile_median"]
    lines += [
        "",
        f"Whole tick (all views + applying the changes to the sources): median {r['tick_ms_median']:,.0f} ms, "
        f"p95 {r['tick_ms_p95']:,.0f} ms. Where it goes (median per tick): Spark jobs {p['spark_jobs']:,.0f} ms "
        f"({p['spark_jobs_calls']:.0f} collects), building Spark plans over py4j {p['spark_plan']:,.0f} ms "
        f"({p['py4j_calls']:.0f} calls), state reads {p['state_read']:,.0f} ms, state writes "
        f"{p['state_write']:,.0f} ms, other Python {p['python']:,.0f} ms.",
        f"Loading the sources into freshview: {r['source_load_s']:,.0f} s. Peak RSS after load: Python "
        f"{r['memory_after_load']['python_peak_mib']:,} MiB, JVM {r['memory_after_load']['jvm_peak_mib']:,} MiB; "
        f"during steps: Python {r['memory_during_steps']['python_peak_mib']:,} MiB, "
        f"JVM {r['memory_during_steps']['jvm_peak_mib']:,} MiB.",
        "`equal`: after the last step the incremental result equals "
        + ("PostgreSQL's (exact numerics)." if r["views"] and r["views"][0]["checked_against"] == "postgres"
           else "Spark's recompute.") + "  ",
        f"Targets: step ≥ {TARGET_VS_SPARK:g}× faster than Spark's recompute and ≥ {TARGET_VS_POSTGRES:g}× faster than "
        "PostgreSQL's REFRESH (✗ marks a miss).",
    ]
    return "\n".join(lines)


def _ratio(value: float | None, target: float) -> str:
    if value is None:
        return "-"
    return f"{value:g}×" + ("" if value >= target else " ✗")


def _spark_recompute(spark: Any, tables: Tables, views: dict[str, str], directory: Path,
                     repeats: int) -> tuple[dict[str, float], dict[str, pa.Table]]:
    directory.mkdir(parents=True, exist_ok=True)
    for name, table in tables.data.items():
        pq.write_table(table, directory / f"{name}.parquet")
        spark.read.parquet(str(directory / f"{name}.parquet")).createOrReplaceTempView(name)
    times, results = {}, {}
    import sqlglot

    for name, text in views.items():
        sql = sqlglot.transpile(text, read="postgres", write="spark")[0]
        results[name] = spark.sql(sql).toArrow()  # warm-up, and the result to compare with
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            spark.sql(sql).toArrow()
            runs.append((time.perf_counter() - started) * 1000)
        times[name] = statistics.median(runs)
    return times, results


PG_SETTINGS = {"shared_buffers": "'2GB'", "work_mem": "'256MB'", "max_wal_size": "'8GB'",
               "dynamic_shared_memory_type": "posix"}


class Postgres:
    """A throwaway PostgreSQL with the same tables, and each view as a MATERIALIZED VIEW.

    ``settings`` go over freshview's throwaway-server defaults (``PostgresServer``).
    """

    def __init__(self, tables: Tables, views: dict[str, str], settings: dict[str, str] = PG_SETTINGS,
                 primary_keys: dict[str, list[str]] = PRIMARY_KEYS, bindir: Path | None = None) -> None:
        import psycopg

        from freshview.service.embedded import PostgresServer

        self.views = views
        self.primary_keys = primary_keys
        self.server = PostgresServer(bindir=bindir, settings=settings)
        self.conn = psycopg.connect(self.server.start(), autocommit=True)
        started = time.perf_counter()
        for name, table in tables.data.items():
            self.conn.execute(f"CREATE TABLE {name} ({tables.ddl(name)})")
            self._copy(name, table)
            self.conn.execute(f"ALTER TABLE {name} ADD PRIMARY KEY ({', '.join(primary_keys[name])})")
        self.conn.execute("VACUUM ANALYZE")
        for name, sql in views.items():
            self.conn.execute(f"CREATE MATERIALIZED VIEW {name}_mv AS {sql}")
        print(f"PostgreSQL loaded in {time.perf_counter() - started:.0f} s", flush=True)

    def _copy(self, name: str, table: pa.Table) -> None:
        columns = [c for c in table.column_names if c != WEIGHT]
        with self.conn.cursor() as cur, cur.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN "
                                                 "(FORMAT csv, HEADER true)") as copy:
            for offset in range(0, table.num_rows, 200_000):
                buffer = io.BytesIO()  # one header for the whole COPY stream, not one per chunk
                pacsv.write_csv(table.select(columns).slice(offset, 200_000), buffer,
                                pacsv.WriteOptions(include_header=offset == 0))
                copy.write(buffer.getvalue())

    def apply(self, deltas: dict[str, pa.Table]) -> None:
        import pyarrow.compute as pc

        with self.conn.transaction():
            for name, delta in deltas.items():
                keys = self.primary_keys[name]
                gone = delta.filter(pc.less(delta[WEIGHT], 0))
                if gone.num_rows:
                    arrays = [gone[k].to_pylist() for k in keys]
                    casts = ", ".join(f"%s::{'bigint' if pa.types.is_int64(gone[k].type) else 'int'}[]" for k in keys)
                    match = " AND ".join(f"t.{k} = d.c{i}" for i, k in enumerate(keys))
                    cols = ", ".join(f"c{i}" for i in range(len(keys)))
                    self.conn.execute(f"DELETE FROM {name} t USING unnest({casts}) AS d({cols}) WHERE {match}",
                                      arrays)
                new = delta.filter(pc.greater(delta[WEIGHT], 0))
                if new.num_rows:
                    self._copy(name, new)

    def refresh(self, repeats: int) -> dict[str, float]:
        self.conn.execute("ANALYZE")
        out = {}
        for name in self.views:
            self.refresh_once(name)  # warm-up
            out[name] = statistics.median(self.refresh_once(name) for _ in range(repeats))
        return out

    def refresh_once(self, name: str) -> float:
        """Milliseconds of one ``REFRESH MATERIALIZED VIEW`` of the view ``name``."""
        started = time.perf_counter()
        self.conn.execute(f"REFRESH MATERIALIZED VIEW {name}_mv")
        return (time.perf_counter() - started) * 1000

    def results(self) -> dict[str, list[tuple]]:
        """Each materialized view's rows (after the last refresh)."""
        return {name: self.conn.execute(f"SELECT * FROM {name}_mv").fetchall() for name in self.views}

    def close(self) -> None:
        self.conn.close()
        self.server.stop()
