"""Debezium messages in and out of a flow: the adapter between ``formats.debezium`` (pure) and the engine.

In (``tick_debezium``): each source's messages are read (``debezium.read``) and netted into
operations on the source's rows before the batch (``debezium.net``); ``source_change`` makes them a
``SourceChange`` (keyed upserts and deletes with the checks the messages need), so the engine looks
each key up once and no old row is read here.  A check the engine refuses (``ChangeRefused``) comes
back as the ``MessageError`` of the message that needed it (``refusal``).

Out (``watch_output(format="debezium")``, the pipeline's sinks): ``DebeziumEncoder`` turns a view's
changes into one message per changed result key; ``DebeziumWatch`` is a watch of those messages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Container, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from freshview.algebra.batch import DeltaBatch, consolidate
from freshview.errors import DeltaError
from freshview.flow import dedup as dedup_rules
from freshview.flow import seen_set
from freshview.flow.watches import Watch, Watches
from freshview.formats import debezium
from freshview.plan import nodes as pn
from freshview.runtime.operators.source import ChangeRefused, SourceChange, checks
from freshview.schema import WEIGHT, TableSchema

__all__ = ["DebeziumBatch", "DebeziumEncoder", "DebeziumWatch", "refusal", "source_change"]


def _rows(rows: Sequence[tuple], schema: TableSchema) -> pa.Table:
    arrays = [pa.array([r[i] for r in rows], type=c.type.arrow) for i, c in enumerate(schema.columns)]
    return pa.Table.from_arrays(arrays, schema=schema.arrow())


def _weighted(rows: Sequence[tuple], weights: Sequence[int], schema: TableSchema) -> pa.Table:
    return _rows(rows, schema).append_column(WEIGHT, pa.array(list(weights), pa.int64()))


def source_change(netted: debezium.Netted, schema: TableSchema) -> SourceChange:
    """The engine's form of a netted batch (tables in the source's column names); a check's
    ``_fv_order`` is its index in ``netted.checks``."""
    wanted = None
    if netted.checks:
        wanted = checks(_rows([c.image for c in netted.checks], schema).select(
                            list(schema.primary_key) or schema.names),
                        np.array([c.at_least for c in netted.checks], np.int64),
                        pa.array([c.at_most for c in netted.checks], pa.int64()),
                        np.arange(len(netted.checks), dtype=np.int64))
    if netted.keyed:
        return SourceChange(upserts=_rows(netted.upserts, schema) if netted.upserts else None,
                            deletes=_rows(netted.deletes, schema) if netted.deletes else None,
                            truncate=netted.truncate, checks=wanted,
                            late=_rows(netted.late, schema) if netted.late else None)
    rows = consolidate(_weighted(netted.inserts, netted.insert_counts, schema)) if netted.inserts else None
    deletes = _weighted(netted.deletes, netted.delete_counts, schema) if netted.deletes else None
    return SourceChange(rows=rows, deletes=deletes, truncate=netted.truncate, checks=wanted)


def refusal(netted: debezium.Netted, exc: ChangeRefused, source: str) -> debezium.MessageError:
    """The message whose check the engine refused, as a ``MessageError``."""
    check = netted.checks[exc.order]
    return debezium.MessageError(check.offset, check.reason, source)


@dataclass
class DebeziumBatch:
    """One ``tick_debezium`` step's messages, read and netted per source, in the batches' order.

    ``changes``: per source, its ``SourceChange`` (an empty one for a dedup source whose batch was seen
    before); ``digests``: the dedup sources' batch digests (of the messages: their change depends on the
    source's state, so a re-delivered batch gives another change); ``meta``: per source, the last
    message's ``ts_ms`` and ``source`` block (``debezium/<source>``).  ``error``: the first message
    refused whatever the sources' rows are (unreadable, a key twice created ...); ``changes`` then hold
    the sources before it and its own source's operations up to it, whose checks an earlier message
    may fail first (messages refuse in order).
    """

    changes: dict[str, SourceChange] = field(default_factory=dict)
    netted: dict[str, debezium.Netted] = field(default_factory=dict)
    digests: dict[str, bytes] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    error: debezium.MessageError | None = None

    @staticmethod
    def read(batches: Mapping[str, Iterable[Any]], schemas: Mapping[str, TableSchema], dedup: Container[str],
             store, lenient: bool) -> "DebeziumBatch":
        """``lenient``: a flow with a state TTL (a ``u``/``d`` of an evicted row is no error)."""
        out = DebeziumBatch()
        for name, messages in batches.items():
            schema = schemas[name]
            try:
                read = debezium.read(messages, schema, name)
                if name in dedup and read:
                    out.digests[name] = dedup_rules.changes_digest(read, [c.type.arrow for c in schema.columns])
                if name in out.digests and seen_set.seen(store, name, out.digests[name]):
                    out.changes[name] = SourceChange()
                else:
                    out.netted[name] = netted = debezium.net(read, schema, name, lenient)
                    out.changes[name] = source_change(netted, schema)
                    if netted.error is not None:
                        raise netted.error
            except debezium.MessageError as exc:
                out.error = exc
                return out
            if read and (read[-1].ts_ms is not None or read[-1].source is not None):
                out.meta[f"debezium/{name}"] = {"ts_ms": read[-1].ts_ms, "source": read[-1].source}
        return out

    def checks_before_error(self) -> dict[str, SourceChange]:
        """The checks of the messages before ``error``, alone (nothing applied if they hold)."""
        return {n: SourceChange(checks=c.checks) for n, c in self.changes.items() if c.checks is not None}

    def refusal(self, exc: ChangeRefused) -> DeltaError:
        """The engine's refusal as the ``MessageError`` of the message whose check failed."""
        source = exc.source
        return refusal(self.netted[source], exc, source) if source in self.netted else exc


