"""The typed contract of one arrangement: its columns, its key, how NULL keys compare, its order.

An arrangement is a Z-set (rows with integer weights; equal rows add up,
rows whose weight sums to 0 vanish) indexed by some of its columns, the key.
Everything the engine keeps between steps is one: a source's copy, a join
side, an aggregate's accumulators, a MIN/MAX multiset, a view's output.

NULL keys, explicitly:

* ``NullKeys.EQUAL`` -- GROUP BY semantics: NULL is a key value equal to
  itself.  A probe key ``(NULL, 3)`` finds the rows stored with key
  ``(NULL, 3)``.  Aggregate accumulators, MIN/MAX multisets, source copies
  and view outputs use it.
* ``NullKeys.DISTINCT`` -- SQL ``=`` semantics: a key with a NULL in any
  column equals nothing.  ``lookup`` and ``extreme`` ignore such probe keys,
  so stored rows with a NULL in their key are never found by key (they are
  still stored, counted and scanned).  Join sides use it.

Row identity (which rows add up) is always NULL-equal and compares floats
by value after normalisation (``-0.0`` is ``0.0``, every NaN is one NaN, as
in PostgreSQL, where NaN equals NaN and sorts above every number).

``order`` names a column kept sorted within each key, so ``extreme`` can find
a key's smallest or largest value without reading the key's other rows (the
MIN/MAX multisets).  Its ordering is SQL's: numbers by value with NaN above
all numbers, strings by UTF-8 bytes (PostgreSQL's C collation), dates and
timestamps by time, booleans false < true.

Sharding: every stored row belongs to the hash of its key (a 64-bit hash
computed by ``freshview.algebra.hashing``, stable across processes and
versions of the file format).  Shard ``s`` of ``2**b`` is the rows whose key
hash has ``s`` as its top ``b`` bits, so an arrangement splits into
contiguous hash ranges without reading another shard's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

from freshview.algebra.keys import NullKeys
from freshview.schema import WEIGHT

# Column names the store reserves for itself in an arrangement's rows.
RESERVED = (WEIGHT, "_old_weight")
KEY_HASH = "_fv_key"  # a run's key hash and row hash columns (``runs``)
ROW_HASH = "_fv_row"

__all__ = ["Layout", "NullKeys", "RESERVED"]


@dataclass(frozen=True)
class Layout:
    """Stored columns (no ``_weight``), key columns, NULL-key semantics, optional ordered column.

    Immutable; its derived schemas are built once (every store call of a step reads them)."""

    schema: pa.Schema
    key: tuple[str, ...] = ()
    nulls: NullKeys = NullKeys.EQUAL
    order: str | None = None

    def __post_init__(self) -> None:
        # Field metadata and nullability are not part of a layout: strip them so layouts compare by content.
        object.__setattr__(self, "schema", pa.schema([pa.field(f.name, f.type) for f in self.schema]))
        object.__setattr__(self, "key", tuple(self.key))
        names = self.schema.names
        if len(set(names)) != len(names):
            raise ValueError(f"layout column names must be distinct: {names}")
        reserved = [n for n in names if n in RESERVED or n.startswith("_fv")]
        if reserved:
            raise ValueError(f"layout column names {reserved} are reserved")
        missing = [k for k in self.key if k not in names]
        if missing or len(set(self.key)) != len(self.key):
            raise ValueError(f"layout key {list(self.key)} must be distinct columns of {names}")
        if self.order is not None and (self.order not in names or self.order in self.key):
            raise ValueError(f"layout order column {self.order!r} must be a non-key column of {names}")

    @cached_property
    def values(self) -> tuple[str, ...]:
        """Non-key columns, in schema order."""
        return tuple(n for n in self.schema.names if n not in self.key)

    @cached_property
    def key_schema(self) -> pa.Schema:
        return pa.schema([self.schema.field(k) for k in self.key])

    @cached_property
    def weighted_schema(self) -> pa.Schema:
        """The rows as the store returns them: stored columns, then ``_weight`` (int64)."""
        return pa.schema(list(self.schema) + [pa.field(WEIGHT, pa.int64())])

    @cached_property
    def run_schema(self) -> pa.Schema:
        """A run's columns (``runs``): the weighted rows, then the key hash and the row hash (uint64)."""
        return pa.schema(list(self.weighted_schema) + [pa.field(KEY_HASH, pa.uint64()), pa.field(ROW_HASH, pa.uint64())])

    def to_json(self) -> dict:
        return {
            "schema": self.schema.serialize().to_pybytes().hex(),
            "key": list(self.key),
            "nulls": self.nulls.value,
            "order": self.order,
        }

    @staticmethod
    def from_json(data: dict) -> "Layout":
        schema = pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(data["schema"])))
        return Layout(schema, tuple(data["key"]), NullKeys(data["nulls"]), data.get("order"))
