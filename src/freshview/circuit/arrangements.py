"""The name of every arrangement (and per-arrangement metadata key) in the state store, in one place.

A state store names its arrangements by free-form text (``runtime/state/protocol.py``); the names are
part of the state's format (a resumed flow, a checkpoint, a shard find their state by them), so they
are made here and nowhere else.  ``Arrangement`` is the type of a made name; code that reads a name
back asks this module (``view_prefix``, ``is_ttl_index``) instead of taking it apart.

    source/<source>                 a source's rows, keyed by its primary key (or the whole row)
    view/<view>/out                 a view's rows (its integrate)
    view/<view>/pending             a view's change held back by the flush interval
    view/<view>/op<n>/<part>        operator n's state (``acc``, ``left``, ``ext0`` ...; ``circuit.nodes``)
    dedup-seen/<source>             a dedup source's seen digests, by digest
    dedup-order/<source>            the same, by insertion sequence
    <owner>/ttl/last, /ttl/bucket   a state TTL owner's last-touch index (``runtime/ttl.py``)

Meta keys: ``dedup/<source>`` (a seen set's counters), ``<top>/token`` (a vector view's cache token).
A name may hold ``/`` (``"Sales.Big Totals"`` does not, but nothing forbids it), hence the prefixes
``dedup-seen/`` rather than ``dedup/<source>/seen``.
"""

from __future__ import annotations

from typing import NewType

Arrangement = NewType("Arrangement", str)

_TTL_PARTS = ("/ttl/last", "/ttl/bucket")


def source(name: str) -> Arrangement:
    """Where a source's rows are kept (keyed by its primary key, or the whole row)."""
    return Arrangement(f"source/{name}")


def view_prefix(view: str) -> str:
    """The prefix of every arrangement a view owns (its output, its pending change, its operators')."""
    return f"view/{view}/"


def view_output(view: str) -> Arrangement:
    """A view's rows: what ``snapshot`` reads and views over it start from."""
    return Arrangement(f"{view_prefix(view)}out")


def view_pending(view: str) -> Arrangement:
    """A view's change held back between flushes (``flush_interval``)."""
    return Arrangement(f"{view_prefix(view)}pending")


def operator(view: str, number: int) -> str:
    """The id of a view's ``number``-th operator (pre-order from the root): its state's prefix."""
    return f"{view_prefix(view)}op{number}"


def operator_state(op_id: str, part: str) -> Arrangement:
    """One arrangement of an operator's state (``acc``, ``left``, ``ext0``, ``input`` ...)."""
    return Arrangement(f"{op_id}/{part}")


def operator_part(op_id: str) -> str:
    """The short name of an operator id (``op3``), as ``explain`` prints it."""
    return op_id.rsplit("/", 1)[-1]


def dedup_seen(source_name: str) -> Arrangement:
    """A dedup source's seen digests (the two words), keyed by digest."""
    return Arrangement(f"dedup-seen/{source_name}")


def dedup_order(source_name: str) -> Arrangement:
    """The same digests keyed by insertion sequence number (the oldest are dropped first)."""
    return Arrangement(f"dedup-order/{source_name}")


def dedup_meta(source_name: str) -> str:
    """The meta key of a dedup source's counters (``flow.dedup.SeenState``)."""
    return f"dedup/{source_name}"


def ttl_last(owner: str) -> Arrangement:
    """A TTL owner's keys with the bucket of their last touch, keyed by key."""
    return Arrangement(f"{owner}{_TTL_PARTS[0]}")


def ttl_bucket(owner: str) -> Arrangement:
    """The same rows keyed by bucket."""
    return Arrangement(f"{owner}{_TTL_PARTS[1]}")


def is_ttl_index(name: str) -> bool:
    """Whether ``name`` is one of a TTL owner's two index arrangements."""
    return name.endswith(_TTL_PARTS)


def vector_token(top: Arrangement) -> str:
    """The meta key of a vector view's cache token (written with every step that changes it)."""
    return f"{top}/token"
