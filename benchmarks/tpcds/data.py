"""TPC-DS data from ``tpcgen-cli`` and a refresh stream of the fact tables.

``generate(sf, cache)`` runs ``tpcgen-cli tpcds parquet`` once per scale
factor and keeps the files.  ``load(directory, views)`` reads the tables the
views use, keeping only the columns they read (plus primary keys), as stable
Arrow types (string, not string_view).

``RefreshStream.step()`` changes each fact table the views read by
``fraction`` of its rows per kind, in the spirit of TPC-DS's data maintenance:
new sales and returns (copies of random rows under fresh ticket/order
numbers), deletes of random rows, and quantity updates (old row −1, new row
+1); inventory gets quantity-on-hand updates.  It keeps the current tables so
that deletes carry whole old rows and a recompute sees exactly the same data.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp

from benchmarks.tpcds.schema import FACTS, TABLES
from benchmarks.tpch.data import WEIGHT, weighted

PRIMARY_KEYS = {name: pk for name, (_, pk) in TABLES.items()}
# The fact tables' order number (fresh values for new rows) and the quantity a step updates.
NUMBER = {"store_sales": "ss_ticket_number", "store_returns": "sr_ticket_number",
          "catalog_sales": "cs_order_number", "catalog_returns": "cr_order_number",
          "web_sales": "ws_order_number", "web_returns": "wr_order_number"}
QUANTITY = {"store_sales": "ss_quantity", "store_returns": "sr_return_quantity", "catalog_sales": "cs_quantity",
            "catalog_returns": "cr_return_quantity", "web_sales": "ws_quantity",
            "web_returns": "wr_return_quantity", "inventory": "inv_quantity_on_hand"}


def generate(sf: float, cache: Path) -> Path:
    """Parquet files of every table at scale factor ``sf`` (generated once, then reused)."""
    target = cache / f"tpcds-sf{sf:g}"
    if (target / "store_sales.parquet").exists():
        return target
    if shutil.which("tpcgen-cli") is None:
        raise SystemExit("tpcgen-cli is missing: pip install -e '.[bench]' (or pip install tpcgen-cli)")
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tpcgen-cli", "tpcds", "parquet", "-s", f"{sf:g}", "--output-dir", str(target)], check=True)
    return target


def columns_read(views: dict[str, str]) -> dict[str, list[str]]:
    """Per table the views read: its key and the columns any view names, in the table's order."""
    names = set()
    tables = set()
    for sql in views.values():
        tree = sqlglot.parse_one(sql, read="postgres")
        names |= {c.name.lower() for c in tree.find_all(exp.Column)}
        tables |= {t.name.lower() for t in tree.find_all(exp.Table)}
    out = {}
    for table in sorted(tables & set(TABLES)):
        ddl, pk = TABLES[table]
        cols = [c.split()[0] for c in ddl.split(", ")]
        keep = set(pk) | {QUANTITY.get(table, ""), NUMBER.get(table, "")}
        out[table] = [c for c in cols if c in names or c in keep]
    return out


def _stable(table: pa.Table) -> pa.Table:
    fields = [pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type) for f in table.schema]
    return table.cast(pa.schema(fields))


class Tables:
    """The tables as Arrow, and their DDL (the columns kept, with the schema's types)."""

    def __init__(self, data: dict[str, pa.Table]) -> None:
        self.data = data

    @classmethod
    def load(cls, directory: Path, columns: dict[str, list[str]]) -> "Tables":
        return cls({name: _stable(pq.read_table(directory / f"{name}.parquet", columns=cols))
                    for name, cols in columns.items()})

    def ddl(self, name: str) -> str:
        types = dict(c.split(" ", 1) for c in TABLES[name][0].split(", "))
        return ", ".join(f"{c} {types[c]}" for c in self.data[name].column_names)


class RefreshStream:
    """Per step and fact table: inserts, deletes and quantity updates, ``fraction`` of its rows each."""

    def __init__(self, tables: Tables, fraction: float, seed: int = 1) -> None:
        self.tables = tables
        self.fraction = fraction
        self.rng = np.random.default_rng(seed)
        self.next_number = {t: int(pc.max(tables.data[t][c]).as_py() or 0) + 1
                            for t, c in NUMBER.items() if t in tables.data}

    def step(self) -> dict[str, pa.Table]:
        deltas = {}
        for name in FACTS:
            if name in self.tables.data:
                deltas[name] = self._change(name)
        return deltas

    def _change(self, name: str) -> pa.Table:
        table = self.tables.data[name]
        n = max(1, int(round(self.fraction * table.num_rows)))
        parts: list[tuple[pa.Table, int]] = []
        picks = self.rng.permutation(table.num_rows)
        mask = np.ones(table.num_rows, dtype=bool)
        if name in NUMBER:  # deletes and new rows
            gone = picks[:n]
            mask[gone] = False
            parts.append((table.take(pa.array(gone)), -1))
            number = NUMBER[name]
            start = self.next_number[name]
            self.next_number[name] += n
            new = table.take(pa.array(self.rng.integers(0, table.num_rows, n)))
            i = new.schema.get_field_index(number)
            new = new.set_column(i, number, pa.array(np.arange(start, start + n), new.schema.field(i).type))
            parts.append((new, 1))
            updated = picks[n:2 * n]
        else:
            new = None
            updated = picks[:n]
        before = table.take(pa.array(updated))
        mask[updated] = False
        q = QUANTITY[name]
        i = before.schema.get_field_index(q)
        after = before.set_column(i, q, pc.add(before[q], pa.scalar(1, before.schema.field(i).type)))
        parts += [(before, -1), (after, 1)]
        kept = [table.filter(pa.array(mask)), after] + ([new] if new is not None else [])
        self.tables.data[name] = pa.concat_tables(kept)
        return weighted(parts)


__all__ = ["PRIMARY_KEYS", "WEIGHT", "RefreshStream", "Tables", "columns_read", "generate"]
