"""The peers' workload (research/peers.md): TPC-H orders + lineitem, one join-aggregate view, 20 change steps.

The tables are ``tpchgen-cli`` data (``benchmarks.tpch.data.generate``, cached
with the TPC-H suite's), restricted to the columns the view reads plus the
keys.  The steps are generated once per scale factor with a fixed seed and
kept as Parquet next to the data, so every engine, and any outside harness,
applies the same rows.  Each step:

* inserts ``ORDERS_PER_STEP`` new orders with keys counting up from
  ``FIRST_NEW_KEY``, order date uniform over ``FIRST_DATE`` … ``LAST_DATE``
  (both included), a uniformly random priority, and 1–7 lineitems each
  (uniform), numbered 1..n;
* deletes the ``ORDERS_PER_STEP`` lowest-keyed original orders with all their
  lineitems, as whole old rows (weight −1).

peers.md does not say how the new lineitems' price and discount were drawn.
Here they follow TPC-H: ``l_extendedprice = l_quantity × p_retailprice`` for a
quantity uniform in 1..50 and the retail price formula of a random part key
of SF 1, ``l_discount`` uniform in 0.00..0.10.  The inserted rows do not
depend on the data, so they are the same at every scale factor; the deleted
rows are the data's own.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.step_vs_recompute import PRIORITIES, hundredths
from benchmarks.tpch.data import WEIGHT, Tables, generate, weighted

VIEW_NAME = "revenue"
VIEW = ("SELECT o_orderpriority, COUNT(*), SUM(l_extendedprice * (1 - l_discount)) FROM orders JOIN lineitem "
        "ON l_orderkey = o_orderkey WHERE o_orderdate >= DATE '1995-01-01' GROUP BY o_orderpriority")
COLUMNS = {
    "orders": ["o_orderkey", "o_orderdate", "o_orderpriority"],
    "lineitem": ["l_orderkey", "l_linenumber", "l_extendedprice", "l_discount"],
}
SEED = 1
STEPS = 20
ORDERS_PER_STEP = 100
FIRST_NEW_KEY = 10_000_001
FIRST_DATE, LAST_DATE = dt.date(1992, 1, 1), dt.date(1998, 8, 1)
LINES_PER_ORDER = (1, 7)
PART_KEYS = 200_000  # SF 1's part table: the retail price formula's domain
STEP = "step"
_FORMAT = 1  # bump when the generator changes: cached steps are regenerated


def load_tables(sf: float, cache: Path) -> Tables:
    """orders and lineitem at scale factor ``sf`` (tpchgen-cli, cached), the view's columns only."""
    return Tables.load(generate(sf, cache), COLUMNS)


def load_steps(tables: Tables, sf: float, cache: Path, steps: int = STEPS,
               seed: int = SEED) -> list[dict[str, pa.Table]]:
    """The first ``steps`` change steps (per step: ``{"orders": delta, "lineitem": delta}`` with ``_weight``).

    At least ``STEPS`` are generated and cached as Parquet (one file per table, a ``step`` column); the
    steps are drawn in order, so the first n are the same whatever the total.
    """
    directory = cache / f"sf{sf:g}" / "peers-steps"
    stored_steps = max(steps, STEPS)
    params = {"format": _FORMAT, "seed": seed, "steps": stored_steps, "orders_per_step": ORDERS_PER_STEP,
              "first_new_key": FIRST_NEW_KEY, "dates": [str(FIRST_DATE), str(LAST_DATE)],
              "lines_per_order": list(LINES_PER_ORDER), "columns": COLUMNS}
    marker = directory / "params.json"
    if not (marker.exists() and json.loads(marker.read_text()) == params):
        directory.mkdir(parents=True, exist_ok=True)
        generated = generate_steps(tables, stored_steps, seed)
        for name in COLUMNS:
            pq.write_table(pa.concat_tables(
                s[name].append_column(STEP, pa.array(np.full(s[name].num_rows, i + 1, np.int32)))
                for i, s in enumerate(generated)), directory / f"{name}.parquet")
        marker.write_text(json.dumps(params, indent=2))
    stored = {name: pq.read_table(directory / f"{name}.parquet") for name in COLUMNS}
    schemas = {name: tables.data[name].schema.append(pa.field(WEIGHT, pa.int64())) for name in COLUMNS}
    return [{name: t.filter(pc.equal(t[STEP], i + 1)).drop_columns([STEP]).cast(schemas[name])
             for name, t in stored.items()} for i in range(steps)]


