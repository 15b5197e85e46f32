"""Set-returning functions over columns (issue 23): a view's step against PostgreSQL's REFRESH, side by side.

A source ``t (k INT PRIMARY KEY, g INT, xs INT[], j JSONB)`` of ``--rows`` rows (arrays of 0–8 small
integers, jsonb arrays of 0–4 objects), the same rows in a throwaway PostgreSQL.  Per view: freshview's
step (``execution="local"``: the change's rows flat-mapped, then whatever is above) and PostgreSQL's
``REFRESH MATERIALIZED VIEW`` of the same SQL after the same change, alternately, ``--steps`` times; each
step updates ``--changes`` rows (new arrays and documents).  The results are compared after the last step.
Not a test.

    python3 -m benchmarks.srf [--rows 100000] [--changes 100] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pyarrow as pa

VIEWS = {
    "unnest": "SELECT t.k, u.x, u.n FROM t, unnest(t.xs) WITH ORDINALITY AS u(x, n)",
    "unnest_agg": "SELECT x, COUNT(*) AS c, SUM(g) AS s FROM t, unnest(t.xs) AS x GROUP BY x",
    "jsonb_elements": "SELECT t.k, e.value ->> 'a' AS a FROM t, jsonb_array_elements(t.j) AS e",
    "select_list": "SELECT k, unnest(xs) AS x FROM t WHERE g < 50",
}
SCHEMA = pa.schema([("k", pa.int32()), ("g", pa.int32()), ("xs", pa.list_(pa.int32())), ("j", pa.string())])


def _rows(rng: np.random.Generator, keys: np.ndarray) -> dict[str, list]:
    xs = [[int(v) for v in rng.integers(0, 1000, rng.integers(0, 9))] for _ in keys]
    docs = [json.dumps([{"a": f"v{int(v)}", "n": int(v)} for v in rng.integers(0, 100, rng.integers(0, 5))],
                       separators=(", ", ": ")) for _ in keys]
    return {"k": [int(k) for k in keys], "g": [int(v) for v in rng.integers(0, 100, len(keys))], "xs": xs, "j": docs}


def _delta(rows: dict[str, list], weight: int) -> pa.Table:
    table = pa.Table.from_pydict(rows, schema=SCHEMA)
    return table.append_column("_weight", pa.array([weight] * table.num_rows, pa.int64()))


def _pg_load(conn, rows: dict[str, list]) -> None:
    with conn.cursor() as cur, cur.copy("COPY t (k, g, xs, j) FROM STDIN") as copy:
        for row in zip(rows["k"], rows["g"], rows["xs"], rows["j"]):
            copy.write_row(row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--changes", type=int, default=100)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()

    import psycopg

    from freshview import IncrementalFlow
    from freshview.jsontext import jsonb
    from freshview.service.embedded import PostgresServer

    rng = np.random.default_rng(7)
    current = _rows(rng, np.arange(args.rows))
    current["j"] = [jsonb(d) for d in current["j"]]
    server = PostgresServer()
    server.start()
    try:
        with psycopg.connect(server.dsn, autocommit=True) as conn, \
                IncrementalFlow(execution="local", first_computation="local") as flow:
            conn.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT, xs INT[], j JSONB)")
            _pg_load(conn, current)
            flow.register_source("t", "k INT, g INT, xs INT[], j JSONB", primary_key=["k"])
            flow.tick("t", _delta(current, 1))
            print(f"rows {args.rows}, changes per step {args.changes}, steps {args.steps}")
            print("| view | first computation | freshview step (median) | PostgreSQL REFRESH (median) | ratio |")
            print("|---|---|---|---|---|")
            for name, sql in VIEWS.items():
                t0 = time.perf_counter()
                flow.register_view(name, sql)
                first = time.perf_counter() - t0
                conn.execute(f"CREATE MATERIALIZED VIEW m_{name} AS {sql}")
                ours, theirs = [], []
                for _ in range(args.steps):
                    keys = rng.choice(args.rows, size=args.changes, replace=False)
                    old = {c: [current[c][i] for i in keys] for c in current}
                    new = _rows(rng, keys)
                    new["j"] = [jsonb(d) for d in new["j"]]
                    for c in current:
                        for i, v in zip(keys, new[c]):
                            current[c][i] = v
                    with conn.cursor() as cur:
                        cur.executemany("UPDATE t SET g = %s, xs = %s, j = %s WHERE k = %s",
                                        list(zip(new["g"], new["xs"], new["j"], new["k"])))
                    t0 = time.perf_counter()
                    flow.tick("t", pa.concat_tables([_delta(old, -1), _delta(new, 1)]))
                    ours.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    conn.execute(f"REFRESH MATERIALIZED VIEW m_{name}")
                    theirs.append(time.perf_counter() - t0)
                got = flow.snapshot(name).num_rows
                want = conn.execute(f"SELECT count(*) FROM m_{name}").fetchone()[0]
                assert got == want, (name, got, want)
                a, b = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
                print(f"| {name} | {first:.2f} s | {a:.1f} ms | {b:.1f} ms | {b / a:.1f}× |")
                flow.drop_view(name)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
