"""Reproducible random change streams for differential tests.

A ``RandomTable`` holds the live content of one source and produces deltas
(source columns + int64 ``_weight``) that exercise what incremental view
maintenance gets wrong: groups that collide (small value domains), NULLs,
duplicate rows (tables without a key), updates that move a row to another
group or change its key, groups that become empty and come back, and whole
tables emptied.  Everything derives from the ``random.Random`` passed in, so
a failing seed replays exactly.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Callable, Mapping, Sequence, Union

import pyarrow as pa

from freshview.schema import WEIGHT, Column, SqlType, TableSchema

Domain = Union[Sequence[Any], Callable[[random.Random], Any]]

# Text values chosen to trip up LIKE, case handling, empty strings, UTF-8 order.
TEXT_VOCAB = ["a", "b", "B", "abc", "Abc", "", " ", "x%y", "a_b", "zz", "é", "Zebra"]
_DATES = [dt.date(y, m, d) for y in (2021, 2022, 2024) for m in (1, 2, 12) for d in (1, 15, 28)]
_TIMES = [dt.time(0, 0), dt.time(9, 30), dt.time(23, 59, 59), dt.time(12, 0, 0, 123456)]


def default_value(col_type: SqlType, rng: random.Random) -> Any:
    """A random non-NULL value of ``col_type`` from a small domain (so groups collide)."""
    kind = col_type.kind
    if col_type.is_integer:
        # Mostly 0..9; a few negatives (sign handling, ORDER BY, ABS).
        return rng.randint(0, 9) if rng.random() < 0.9 else rng.randint(-5, -1)
    if kind == "numeric":
        precision, scale = col_type.decimal_precision_scale
        if col_type.precision is None:
            scale = 2  # unconstrained numeric: values with a fraction anyway
        # Quarters in [-10, 30): exact in any scale >= 2, collide often.
        value = Decimal(rng.randint(-40, 119)) / 4
        limit = Decimal(10) ** (precision - scale) - Decimal(1).scaleb(-scale)
        value = max(min(value, limit), -limit)
        return value.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_EVEN)
    if kind == "float4":
        # Dyadic values only: float32 -> float64 conversion stays exact.
        return rng.randint(-40, 119) / 4
    if kind == "float8":
        if rng.random() < 0.8:
            return rng.randint(-40, 119) / 8
        return round(rng.uniform(-1000, 1000), 3)
    if kind == "text":
        return rng.choice(TEXT_VOCAB)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "date":
        return rng.choice(_DATES)
    if kind in ("timestamp", "timestamptz"):
        value = dt.datetime.combine(rng.choice(_DATES), rng.choice(_TIMES))
        return value.replace(tzinfo=dt.timezone.utc) if kind == "timestamptz" else value
    if kind == "interval":
        return (rng.randint(0, 2), rng.randint(0, 3), rng.choice([0, 1800, 3600]) * 10**9)  # (months, days, ns)
    if kind == "null":
        return None
    raise ValueError(f"no default generator for {col_type}")


def key_value(col_type: SqlType, rng: random.Random, space: int) -> Any:
    """A random primary-key value drawn from ``space`` candidates (keys get reused)."""
    n = rng.randrange(space)
    kind = col_type.kind
    if col_type.is_integer or kind in ("float4", "float8"):
        return n if col_type.is_integer else float(n)
    if kind == "numeric":
        _, scale = col_type.decimal_precision_scale
        return Decimal(n).quantize(Decimal(1).scaleb(-scale))
    if kind == "text":
        return f"k{n}"
    if kind == "date":
        return dt.date(2020, 1, 1) + dt.timedelta(days=n)
    if kind in ("timestamp", "timestamptz"):
        value = dt.datetime(2020, 1, 1) + dt.timedelta(hours=n)
        return value.replace(tzinfo=dt.timezone.utc) if kind == "timestamptz" else value
    if kind == "bool":
        return n % 2 == 0
    return default_value(col_type, rng)


class RandomTable:
    """The live rows of one source plus a generator of random deltas.

    ``domains`` maps a column name to a list of candidate values or a
    ``callable(rng)``; other columns use :func:`default_value` (key columns use
    :func:`key_value`).  A domain value of ``None`` is allowed (a NULL).
    """

    def __init__(
        self,
        name: str,
        schema: TableSchema,
        rng: random.Random,
        domains: Mapping[str, Domain] | None = None,
        null_prob: float = 0.1,
    ) -> None:
        self.name = name
        self.schema = schema
        self.rng = rng
        self.domains = dict(domains or {})
        unknown = set(self.domains) - set(schema.names)
        if unknown:
            raise ValueError(f"domains for unknown column(s) {sorted(unknown)} of {name}")
        self.null_prob = null_prob
        self.rows: list[tuple] = []
        self._key_idx = [schema.names.index(k) for k in schema.primary_key]
        self._keys: Counter[tuple] = Counter()
        self.steps = 0

    # -- views of the content ------------------------------------------------
    @property
    def has_key(self) -> bool:
        return bool(self._key_idx)

    def key_of(self, row: tuple) -> tuple:
        return tuple(row[i] for i in self._key_idx)

    def current(self) -> pa.Table:
        """The integrated content (no ``_weight``)."""
        return self._to_table(self.rows, None)

    def __len__(self) -> int:
        return len(self.rows)

    # -- change generation ------------------------------------------------------
    def step(self, n_changes: int, inserts_only: bool = False, consolidate: bool = False) -> pa.Table:
        """Apply ``n_changes`` random changes and return them as a delta.

        The delta has weights +1/-1 (an update is its old row -1 and new row
        +1); a row inserted and deleted within the same step is cancelled
        rather than emitted as a +1/-1 pair.  With ``consolidate=True`` equal
        rows are merged and weights may be any non-zero integer.
        """
        rng = self.rng
        net: Counter[tuple] = Counter()
        self.steps += 1
        # Rarely empty the whole table: every group of every view disappears.
        if not inserts_only and self.rows and rng.random() < 0.02:
            for row in list(self.rows):
                self._delete(row, net)
        for _ in range(n_changes):
            op = "insert" if inserts_only or not self.rows else rng.choices(
                ["insert", "delete", "update", "wipe_group"], weights=[45, 22, 28, 5])[0]
            if op == "insert":
                row = self._new_row()
                if row is not None:
                    self._insert(row, net)
            elif op == "delete":
                self._delete(rng.choice(self.rows), net)
            elif op == "update":
                old = rng.choice(self.rows)
                self._delete(old, net)
                new = self._updated(old)
                if new is None:  # no free key: keep the old row
                    new = old
                self._insert(new, net)
            else:
                self._wipe_group(net)
        out: list[tuple] = []
        weights: list[int] = []
        for row, w in net.items():
            if w == 0:
                continue
            if consolidate:
                out.append(row)
                weights.append(w)
            else:
                out.extend([row] * abs(w))
                weights.extend([1 if w > 0 else -1] * abs(w))
        # Shuffle so deletes and inserts interleave: the engine must not rely on order.
        order = list(range(len(out)))
        rng.shuffle(order)
        return self._to_table([out[i] for i in order], [weights[i] for i in order])

    def load(self, rows: Sequence[tuple]) -> pa.Table:
        """Insert exactly ``rows`` (a fixed content) and return them as a delta."""
        net: Counter[tuple] = Counter()
        for row in rows:
            self._insert(tuple(row), net)
        return self._to_table([tuple(r) for r in rows], [1] * len(rows))

    # -- primitive changes --------------------------------------------------------
    def _insert(self, row: tuple, net: Counter) -> None:
        if self.has_key:
            key = self.key_of(row)
            assert self._keys[key] == 0, f"{self.name}: duplicate key {key}"
            self._keys[key] += 1
        self.rows.append(row)
        net[row] += 1

    def _delete(self, row: tuple, net: Counter) -> None:
        idx = self.rows.index(row)
        # Swap-remove: order of live rows is irrelevant.
        self.rows[idx] = self.rows[-1]
        self.rows.pop()
        if self.has_key:
            key = self.key_of(row)
            self._keys[key] -= 1
            if not self._keys[key]:
                del self._keys[key]
        net[row] -= 1

    def _wipe_group(self, net: Counter) -> None:
        """Delete every row sharing one column value with a random row (a group empties)."""
        non_key = [i for i, c in enumerate(self.schema.columns) if c.name not in self.schema.primary_key]
        col = self.rng.choice(non_key or list(range(len(self.schema.columns))))
        value = self.rng.choice(self.rows)[col]
        for row in [r for r in self.rows if r[col] == value or (r[col] is None and value is None)]:
            self._delete(row, net)

    # -- value generation ---------------------------------------------------------
    def _value(self, col: Column, is_key: bool) -> Any:
        domain = self.domains.get(col.name)
        if domain is not None:
            return domain(self.rng) if callable(domain) else self.rng.choice(list(domain))
        if is_key:
            # Key space grows with the table so inserts find free keys, yet
            # stays small enough that deleted keys get reused.
            return key_value(col.type, self.rng, max(20, 3 * len(self.rows) + 10))
        if col.nullable and self.rng.random() < self.null_prob:
            return None
        return default_value(col.type, self.rng)

    def _fresh_key(self, base: tuple | None) -> tuple | None:
        """Values for the key columns that no live row uses (None if none found)."""
        cols = [self.schema.columns[i] for i in self._key_idx]
        for _ in range(50):
            key = tuple(self._value(c, is_key=True) for c in cols)
            if key != base and self._keys[key] == 0 and all(v is not None for v in key):
                return key
        return None

    def _new_row(self) -> tuple | None:
        # Without a key, sometimes re-insert an existing row: duplicates.
        if not self.has_key and self.rows and self.rng.random() < 0.15:
            return self.rng.choice(self.rows)
        row = [self._value(c, c.name in self.schema.primary_key) for c in self.schema.columns]
        if self.has_key:
            key = self._fresh_key(None)
            if key is None:
                return None
            for i, v in zip(self._key_idx, key):
                row[i] = v
        return tuple(row)

    def _updated(self, old: tuple) -> tuple | None:
        """``old`` with some non-key columns changed; sometimes with a new key."""
        row = list(old)
        non_key = [i for i, c in enumerate(self.schema.columns) if c.name not in self.schema.primary_key]
        if non_key:
            for i in self.rng.sample(non_key, self.rng.randint(1, min(2, len(non_key)))):
                row[i] = self._value(self.schema.columns[i], is_key=False)
        if self.has_key and (not non_key or self.rng.random() < 0.2):
            # The old row is already deleted, so its key is free again; ask
            # for a different one so the key really changes.
            key = self._fresh_key(self.key_of(old))
            if key is None:
                return None
            for i, v in zip(self._key_idx, key):
                row[i] = v
        return tuple(row)

    def _to_table(self, rows: list[tuple], weights: list[int] | None) -> pa.Table:
        schema = self.schema.arrow(with_weight=weights is not None)
        arrays = [pa.array([r[i] for r in rows], type=f.type) for i, f in enumerate(schema)
                  if f.name != WEIGHT]
        if weights is not None:
            arrays.append(pa.array(weights, type=pa.int64()))
        return pa.Table.from_arrays(arrays, schema=schema)


def fold_deltas(deltas: list[pa.Table]) -> Counter:
    """Integrate deltas into a Counter row -> multiplicity (for checks)."""
    total: Counter[tuple] = Counter()
    for delta in deltas:
        names = [n for n in delta.column_names if n != WEIGHT]
        cols = [delta.column(n).to_pylist() for n in names]
        for row, w in zip(zip(*cols) if cols else [()] * delta.num_rows, delta.column(WEIGHT).to_pylist()):
            total[row] += w
    # Drop zero entries but keep negative ones: they reveal a broken stream.
    return Counter({row: w for row, w in total.items() if w != 0})