def generate_steps(tables: Tables, steps: int, seed: int) -> list[dict[str, pa.Table]]:
    """Draw the steps (see the module docstring); the tables are not changed."""
    rng = np.random.default_rng(seed)
    orders, lineitem = tables.data["orders"], tables.data["lineitem"]
    if steps * ORDERS_PER_STEP > orders.num_rows:
        raise SystemExit(f"{steps} steps delete {steps * ORDERS_PER_STEP:,} orders; there are {orders.num_rows:,}")
    if pc.max(orders["o_orderkey"]).as_py() >= FIRST_NEW_KEY:
        raise SystemExit(f"new order keys start at {FIRST_NEW_KEY:,}, inside this scale factor's keys")
    originals = orders.sort_by("o_orderkey")
    span = (LAST_DATE - FIRST_DATE).days
    out = []
    for i in range(steps):
        n = ORDERS_PER_STEP
        keys = np.arange(FIRST_NEW_KEY + i * n, FIRST_NEW_KEY + (i + 1) * n, dtype=np.int64)
        dates = np.datetime64(FIRST_DATE) + rng.integers(0, span + 1, n).astype("timedelta64[D]")
        priorities = np.asarray(PRIORITIES)[rng.integers(0, len(PRIORITIES), n)]
        lines = rng.integers(LINES_PER_ORDER[0], LINES_PER_ORDER[1] + 1, n)
        new_orders = pa.table({"o_orderkey": keys, "o_orderdate": pa.array(dates, pa.date32()),
                               "o_orderpriority": priorities.tolist()}).cast(orders.schema)
        total = int(lines.sum())
        quantity = rng.integers(1, 51, total)
        part = rng.integers(1, PART_KEYS + 1, total)
        retail_cents = 90_000 + (part // 10) % 20_001 + 100 * (part % 1_000)
        new_lines = pa.table({
            "l_orderkey": np.repeat(keys, lines),
            "l_linenumber": np.concatenate([np.arange(1, k + 1) for k in lines]).astype(np.int32),
            "l_extendedprice": hundredths(quantity * retail_cents),
            "l_discount": hundredths(rng.integers(0, 11, total)),
        }).cast(lineitem.schema)
        gone_orders = originals.slice(i * n, n)
        gone_lines = lineitem.filter(pc.is_in(lineitem["l_orderkey"], value_set=gone_orders["o_orderkey"]))
        out.append({"orders": weighted([(new_orders, 1), (gone_orders, -1)]),
                    "lineitem": weighted([(new_lines, 1), (gone_lines, -1)])})
    return out


def canonical(rows: Iterable[Sequence[Any]]) -> list[tuple[str, int, Decimal | None]]:
    """The view's rows as exact values to compare: (priority, count, sum rounded to 4 decimals), sorted."""
    return sorted((priority, int(count), _four_places(total)) for priority, count, total in rows)


def table_rows(table: pa.Table) -> list[tuple]:
    return list(zip(*(column.to_pylist() for column in table.columns)))


def _four_places(value: Any) -> Decimal | None:
    if value is None:
        return None
    exact = value if isinstance(value, Decimal) else Decimal(repr(value))  # repr: the float's shortest text
    return exact.quantize(Decimal("0.0001"), rounding=ROUND_HALF_EVEN)