class DebeziumEncoder:
    """A view's changes as Debezium messages (dicts), one per changed result key (``formats.debezium``).

    A view whose rows may repeat (key: all columns + ``_fv_count``) needs each row's multiplicity after
    every step: ``counts`` starts from the view's rows when the encoder is made and is kept up by
    ``encode``, which must therefore see every step's change, in order.
    """

    def __init__(self, view: str, columns: pn.Columns, key: Sequence[int], counts: dict[tuple, int] | None,
                 decimal_handling: str, schemas: bool = True) -> None:
        self.view, self.columns, self.key, self.counts = view, columns, key, counts
        self.decimal_handling, self.schemas = decimal_handling, schemas

    def encode(self, table: pa.Table, step: int, ts_ms: int | None = None,
               source_ts_ms: int | None = None) -> list[dict]:
        counts = self.counts

        def counts_after(rows: list[tuple], weights: list[int]) -> list[int]:
            out = []
            for row, w in zip(rows, weights):
                k = debezium.row_key(row)
                counts[k] = n = counts.get(k, 0) + w  # type: ignore[index]
                if n <= 0:
                    del counts[k]  # type: ignore[union-attr]
                out.append(n)
            return out

        return debezium.encode(table, self.columns, self.key, counts is not None, self.view, step,
                               int(time.time() * 1000) if ts_ms is None else ts_ms,
                               counts_after=counts_after if counts is not None else None,
                               decimal_handling=self.decimal_handling, source_ts_ms=source_ts_ms,
                               schemas=self.schemas)


class DebeziumWatch(Watch):
    """A ``Watch`` whose items are Debezium messages (dicts), one per changed result key."""

    def __init__(self, watches: Watches, view: str, timeout: float | None, encoder: DebeziumEncoder) -> None:
        super().__init__(watches, view, timeout)
        self.encoder = encoder

    def _push(self, batch: DeltaBatch) -> None:
        messages = self.encoder.encode(batch.table, batch.step)
        with self._cond:
            self._pending.extend(messages)
            self._cond.notify_all()
