"""The bulk operations of making a view, each in one place: loading a table's rows into a source's copy
(``load``), or taking the service's own copy of it as pinned (``take``), and computing a view's first
result (``compute_first``).

Both the catalog's own path (``ViewCatalog.follow`` / ``create``) and a population beside the stream
(``population``) go through them, so a faster way of doing either changes only this module.
"""

from __future__ import annotations

import logging
from typing import Iterable

import pyarrow as pa

from freshview.errors import StateError
from freshview.flow import IncrementalFlow, TwoPhaseFlow
from freshview.runtime.relation import col_name
from freshview.runtime.reuse import PinnedCircuit
from freshview.runtime.state.pin import Pinned
from freshview.schema import WEIGHT

log = logging.getLogger("freshview.service")


def load(flow: TwoPhaseFlow | IncrementalFlow, source: str, chunks: Iterable[pa.Table]) -> int:
    """Load ``chunks`` (rows, or weighted rows with ``_weight``) into source ``source``'s copy; the rows loaded
    (``load_source``: in bulk into an empty copy no view reads yet, else a step per chunk)."""
    return flow.load_source(source, chunks)


def take(flow: IncrementalFlow, source: str, pinned: Pinned) -> int:
    """Fill source ``source``'s empty copy with the service's copy of the table as ``pinned``: its run files
    linked (``IncrementalFlow.adopt_source``), or, where they cannot be, its rows loaded."""
    try:
        return flow.adopt_source(source, pinned)
    except StateError as exc:
        log.info("source %s: its copy loaded row by row (%s)", source, exc)
    schema = flow.source_schema(source)
    positions = [col_name(i) for i in range(len(schema.columns))]
    rows = pinned.scan().select([*positions, WEIGHT]).rename_columns([*schema.names, WEIGHT])
    return load(flow, source, [rows])


def compute_first(flow: IncrementalFlow, view: str, sql: str, reusing: PinnedCircuit | None = None) -> None:
    """Register view ``view`` (engine SQL) and compute its first result from its sources' copies; what it
    shares with ``reusing`` (another circuit over the same copies, pinned with them) taken from its state
    (``runtime.reuse``)."""
    flow.register_view(view, sql, reusing=reusing)
