"""What the engine needs from operator state: the ``StateStore`` protocol.

Operators reach state only through this protocol, so the storage layout can
change without touching them.  All tables in and out are Arrow; names of
arrangements are free-form strings (``view/v/op3/left``); every call costs
O(size of its argument and its answer), never O(size of the arrangement),
except ``scan``, ``count``, ``load``, ``load_runs`` and ``repeated``.

Transactions: ``begin() .. commit()`` is atomic; reads inside a transaction
see its own writes; ``rollback()`` discards every write and every
arrangement created or dropped since ``begin()``.  A committed step survives
the process being killed at any moment (SIGKILL); a crash leaves exactly the
state of the last commit.  Calls outside a transaction run as their own
transaction.  One process at a time may open a state directory.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol

import pyarrow as pa

from freshview.runtime.state.layout import Layout
from freshview.runtime.state.runs import KEY_HASH, ROW_HASH

__all__ = ["KEY_HASH", "ROW_HASH", "StateStore"]


class StateStore(Protocol):
    # ------------------------------------------------------------------ lifecycle and transactions
    def close(self) -> None: ...
    def begin(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...

    @property
    def in_transaction(self) -> bool: ...

    # ------------------------------------------------------------------ metadata: small JSON values, transactional
    def get_meta(self, key: str, default: Any = None) -> Any: ...
    def set_meta(self, key: str, value: Any) -> None: ...
    def delete_meta(self, key: str) -> None: ...

    # ------------------------------------------------------------------ catalog of arrangements
    def ensure_arrangement(self, name: str, layout: Layout) -> None:
        """Create ``name`` empty, or check that it exists with exactly this layout (StateError otherwise)."""

    def layout(self, name: str) -> Layout: ...
    def has_arrangement(self, name: str) -> bool: ...
    def drop_arrangement(self, name: str) -> None: ...
    def list_arrangements(self, prefix: str = "") -> list[str]: ...

    # ------------------------------------------------------------------ writes
    def apply(self, name: str, delta: pa.Table) -> None:
        """Add ``delta``'s weights: its columns are the layout's (by name, any order) plus ``_weight``.

        ``delta`` need not be consolidated; rows of weight 0 are allowed.
        """

    def apply_report(self, name: str, delta: pa.Table) -> pa.Table:
        """``apply``, and return each distinct row of ``delta`` with ``_old_weight`` and ``_weight`` (new).

        Costs a lookup of the delta's keys on top of ``apply``; sources use it
        to refuse deletes of absent rows and duplicate primary keys.
        """

    def prepare_rows(self, name: str, delta: pa.Table) -> pa.Table:
        """``delta`` in the store's own form of a write to ``name``: the layout's columns and ``_weight``
        (cast, floats normalised) with the key-hash and row-hash columns ``KEY_HASH``, ``ROW_HASH``
        appended (the run's columns), not consolidated.

        A caller that reads with these rows (``lookup_prepared``), checks them and then writes them
        (``apply`` recognises the run's columns and does not hash again) has them hashed once.  Rows
        derived from them (filtered, concatenated, consolidated with ``ROW_HASH`` as the hashes) keep
        valid hashes; rows built otherwise must be prepared again.
        """

    def lookup_prepared(self, name: str, keys: pa.Table) -> pa.Table:
        """``lookup``, returning the run's columns (hashes included); ``keys`` may carry ``KEY_HASH`` from
        ``prepare_rows`` of this arrangement (or of one whose key columns have the same schema: the key
        hash is a function of the key values alone), which is then used instead of hashing the keys."""

    def load(self, name: str, rows: pa.Table) -> None:
        """Bulk-load an EMPTY arrangement (a first computation): sorted and indexed once, no lookups."""

    def load_runs(self, name: str, tables: Iterable[pa.Table]) -> int:
        """Bulk-load an EMPTY arrangement from batches (its columns + ``_weight``), one sorted run each,
        without lookups; memory holds one batch at a time.  Returns the rows loaded."""

    def repeated(self, name: str) -> pa.Table:
        """The keys (``layout.key_schema`` + ``_weight``, the weights of their rows summed) held by more
        than one row, NULL keys equal (a bulk load's duplicate check): O(size of the arrangement)."""

    # ------------------------------------------------------------------ reads
    def lookup(self, name: str, keys: pa.Table) -> pa.Table:
        """The rows whose key equals a row of ``keys`` (columns named as the layout's key), consolidated.

        Returns ``layout.weighted_schema``: each distinct stored row once, with
        its nonzero weight.  NULL keys follow ``layout.nulls``.  With an empty
        key every row matches (``keys`` is not read).
        """

    def extreme(self, name: str, keys: pa.Table, kind: str) -> pa.Table:
        """Per distinct probe key: the min (``kind="min"``) or max of ``layout.order`` over rows with
        positive weight and a non-NULL order value.

        Returns the key columns plus the order column; keys without such a row
        are absent.  With an empty key the arrangement is one group.
        """

    def scan(self, name: str) -> pa.Table:
        """Every row with a nonzero weight, consolidated (``layout.weighted_schema``)."""

    def count(self, name: str) -> int:
        """How many distinct rows have a nonzero weight."""

    def is_empty(self, name: str) -> bool:
        """Whether nothing was ever written to the arrangement since it was created or emptied (what
        ``load`` and ``load_runs`` need): O(1)."""
