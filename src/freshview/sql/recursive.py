"""WITH RECURSIVE: refused for now (located)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from sqlglot import exp

from freshview.plan import nodes as pn

if TYPE_CHECKING:
    from freshview.sql.build import QueryBuilder


def recursive_ctes(qb: "QueryBuilder", with_: exp.With, body: Callable[[], pn.Node]) -> pn.Node:
    raise qb.unsupported(with_, "WITH RECURSIVE", "RECURSIVE")
