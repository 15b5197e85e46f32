"""Operator state on disk, behind one protocol.

This package owns operator state: arrangements (Z-sets of weighted rows
indexed by key columns, see ``layout``) and small JSON metadata (catalog,
step counter), kept on disk with memory only as a bounded cache.  Operators
reach them only through ``protocol.StateStore``: ``apply`` a change,
``lookup`` the rows of some keys, ``extreme`` (min/max of a column per key,
by an ordered index), ``scan`` and ``count`` (and ``prepare_rows`` /
``lookup_prepared``, so that a change read and then written is hashed once),
all inside one transaction per
engine step, and each call costs O(size of the change), never O(size of the
state).  ``SpineStateStore`` (sorted Arrow runs and a write-ahead log, see
``store``) implements it.
"""

from __future__ import annotations

from freshview.runtime.state.layout import Layout, NullKeys
from freshview.runtime.state.protocol import StateStore
from freshview.runtime.state.store import SpineStateStore

__all__ = ["Layout", "NullKeys", "StateStore", "SpineStateStore"]
