"""The peers suite: freshview on the exact workload the peers were measured on (research/peers.md).

    python3 -m benchmarks run --suite peers --sf 0.1      # and --sf 1; --write-doc replaces the doc section

One process, one run, at one scale factor, one phase at a time:

1. data: ``tpchgen-cli`` orders + lineitem (cached with the TPC-H suite's data)
   and the 20 change steps (fixed seed, cached as Parquet): ``workload.py``;
2. DuckDB: in-memory tables from the Parquet data (2 threads); per step the
   step's DML (untimed), then the view query (timed).  Its result at each of
   the 21 points (the initial state and after each step) is the reference;
3. PostgreSQL: a throwaway server with keyed tables and the view as a
   MATERIALIZED VIEW; per step the DML (untimed), then ``REFRESH`` (timed);
4. freshview, once per execution mode (``auto``, ``local``, ``spark`` when
   ``IncrementalFlow`` takes ``execution``, else its one default), each in a
   fresh flow on the shared Spark session: the initial load (sources loaded
   in bulk, ``load_source``, + the view's first computation) is timed, then each step
   is one timed ``tick`` of both tables' changes, with its profile;
5. the report: Markdown (``--write-doc``: docs/benchmarks.md) and JSON
   (docs/results/peers_sf<sf>.json).

Every engine's result is compared exactly with the reference (counts, sums to
4 decimals) at every point.  pg_ivm runs only with ``--pg-bindir`` (a PostgreSQL
15 whose tree has pg_ivm installed: it has no package, so it is a source build
this suite does not make): a throwaway server with ``shared_preload_libraries =
'pg_ivm'``, keyed tables, the view as an IMMV (``create_immv``), and per step
peers.md's transaction of four statements (insert orders, insert lineitems, delete
lineitems, delete orders; pg_ivm maintains the view after each), timed from the
first statement to the COMMIT's return, the statements' JSON built untimed.
Without it, and for Pathway (its own harness), the figures from peers.md are
shown, labelled as measured earlier.  Feldera cannot run on this machine
(peers.md §3).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib.util
import inspect
import json
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.peers.workload import (COLUMNS, FIRST_NEW_KEY, LINES_PER_ORDER, ORDERS_PER_STEP, SEED, VIEW,
                                       VIEW_NAME, canonical, load_steps, load_tables, table_rows)
from benchmarks.profiling import StepProfile
from benchmarks.report import RESULTS, machine, machine_line, median, p95, write_json, write_section
from benchmarks.tpch.data import PRIMARY_KEYS, WEIGHT, Tables, generate
from benchmarks.tpch.suite import Postgres, load_sources

MODES = ("auto", "local", "spark")
DUCKDB_THREADS = 2
# peers.md's server settings (fsync and synchronous_commit on), over the throwaway server's defaults.
PG_SETTINGS = {"shared_buffers": "'1GB'", "work_mem": "'64MB'", "maintenance_work_mem": "'512MB'",
               "max_wal_size": "'4GB'", "fsync": "on", "full_page_writes": "on", "synchronous_commit": "on",
               "wal_level": "replica", "dynamic_shared_memory_type": "posix"}
TARGET_STEP_MS = {"0.1": 20.0, "1": 25.0}
TARGET_LOAD_S = {"1": 15.0}
# research/peers.md (2026-11-23): medians in ms per step, same workload parameters, not measured in this run.
EARLIER_DATE = "2026-11-23"
EARLIER = {
    "0.1": [("pg_ivm 1.15: DML + immediate maintenance + COMMIT", 8.70),
            ("Pathway 0.33.0, 1 thread: push to correct output", 11.44),
            ("DuckDB 2.0.0: the view query", 13.33),
            ("PostgreSQL 15.18: REFRESH MATERIALIZED VIEW", 119.55),
            ("Spark 4.3.0: view query over cached tables", 417.25),
            ("Spark 4.3.0: JDBC read + query + write back", 773.05)],
    "1": [("pg_ivm 1.15: DML + immediate maintenance + COMMIT", 9.23),
          ("Pathway 0.33.0, 1 thread: push to correct output", 17.41),
          ("DuckDB 2.0.0: the view query", 131.98),
          ("PostgreSQL 15.18: REFRESH MATERIALIZED VIEW", 1255.68),
          ("Spark 4.3.0: view query over cached tables", 2757.67),
          ("Spark 4.3.0: JDBC read + query + write back", 5265.30)],
}


IMMV = "revenue_ivm"


def run(sf: float, steps: int, workdir: Path | None, cache: Path, use_postgres: bool,
        write_doc: bool, pg_bindir: Path | None = None, only_modes: list[str] | None = None) -> dict[str, Any]:
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    _preflight(use_postgres)
    if pg_bindir is not None and not (pg_bindir / "postgres").exists():
        raise SystemExit(f"--pg-bindir {pg_bindir}: no postgres binary there")
    info = machine()
    temporary = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="freshview-peers-"))

    print(f"[data] tpchgen-cli SF {sf:g} orders + lineitem, {steps} change steps (seed {SEED}) ...", flush=True)
    directory = generate(sf, cache)
    tables = load_tables(sf, cache)
    changes = load_steps(tables, sf, cache, steps)
    data = _describe(tables, changes)
    print(f"[data] orders {data['orders']:,}, lineitem {data['lineitem']:,}; steps insert "
          f"{data['lineitems_inserted']:,} and delete {data['lineitems_deleted']:,} lineitems", flush=True)

    print(f"[duckdb] in-memory tables, {DUCKDB_THREADS} threads: {steps} steps, view query timed ...", flush=True)
    duck, reference = _duckdb(directory, changes)
    print(f"[duckdb] view query median {duck['query_ms_median']:.1f} ms (load {duck['load_s']:.1f} s)", flush=True)

    pg = None
    if use_postgres:
        print(f"[postgres] throwaway server, keyed tables, MATERIALIZED VIEW: {steps} steps, REFRESH timed ...",
              flush=True)
        pg = _postgres(tables, changes, reference)
        print(f"[postgres] REFRESH median {pg['refresh_ms_median']:.1f} ms, equal at "
              f"{sum(pg['equal'])}/{len(pg['equal'])} points", flush=True)

    ivm = None
    if pg_bindir is not None:
        print(f"[pg_ivm] throwaway server from {pg_bindir}, keyed tables, IMMV: {steps} steps, DML + maintenance "
              "+ COMMIT timed ...", flush=True)
        ivm = _pg_ivm(pg_bindir, tables, changes, reference)
        print(f"[pg_ivm] step median {ivm['step_ms_median']:.1f} ms, equal at {sum(ivm['equal'])}/"
              f"{len(ivm['equal'])} points", flush=True)

    from freshview import IncrementalFlow
    from freshview.runtime.spark import get_session

    print("[freshview] starting Spark ...", flush=True)
    spark = get_session()
    modes: list[str | None] = (list(MODES) if "execution" in inspect.signature(IncrementalFlow).parameters
                               else [None])
    if only_modes:
        modes = [m for m in modes if m in only_modes]
    runs = []
    for mode in modes:
        print(f"[freshview {_label(mode)}] warm-up, initial load, {steps} steps ...", flush=True)
        result = _freshview(IncrementalFlow, spark, mode, tables, changes, reference, workdir / f"state-{mode}")
        print(f"[freshview {_label(mode)}] initial load {result['initial_load_s']:.1f} s, step median "
              f"{result['step_ms_median']:.1f} ms, equal at {sum(result['equal'])}/{len(result['equal'])} points",
              flush=True)
        runs.append(result)
    if temporary:
        shutil.rmtree(workdir, ignore_errors=True)

    payload = {
        "suite": "peers", "machine": info, "sf": sf, "steps": steps, "data": data,
        "view": VIEW, "duckdb": duck, "postgres": pg, "pg_ivm": ivm, "freshview": runs,
        "reference_final": [[str(v) for v in row] for row in reference[-1]],
    }
    payload["comparison"] = _compare(payload)
    markdown = render(payload)
    print()
    print(markdown)
    path = write_json(f"peers_sf{sf:g}", payload, RESULTS)
    print(f"\nJSON: {path}")
    if write_doc:
        write_section(f"peers-sf{sf:g}", markdown)
        print("docs/benchmarks.md: section replaced")
    return payload


# ---------------------------------------------------------------------------------------------- phases
def _preflight(use_postgres: bool) -> None:
    """Fail before any work when an engine is missing (tpchgen-cli: ``generate`` says so itself)."""
    if importlib.util.find_spec("duckdb") is None:
        raise SystemExit("duckdb is missing: pip install -e '.[bench]'")
    if use_postgres:
        from freshview.service.embedded import PostgresError, find_pg_bindir

        try:
            find_pg_bindir()
        except PostgresError as exc:
            raise SystemExit(f"{exc}\nOr run with --no-postgres to leave PostgreSQL REFRESH out.") from None


def _describe(tables: Tables, changes: list[dict[str, pa.Table]]) -> dict[str, Any]:
    def count(name: str, sign: int) -> int:
        return sum(pc.sum(pc.equal(s[name][WEIGHT], sign)).as_py() or 0 for s in changes)

    version = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        version = subprocess.run(["tpchgen-cli", "--version"], capture_output=True, text=True,
                                 timeout=30).stdout.strip() or None
    inserted, deleted = count("lineitem", 1), count("lineitem", -1)
    return {
        "generator": version, "orders": tables.data["orders"].num_rows,
        "lineitem": tables.data["lineitem"].num_rows, "columns": COLUMNS, "seed": SEED,
        "orders_per_step": ORDERS_PER_STEP, "first_new_key": FIRST_NEW_KEY, "lines_per_order": LINES_PER_ORDER,
        "lineitems_inserted": inserted, "lineitems_deleted": deleted,
        "final_orders": tables.data["orders"].num_rows + count("orders", 1) - count("orders", -1),
        "final_lineitem": tables.data["lineitem"].num_rows + inserted - deleted,
    }


def _duckdb(directory: Path, changes: list[dict[str, pa.Table]]) -> tuple[dict[str, Any], list[list[tuple]]]:
    """Recompute with DuckDB after each step; its results are the reference at every point."""
    import duckdb

    con = duckdb.connect(config={"threads": DUCKDB_THREADS})
    started = time.perf_counter()
    for name, columns in COLUMNS.items():
        path = str(directory / f"{name}.parquet").replace("'", "''")
        con.execute(f"CREATE TABLE {name} AS SELECT {', '.join(columns)} FROM read_parquet('{path}')")
    load_s = time.perf_counter() - started
    reference = [canonical(con.execute(VIEW).fetchall())]
    query_ms, dml_ms = [], []
    for step in changes:
        started = time.perf_counter()
        con.execute("BEGIN")
        for name, delta in step.items():
            con.register("delta", delta)
            match = " AND ".join(f"{name}.{k} = d.{k}" for k in PRIMARY_KEYS[name])
            con.execute(f"INSERT INTO {name} SELECT {', '.join(COLUMNS[name])} FROM delta WHERE {WEIGHT} > 0")
            con.execute(f"DELETE FROM {name} USING delta d WHERE d.{WEIGHT} < 0 AND {match}")
            con.unregister("delta")
        con.execute("COMMIT")
        dml_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        rows = con.execute(VIEW).fetchall()
        query_ms.append((time.perf_counter() - started) * 1000)
        reference.append(canonical(rows))
    con.close()
    return {"version": duckdb.__version__, "threads": DUCKDB_THREADS, "load_s": round(load_s, 2),
            "query_ms": _rounded(query_ms), "query_ms_median": round(median(query_ms), 2),
            "query_ms_p95": round(p95(query_ms), 2), "dml_ms_median": round(median(dml_ms), 2)}, reference


def _postgres(tables: Tables, changes: list[dict[str, pa.Table]], reference: list[list[tuple]]) -> dict[str, Any]:
    started = time.perf_counter()
    pg = Postgres(tables, {VIEW_NAME: VIEW}, settings=PG_SETTINGS)
    try:
        load_s = time.perf_counter() - started
        version = pg.conn.execute("SHOW server_version").fetchone()[0]
        equal = [canonical(pg.results()[VIEW_NAME]) == reference[0]]
        refresh_ms = []
        for step, expected in zip(changes, reference[1:]):
            pg.apply(step)
            refresh_ms.append(pg.refresh_once(VIEW_NAME))
            equal.append(canonical(pg.results()[VIEW_NAME]) == expected)
    finally:
        pg.close()
    return {"version": version, "settings": PG_SETTINGS, "load_s": round(load_s, 1),
            "refresh_ms": _rounded(refresh_ms), "refresh_ms_median": round(median(refresh_ms), 1),
            "refresh_ms_p95": round(p95(refresh_ms), 1), "equal": equal}


def _pg_ivm(bindir: Path, tables: Tables, changes: list[dict[str, pa.Table]],
            reference: list[list[tuple]]) -> dict[str, Any]:
    """pg_ivm in a throwaway server from ``bindir`` (module docstring); its IMMV compared at every point."""
    settings = {**PG_SETTINGS, "shared_preload_libraries": "'pg_ivm'"}
    started = time.perf_counter()
    pg = Postgres(tables, {}, settings=settings, bindir=bindir)
    try:
        conn = pg.conn
        conn.execute("CREATE EXTENSION pg_ivm")
        schema = conn.execute("SELECT n.nspname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                              "WHERE p.proname = 'create_immv'").fetchone()[0]
        conn.execute(f"SELECT {schema}.create_immv(%s, %s)", (IMMV, VIEW))
        conn.execute("VACUUM ANALYZE")
        load_s = time.perf_counter() - started
        version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_ivm'").fetchone()[0]
        server = conn.execute("SHOW server_version").fetchone()[0]
        select = f"SELECT o_orderpriority, count, sum FROM {IMMV}"
        equal = [canonical(conn.execute(select).fetchall()) == reference[0]]
        step_ms = []
        for step, expected in zip(changes, reference[1:]):
            statements = _ivm_statements(step)  # untimed: the client's JSON
            started = time.perf_counter()
            with conn.transaction():
                for sql, params, rows in statements:
                    cursor = conn.execute(sql, params)
                    if cursor.rowcount != rows:
                        raise RuntimeError(f"pg_ivm step: {sql!r} changed {cursor.rowcount} rows, not {rows}")
            step_ms.append((time.perf_counter() - started) * 1000)
            equal.append(canonical(conn.execute(select).fetchall()) == expected)
    finally:
        pg.close()
    return {"version": version, "server": server, "settings": settings, "load_s": round(load_s, 1),
            "step_ms": _rounded(step_ms), "step_ms_median": round(median(step_ms), 2),
            "step_ms_p95": round(p95(step_ms), 2), "equal": equal}


def _ivm_statements(step: dict[str, pa.Table]) -> list[tuple[str, tuple, int]]:
    """peers.md's four statements of one step, with their parameters and the rows each must change:
    insert orders, insert lineitems (``jsonb_populate_recordset``), delete lineitems and orders by
    order key."""
    out = []
    for name in ("orders", "lineitem"):
        new = step[name].filter(pc.greater(step[name][WEIGHT], 0)).drop_columns([WEIGHT])
        if new.num_rows:
            out.append((f"INSERT INTO {name} SELECT * FROM jsonb_populate_recordset(NULL::{name}, %s::jsonb)",
                        (json.dumps(new.to_pylist(), default=str),), new.num_rows))
    for name, key in (("lineitem", "l_orderkey"), ("orders", "o_orderkey")):
        gone = step[name].filter(pc.less(step[name][WEIGHT], 0))
        if gone.num_rows:
            keys = pc.unique(gone[key]).to_pylist()
            out.append((f"DELETE FROM {name} WHERE {key} = ANY(%s)", (keys,), gone.num_rows))
    return out


def _freshview(flow_class: Any, spark: Any, mode: str | None, tables: Tables, changes: list[dict[str, pa.Table]],
               reference: list[list[tuple]], state_dir: Path) -> dict[str, Any]:
    options = {} if mode is None else {"execution": mode}
    warmup_s = _warm_up(flow_class, spark, options, tables, state_dir.with_name(state_dir.name + "-warmup"))
    flow = flow_class(spark=spark, state_dir=state_dir, **options)
    started = time.perf_counter()
    load_sources(flow, tables)
    sources_s = time.perf_counter() - started
    flow.register_view(VIEW_NAME, VIEW)
    initial_s = time.perf_counter() - started
    equal = [canonical(table_rows(flow.snapshot(VIEW_NAME))) == reference[0]]
    step_ms, cpu_ms, tick_ms, details, profiles = [], [], [], [], []
    for step, expected in zip(changes, reference[1:]):
        profile: StepProfile | None = StepProfile()
        try:
            profile.__enter__()
        except (ImportError, AttributeError):  # the engine moved what the profile times: go without
            profile = None
        try:
            started, cpu = time.perf_counter(), time.thread_time()
            summary = flow.tick(step)
            step_ms.append((time.perf_counter() - started) * 1000)
            cpu_ms.append((time.thread_time() - cpu) * 1000)
        finally:
            if profile is not None:
                profile.__exit__(None, None, None)
        tick_ms.append(summary.duration_ms)
        details.append(_view_step(summary.views.get(VIEW_NAME)))
        if profile is not None:
            profiles.append(profile.breakdown())
        equal.append(canonical(table_rows(flow.snapshot(VIEW_NAME))) == expected)
    flow.close()
    shutil.rmtree(state_dir, ignore_errors=True)
    executors = collections.Counter(str(d["executor"]) for d in details if d.get("executor") is not None)
    reasons = collections.Counter(str(d["reason"]) for d in details if d.get("reason") is not None)
    return {
        "mode": mode or "default", "execution_argument": mode is not None, "warmup_s": round(warmup_s, 1),
        "sources_load_s": round(sources_s, 1), "initial_load_s": round(initial_s, 1),
        "step_ms": _rounded(step_ms), "step_ms_median": round(median(step_ms), 1),
        "step_ms_p95": round(p95(step_ms), 1), "tick_duration_ms_median": round(median(tick_ms), 1),
        "step_cpu_ms": _rounded(cpu_ms), "step_cpu_ms_median": round(median(cpu_ms), 1),
        "equal": equal, "view_steps": details, "executors": dict(executors), "reasons": dict(reasons),
        "profile_median": ({k: round(median([p[k] for p in profiles]), 1) for k in profiles[0]}
                           if len(profiles) == len(step_ms) and profiles else None),
    }


def _warm_up(flow_class: Any, spark: Any, options: dict[str, Any], tables: Tables, state_dir: Path) -> float:
    """Untimed: the view over 1,000 orders and three small steps in a throwaway flow of the same mode,
    so that no mode's figures carry the JVM's (or an executor's) first compilations."""
    started = time.perf_counter()
    orders = tables.data["orders"].slice(0, 1000)
    lineitem = tables.data["lineitem"]
    lineitem = lineitem.filter(pc.is_in(lineitem["l_orderkey"], value_set=orders["o_orderkey"]))
    flow = flow_class(spark=spark, state_dir=state_dir, **options)
    load_sources(flow, Tables({"orders": orders, "lineitem": lineitem}))
    flow.register_view(VIEW_NAME, VIEW)
    for i in range(3):
        gone = orders.slice(10 * i, 10)
        lines = lineitem.filter(pc.is_in(lineitem["l_orderkey"], value_set=gone["o_orderkey"]))
        flow.tick({"orders": gone.append_column(WEIGHT, pa.array([-1] * gone.num_rows, pa.int64())),
                   "lineitem": lines.append_column(WEIGHT, pa.array([-1] * lines.num_rows, pa.int64()))})
    flow.close()
    shutil.rmtree(state_dir, ignore_errors=True)
    return time.perf_counter() - started


def _view_step(step: Any) -> dict[str, Any]:
    """A ``StepSummary.views`` entry as plain JSON values (whatever fields this version reports)."""
    if step is None:
        return {}
    fields = dataclasses.asdict(step) if dataclasses.is_dataclass(step) else dict(vars(step))
    return {k: v if isinstance(v, (bool, int, float, str, type(None))) else str(v) for k, v in fields.items()}


def _rounded(values: list[float]) -> list[float]:
    return [round(v, 2) for v in values]


# ---------------------------------------------------------------------------------------------- report
def _label(mode: str | None) -> str:
    return mode or "default"


def _compare(r: dict[str, Any]) -> dict[str, Any]:
    """Ratios and targets for freshview's ``auto`` mode (its only mode while there is no ``execution``)."""
    runs = {x["mode"]: x for x in r["freshview"]}
    main = runs.get("auto") or runs.get("default") or r["freshview"][0]
    step, duck = main["step_ms_median"], r["duckdb"]["query_ms_median"]
    refresh = r["postgres"]["refresh_ms_median"] if r["postgres"] else None
    sf = f"{r['sf']:g}"
    targets = []
    if sf in TARGET_STEP_MS:
        targets.append((f"step median ≤ {TARGET_STEP_MS[sf]:g} ms at SF {sf}", step <= TARGET_STEP_MS[sf],
                        f"{_ms(step)}"))
    targets.append(("step median below DuckDB's recompute in this run", step < duck,
                    f"{_ms(step)} vs {_ms(duck)}"))
    ivm = r.get("pg_ivm")
    if ivm is not None:
        fastest = min(x["step_ms_median"] for x in r["freshview"])
        targets.append(("a step ≤ pg_ivm's in this run (freshview's fastest mode)", fastest <= ivm["step_ms_median"],
                        f"{_ms(fastest)} vs {_ms(ivm['step_ms_median'])}"))
    if sf in TARGET_LOAD_S:
        targets.append((f"initial load ≤ {TARGET_LOAD_S[sf]:g} s at SF {sf}",
                        main["initial_load_s"] <= TARGET_LOAD_S[sf], f"{main['initial_load_s']:,.1f} s"))
    every = all(all(x["equal"]) for x in r["freshview"]) and (ivm is None or all(ivm["equal"]))
    targets.append(("equal to the reference at every point, every mode", every,
                    ", ".join(f"{x['mode']} {sum(x['equal'])}/{len(x['equal'])}" for x in r["freshview"])
                    + (f", pg_ivm {sum(ivm['equal'])}/{len(ivm['equal'])}" if ivm is not None else "")))
    return {
        "mode": main["mode"], "step_ms_median": step,
        "duckdb_over_step": round(duck / step, 3) if step else None,
        "refresh_over_step": round(refresh / step, 3) if step and refresh else None,
        "targets": [{"target": t, "met": ok, "value": v} for t, ok, v in targets],
    }


def render(r: dict[str, Any]) -> str:
    m, d, duck, pg, c = r["machine"], r["data"], r["duckdb"], r["postgres"], r["comparison"]
    ivm = r.get("pg_ivm")
    sf = f"{r['sf']:g}"
    lines = [
        f"### Peers' workload, TPC-H SF {sf}: freshview vs "
        + ("pg_ivm vs " if ivm is not None else "") + "DuckDB recompute vs PostgreSQL REFRESH",
        "",
        f"{machine_line(m)}  ",
        f"Command: `{m['command']}`  ",
        f"Data: {d['generator'] or 'tpchgen-cli'}, orders {d['orders']:,} and lineitem {d['lineitem']:,} rows "
        f"(the view's columns). {r['steps']} steps (seed {d['seed']}, stored as Parquet), each inserting "
        f"{d['orders_per_step']} orders (keys from {d['first_new_key']:,}) with {d['lines_per_order'][0]}–"
        f"{d['lines_per_order'][1]} lineitems and deleting the {d['orders_per_step']} lowest-keyed original "
        f"orders with theirs: {d['lineitems_inserted']:,} lineitems inserted and {d['lineitems_deleted']:,} "
        f"deleted in all.  ",
        f"View (one `tick` of both tables' changes per step): `{r['view']}`",
        "",
        "| engine | step median | p95 | initial load | equal to the reference |",
        "|---|---|---|---|---|",
    ]
    for x in r["freshview"]:
        name = (f"freshview `execution=\"{x['mode']}\"`" if x["execution_argument"]
                else "freshview (default; `IncrementalFlow` has no `execution` argument yet)")
        lines.append(f"| {name}: one `tick` | {_ms(x['step_ms_median'])} | {_ms(x['step_ms_p95'])} | "
                     f"{x['initial_load_s']:,.1f} s | {_equal(x['equal'])} |")
    if ivm is not None:
        lines.append(f"| pg_ivm {ivm['version']} (PostgreSQL {ivm['server'].split()[0]}): DML + immediate maintenance + "
                     f"COMMIT | {_ms(ivm['step_ms_median'])} | {_ms(ivm['step_ms_p95'])} | {ivm['load_s']:,.1f} s | "
                     f"{_equal(ivm['equal'])} |")
    lines.append(f"| DuckDB {duck['version']}: the view query ({duck['threads']} threads, in memory) | "
                 f"{_ms(duck['query_ms_median'])} | {_ms(duck['query_ms_p95'])} | {duck['load_s']:,.1f} s | "
                 "the reference |")
    if pg is not None:
        lines.append(f"| PostgreSQL {pg['version']}: `REFRESH MATERIALIZED VIEW` | {_ms(pg['refresh_ms_median'])} | "
                     f"{_ms(pg['refresh_ms_p95'])} | {pg['load_s']:,.1f} s | {_equal(pg['equal'])} |")
    ratio = [f"DuckDB's recompute {_times(c['duckdb_over_step'])}"]
    if c["refresh_over_step"] is not None:
        ratio.append(f"PostgreSQL's REFRESH {_times(c['refresh_over_step'])}")
    lines += [
        "",
        f"Measured in this run, recompute ÷ freshview `{c['mode']}` step (above 1× freshview is faster): "
        + ", ".join(ratio) + ".",
        "",
    ]
    earlier = [(n, v) for n, v in EARLIER.get(sf, []) if ivm is None or not n.startswith("pg_ivm")]
    if earlier:
        lines += [
            f"**Measured earlier, not in this run** (research/peers.md, {EARLIER_DATE}, same workload "
            "parameters, its own steps and harnesses; median ms per step):",
            "",
            "| peer (measured earlier, not in this run) | step median |",
            "|---|---|",
            *(f"| {name} | {_ms(ms)} |" for name, ms in earlier),
            "",
            "Feldera is not measured: no engine can be obtained on this machine (peers.md §3).",
            "",
        ]
    lines.append(f"Targets (freshview `{c['mode']}`):")
    lines += [f"- {'✓' if t['met'] else '✗'} {t['target']} ({t['value']})" for t in c["targets"]]
    lines.append("")
    for x in r["freshview"]:
        notes = [f"sources {x['sources_load_s']:,.1f} s of the initial load (then the view's first computation); "
                 f"untimed warm-up flow first {x['warmup_s']:,.1f} s; `StepSummary.duration_ms` median "
                 f"{_ms(x['tick_duration_ms_median'])}"]
        if x.get("step_cpu_ms_median") is not None:
            notes.append(f"the step's thread CPU time median {_ms(x['step_cpu_ms_median'])}")
        p = x["profile_median"]
        if p:
            notes.append(f"per tick (median) Spark jobs {p['spark_jobs']:,.0f} ms ({p['spark_jobs_calls']:.0f} "
                         f"collects), Spark plans over py4j {p['spark_plan']:,.0f} ms ({p['py4j_calls']:.0f} calls), "
                         f"state reads {p['state_read']:,.0f} ms, writes {p['state_write']:,.0f} ms, other Python "
                         f"{p['python']:,.0f} ms")
        if x["executors"]:
            notes.append("executor per step: " + ", ".join(f"{k} ×{n}" for k, n in x["executors"].items()))
        if x["reasons"]:
            notes.append("reasons: " + "; ".join(f"{k} ×{n}" for k, n in x["reasons"].items()))
        lines.append(f"freshview `{x['mode']}`: " + "; ".join(notes) + ".  ")
    lines.append("Initial load: freshview, the sources through `load_source` and the view's first computation; DuckDB, "
                 "the tables from Parquet; PostgreSQL, server start, COPY, keys, VACUUM ANALYZE and CREATE "
                 "MATERIALIZED VIEW.  ")
    lines.append("Each figure is one run of this process; on a 2-core VM medians move 5–30% between runs.")
    return "\n".join(lines)


def _ms(value: float) -> str:
    return f"{value:,.1f} ms" if value < 100 else f"{value:,.0f} ms"


def _times(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2g}×" if value < 10 else f"{value:,.0f}×"


def _equal(points: list[bool]) -> str:
    return f"{'✓' if all(points) else '✗'} {sum(points)}/{len(points)} points"
