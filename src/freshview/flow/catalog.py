"""The flow's catalog rules: names, source declarations, view entries, intervals, where the catalog is stored.

The catalog itself (sources, dedup capacities, views as typed entries (``ViewEntry``: kind, definition,
the statistics it was planned with), the step number) is one JSON value under ``CATALOG_KEY`` in the
state store, written inside every transaction that changes it or steps.  A catalog of an earlier
format this one can read (``READS``) is migrated as it is loaded (``ViewEntry.from_json``) and written
in the current format by the next transaction.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa

from freshview.errors import CatalogError, FreshviewError, StateError
from freshview.plan import statistics as plan_statistics
from freshview.plan.vector import VectorDefinition
from freshview.schema import TableSchema, schema_from_arrow, schema_from_ddl

CATALOG_KEY = "catalog"
# 2: state in a SpineStateStore; 3: each view with the statistics its join order was chosen with;
# 4: each view a typed entry (``ViewEntry``: its kind a field, no longer a marker in its SQL text)
CATALOG_FORMAT = 4
READS = (3, 4)  # the formats this freshview loads (3 is migrated on load)
_V3_VECTOR_MARKER = "VECTOR SEARCH "  # format 3: a vector view's definition was this + its JSON, as SQL text


class ViewKind(enum.Enum):
    SQL = "sql"  # ``register_view``: a SQL query
    VECTOR = "vector"  # ``register_vector_view``: a k-nearest-neighbour search (``plan.vector``)


@dataclass(frozen=True)
class ViewEntry:
    """A view in the catalog: its kind and definition (``sql`` for a SQL view, ``vector`` for a vector
    view), and the relations' statistics its plan was chosen with (None: not planned yet; planning
    takes the state's now)."""

    name: str
    kind: ViewKind
    sql: str | None = None
    vector: VectorDefinition | None = None
    statistics: plan_statistics.Statistics | None = None

    @staticmethod
    def of_sql(name: str, sql: str) -> "ViewEntry":
        return ViewEntry(name, ViewKind.SQL, sql=sql)

    @staticmethod
    def of_vector(name: str, definition: VectorDefinition) -> "ViewEntry":
        return ViewEntry(name, ViewKind.VECTOR, vector=definition)

    def same_definition(self, other: "ViewEntry") -> bool:
        return (self.kind, self.sql, self.vector) == (other.kind, other.sql, other.vector)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind.value, "sql": self.sql,
                "vector": None if self.vector is None else self.vector.to_json(),
                "statistics": plan_statistics.to_json(self.statistics or {})}

    @staticmethod
    def from_json(data: Any) -> "ViewEntry":
        """An entry as stored: format 4's object, or format 3's ``[name, definition, statistics]`` (migrated:
        a definition behind the vector marker is a vector view's)."""
        if isinstance(data, list):  # format 3
            name, text, statistics = data
            kind = ViewKind.VECTOR if text.startswith(_V3_VECTOR_MARKER) else ViewKind.SQL
            data = {"name": name, "kind": kind.value, "statistics": statistics,
                    "sql": text if kind is ViewKind.SQL else None,
                    "vector": json.loads(text[len(_V3_VECTOR_MARKER):]) if kind is ViewKind.VECTOR else None}
        try:
            kind = ViewKind(data["kind"])
        except (ValueError, KeyError):
            raise StateError(f"a view of unknown kind in the catalog: {data!r}") from None
        vector = None if data.get("vector") is None else VectorDefinition.from_json(data["vector"])
        return ViewEntry(data["name"], kind, data.get("sql"), vector, plan_statistics.from_json(data["statistics"]))

# A name or schema.name; a part is any text without '.' or NUL (as a quoted SQL identifier: FROM "Big Totals").
_NAME = re.compile(r"^[^.\x00]+(\.[^.\x00]+)?$")

__all__ = ["CATALOG_FORMAT", "CATALOG_KEY", "READS", "ViewEntry", "ViewKind", "check_name", "dedup_text",
           "parse_interval", "source_schema_of"]


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
