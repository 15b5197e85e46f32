"""The flow's catalog rules: names, source declarations, intervals, and where the catalog is stored.

The catalog itself (sources, dedup capacities, views' definitions and the statistics each was planned
with, the step number) is one JSON value
under ``CATALOG_KEY`` in the state store, written inside every transaction that changes it or steps.
"""

from __future__ import annotations

import re
from typing import Sequence

import pyarrow as pa

from freshview.errors import CatalogError, FreshviewError
from freshview.schema import TableSchema, schema_from_arrow, schema_from_ddl

CATALOG_KEY = "catalog"
CATALOG_FORMAT = 3  # 2: state in a SpineStateStore; 3: each view with the statistics its join order was chosen with

# A name or schema.name; a part is any text without '.' or NUL (as a quoted SQL identifier: FROM "Big Totals").
_NAME = re.compile(r"^[^.\x00]+(\.[^.\x00]+)?$")

__all__ = ["CATALOG_FORMAT", "CATALOG_KEY", "check_name", "dedup_text", "parse_interval", "source_schema_of"]


_UNITS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1, "sec": 1, "second": 1, "seconds": 1,
          "min": 60, "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600, "day": 86400,
          "days": 86400}


def source_schema_of(schema: str | pa.Schema | TableSchema, primary_key: Sequence[str] | None) -> TableSchema:
    """A source's declared schema: a DDL column list, a pyarrow.Schema or a TableSchema, with ``primary_key``
    (a DDL's names fold to lower case) overriding any the schema carries."""
    pk = tuple(k.lower() if isinstance(schema, str) else k for k in (primary_key or ()))
    if isinstance(schema, TableSchema):
        return TableSchema(schema.columns, pk or schema.primary_key)
    if isinstance(schema, pa.Schema):
        return schema_from_arrow(schema, pk)
    if isinstance(schema, str):
        return schema_from_ddl(schema, pk)
    raise CatalogError(f"a source schema is a string, pyarrow.Schema or TableSchema, not {type(schema).__name__}")


def parse_interval(value: float | str | None) -> float | None:
    """Seconds of ``1.5``, ``"500 ms"``, ``"1 second"``, ``"2 hours"``, ``"1 day"``; None stays None."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([a-z]*)\s*", str(value).lower())
        if not match or match.group(2) not in _UNITS and match.group(2):
            raise FreshviewError(f"cannot read the interval {value!r}: write e.g. '500 ms', '1 second', "
                                 "'10 minutes', '1 hour', '1 day' or a number of seconds")
        seconds = float(match.group(1)) * _UNITS.get(match.group(2) or "s", 1)
    if seconds < 0:
        raise FreshviewError(f"an interval cannot be negative: {value!r}")
    return seconds


def dedup_text(capacity: int | None) -> str:
    return "dedup=False" if capacity is None else f"dedup=True, dedup_capacity={capacity}"


def check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise CatalogError(f"invalid {what} name {name!r}: use name or schema.name, "
                           "where a name is non-empty and has no '.'")
