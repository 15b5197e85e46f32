"""``use_existing_table``, the part both databases share: whether a table the user made can hold a view's result.

The service fills the user's table instead of creating one; each database
describes the table from its catalog (``Table``: columns with their types,
unique keys, the service's missing privileges) and knows which types convert
without loss and which key its writes need (``connectors/postgres/existing.py``,
``connectors/mysql/existing.py``).  What is the same everywhere, pure, is here:
the columns the view writes must be there, of a type the view's converts to
without loss; no other column may be NOT NULL without a default (the service's
INSERT would leave it NULL); and a refusal names every difference, in one
message (``refusal``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence


@dataclass(frozen=True)
class Column:
    type: str  # the database's spelling (PostgreSQL: ``format_type``; MySQL: ``mysql.existing.normalized``)
    not_null: bool = False
    has_default: bool = False


@dataclass(frozen=True)
class Unique:
    columns: frozenset[str]
    nulls_not_distinct: bool = False
    primary: bool = False
    name: str = ""  # the index's (MySQL: named in a refusal)


@dataclass(frozen=True)
class Table:
    """The user's table as the catalog describes it."""

    columns: Mapping[str, Column]
    uniques: Sequence[Unique] = ()
    missing_privileges: Sequence[str] = ()


def column_problems(wanted: Mapping[str, str], table: Table, lossless: Callable[[str, str], bool]) -> list[str]:
    """What keeps ``table`` from taking the columns the service writes (``wanted``: name -> the view's type, in
    the database's spelling): each one missing or of a type the view's does not convert to without loss
    (``lossless(view's, table's)``), then each other column the service's INSERT would leave NULL against a
    NOT NULL constraint without a default."""
    problems: list[str] = []
    for column, want in wanted.items():
        found = table.columns.get(column)
        if found is None:
            problems.append(f"it has no column {column} ({want})")
        elif not lossless(want, found.type):
            problems.append(f"its column {column} is {found.type}, which the view's {want} does not convert to "
                            f"without loss")
    for column, found in table.columns.items():
        if column not in wanted and found.not_null and not found.has_default:
            problems.append(f"its column {column} is NOT NULL without a default, and the view does not fill it")
    return problems


def refusal(name: str, problems: Sequence[str]) -> str | None:
    """The message refusing table ``name`` for its ``problems`` (every one), or None when there are none."""
    if not problems:
        return None
    return f"freshview: the table {name} cannot hold the view's result (use_existing_table): " + "; ".join(problems)
