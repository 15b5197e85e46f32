"""How NULL keys compare, a property of every keyed piece of state (see ``runtime.state.layout``)."""

from __future__ import annotations

import enum


class NullKeys(enum.Enum):
    """``EQUAL``: GROUP BY semantics, NULL is a key value equal to itself.
    ``DISTINCT``: SQL ``=`` semantics, a key with a NULL in any column equals nothing."""

    EQUAL = "equal"
    DISTINCT = "distinct"
