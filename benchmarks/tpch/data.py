"""TPC-H data from ``tpchgen-cli`` and a refresh stream in the spirit of TPC-H's RF1/RF2.

``generate(sf, cache)`` runs ``tpchgen-cli parquet`` once per scale factor and
keeps the files.  ``Tables`` loads them as Arrow, keeping only the columns the
suite's views read (a user registers what they query; long comment columns
would only cost load time), with stable types (strings, not string views).

``RefreshStream.step()`` makes one step's changes and applies them to the
current tables, which it keeps so that deletes carry whole old rows and a
recompute sees exactly the same data:

* RF1: new orders (copies of random existing orders with fresh keys) with
  their lineitems;
* RF2: the same number of the oldest orders deleted, with their lineitems;
* price updates: ``l_extendedprice`` of random lineitems raised 1% (old row
  −1, new row +1).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# Columns the views read, per table, in the order they are registered.
COLUMNS = {
    "lineitem": ["l_orderkey", "l_linenumber", "l_partkey", "l_suppkey", "l_quantity", "l_extendedprice",
                 "l_discount", "l_tax", "l_returnflag", "l_linestatus", "l_shipdate", "l_commitdate",
                 "l_receiptdate", "l_shipinstruct", "l_shipmode"],
    "orders": ["o_orderkey", "o_custkey", "o_orderstatus", "o_totalprice", "o_orderdate", "o_orderpriority",
               "o_shippriority", "o_comment"],
    "customer": ["c_custkey", "c_name", "c_address", "c_nationkey", "c_phone", "c_acctbal", "c_mktsegment",
                 "c_comment"],
    "supplier": ["s_suppkey", "s_name", "s_address", "s_nationkey", "s_phone", "s_acctbal", "s_comment"],
    "part": ["p_partkey", "p_name", "p_mfgr", "p_brand", "p_type", "p_size", "p_container"],
    "partsupp": ["ps_partkey", "ps_suppkey", "ps_availqty", "ps_supplycost"],
    "nation": ["n_nationkey", "n_name", "n_regionkey"],
    "region": ["r_regionkey", "r_name"],
}
PRIMARY_KEYS = {
    "lineitem": ["l_orderkey", "l_linenumber"], "orders": ["o_orderkey"], "customer": ["c_custkey"],
    "supplier": ["s_suppkey"], "part": ["p_partkey"], "partsupp": ["ps_partkey", "ps_suppkey"],
    "nation": ["n_nationkey"], "region": ["r_regionkey"],
}
WEIGHT = "_weight"


def generate(sf: float, cache: Path) -> Path:
    """Parquet files of every table at scale factor ``sf`` (generated once, then reused)."""
    target = cache / f"sf{sf:g}"
    if (target / "lineitem.parquet").exists():
        return target
    if shutil.which("tpchgen-cli") is None:
        raise SystemExit("tpchgen-cli is missing: pip install -e '.[bench]' (or pip install tpchgen-cli)")
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tpchgen-cli", "parquet", "-s", f"{sf:g}", f"--output-dir={target}"], check=True)
    return target


def _stable(table: pa.Table) -> pa.Table:
    """string_view -> string, drop field metadata: what every engine here reads the same way."""
    fields = [pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type) for f in table.schema]
    return table.cast(pa.schema(fields))


@dataclass
class Tables:
    data: dict[str, pa.Table]

    @classmethod
    def load(cls, directory: Path, columns: dict[str, list[str]] = COLUMNS) -> "Tables":
        """The tables (and columns) named in ``columns``, in that order."""
        return cls({name: _stable(pq.read_table(directory / f"{name}.parquet", columns=cols))
                    for name, cols in columns.items()})

    def ddl(self, name: str) -> str:
        """Column list in SQL for IncrementalFlow.register_source and CREATE TABLE."""
        return ", ".join(f"{f.name} {_sql_type(f.type)}" for f in self.data[name].schema)


def _sql_type(t: pa.DataType) -> str:
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_int32(t):
        return "INT"
    if pa.types.is_decimal(t):
        return f"NUMERIC({t.precision},{t.scale})"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_string(t):
        return "TEXT"
    raise ValueError(f"no SQL type for {t}")


class RefreshStream:
    """Per step: RF1 inserts, RF2 deletes (same count of orders), and price updates."""

    def __init__(self, tables: Tables, fraction: float, seed: int = 1) -> None:
        self.tables = tables
        self.rng = np.random.default_rng(seed)
        self.orders = tables.data["orders"]
        self.lineitem = tables.data["lineitem"]
        n_lines = self.lineitem.num_rows
        # orders per step so that RF1 touches ~fraction of lineitem (about 4 lines per order)
        per_order = n_lines / max(1, self.orders.num_rows)
        self.orders_per_step = max(1, int(round(fraction * n_lines / per_order)))
        self.updates_per_step = max(1, int(round(fraction * n_lines)))
        self.next_key = int(pc.max(self.orders["o_orderkey"]).as_py()) + 1

    def step(self) -> dict[str, pa.Table]:
        """One step's deltas (columns + ``_weight``) for orders and lineitem; applies them."""
        n = self.orders_per_step
        # RF1: copies of random orders with new keys, with their lineitems
        templates = self.orders.take(self.rng.integers(0, self.orders.num_rows, n))
        new_keys = pa.array(np.arange(self.next_key, self.next_key + n, dtype=np.int64))
        self.next_key += n
        key_map = dict(zip(templates["o_orderkey"].to_pylist(), new_keys.to_pylist()))
        new_orders = templates.set_column(0, "o_orderkey", new_keys)
        template_lines = self.lineitem.filter(pc.is_in(self.lineitem["l_orderkey"], value_set=templates["o_orderkey"]))
        remapped = pa.array([key_map[k] for k in template_lines["l_orderkey"].to_pylist()], pa.int64())
        new_lines = template_lines.set_column(0, "l_orderkey", remapped)
        # RF2: the oldest orders and their lineitems
        old_keys = pc.sort_indices(self.orders["o_orderkey"])[:n]
        gone_orders = self.orders.take(old_keys)
        gone_mask = pc.is_in(self.lineitem["l_orderkey"], value_set=gone_orders["o_orderkey"])
        gone_lines = self.lineitem.filter(gone_mask)
        self.orders = pa.concat_tables([self.orders.filter(pc.invert(
            pc.is_in(self.orders["o_orderkey"], value_set=gone_orders["o_orderkey"]))), new_orders])
        kept = self.lineitem.filter(pc.invert(gone_mask))
        # Price updates on random surviving lineitems
        picks = np.unique(self.rng.integers(0, kept.num_rows, self.updates_per_step))
        before = kept.take(pa.array(picks))
        price = before["l_extendedprice"]
        raised = pc.cast(pc.multiply(pc.cast(price, pa.float64()), 1.01), pa.float64())
        after = before.set_column(before.schema.get_field_index("l_extendedprice"), "l_extendedprice",
                                  pc.cast(pc.round(raised, 2), price.type))
        mask = np.ones(kept.num_rows, dtype=bool)
        mask[picks] = False
        self.lineitem = pa.concat_tables([kept.filter(pa.array(mask)), after, new_lines])
        self.tables.data["orders"], self.tables.data["lineitem"] = self.orders, self.lineitem
        return {
            "orders": weighted([(new_orders, 1), (gone_orders, -1)]),
            "lineitem": weighted([(new_lines, 1), (gone_lines, -1), (before, -1), (after, 1)]),
        }


def weighted(parts: list[tuple[pa.Table, int]]) -> pa.Table:
    """One delta: each table's rows with its weight (+1 insert, -1 delete) in ``_weight``."""
    return pa.concat_tables([t.append_column(WEIGHT, pa.array(np.full(t.num_rows, w, dtype=np.int64)))
                             for t, w in parts])
