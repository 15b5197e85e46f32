"""The two bulk operations of making a view, each in one place: loading a table's rows into a source's
copy (``load``) and computing a view's first result (``compute_first``).

Both the catalog's own path (``ViewCatalog.follow`` / ``create``) and a population beside the stream
(``population``) go through them, so a faster way of doing either changes only this module.
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa

from freshview.flow import IncrementalFlow, TwoPhaseFlow


def load(flow: TwoPhaseFlow | IncrementalFlow, source: str, chunks: Iterable[pa.Table]) -> int:
    """Load ``chunks`` (rows, or weighted rows with ``_weight``) into source ``source``'s copy; the rows loaded
    (``load_source``: in bulk into an empty copy no view reads yet, else a step per chunk)."""
    return flow.load_source(source, chunks)


def compute_first(flow: TwoPhaseFlow | IncrementalFlow, view: str, sql: str) -> None:
    """Register view ``view`` (engine SQL) and compute its first result from its sources' copies."""
    flow.register_view(view, sql)
