"""A view runs with its requester's rights, not the service's.

The service reads every table it follows with its own rights and writes the
result into a table its requester can read, so before it computes a view for
someone — at ``create_view``, at every rebuild, and every
``ServiceOptions.access_check_s`` while the view runs (``recheck``) — it
checks that the requester may read what the view reads:

* every column the view's plan depends on (``plan.rewrite.prune.columns_read``:
  output columns, and those of filters, join keys, groups and arguments), of
  every relation it reads: a base table, or another view's *result table* (a
  view over a view needs SELECT on that view's result table, which only that
  view's requester and the roles it lets in can read; it needs no right on the
  tables below, as with a database view running with its owner's rights);
* a relation read for its rows only (``COUNT(*)``, ``EXISTS``) needs SELECT on
  at least one of its columns, as PostgreSQL asks;
* PostgreSQL: USAGE on the relation's schema, and no row-level security the
  requester is subject to: freshview cannot apply policies per reader, so a
  table with RLS enabled is refused unless the requester bypasses it
  (superuser, BYPASSRLS, or the table's owner without FORCE ROW LEVEL SECURITY).

``refusal`` decides from the database's answers (``connectors.base.Grants``)
and is pure; ``check`` and ``recheck`` ask the database.  The database's own
verdict comes first where it can be had: the ``create_view`` procedure plans
the query as the caller before queueing it (``connectors/*/control.py``); on
PostgreSQL a refusal there is carried with the request (``ControlSchema.denial``)
so the answer can name the column, which PostgreSQL's message does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from freshview.connectors.base import Connector, ReadRights, Renamed
from freshview.errors import CatalogError
from freshview.plan import nodes as pn
from freshview.plan.rewrite.prune import columns_read
from freshview.service.names import Names


class AccessDenied(CatalogError):
    """The view's requester may not read something the view reads."""


@dataclass(frozen=True)
class Revoked:
    """A running view whose requester lost a right it needs (``recheck``)."""

    name: str
    requester: str
    reason: str


def reads(plan: pn.Node, names: Names) -> dict[str, frozenset[str]]:
    """Qualified relation name -> the columns of it ``plan`` depends on (empty: its rows only)."""
    return {names.qualified(relation): columns for relation, columns in columns_read(plan).items()}


def refusal(view: str, who: str, reads: Mapping[str, frozenset[str]],
            rights: Mapping[str, ReadRights] | None) -> str | None:
    """Why ``who`` may not have ``view`` computed with its rights, naming each table and column; None when
    it may.  ``rights`` is the database's answer for ``reads`` (None: the requester does not exist)."""
    if not reads:
        return None  # reads nothing: nothing to hide
    if rights is None:
        return f"freshview: permission denied for view {view}: {who} does not exist"
    problems = []
    for table in sorted(reads):
        found = rights.get(table)
        if found is None or not found.exists:
            problems.append(f"table {table} does not exist")
            continue
        if not found.schema_usage:
            problems.append(f"{who} has no USAGE on the schema of table {table}")
        columns = sorted(reads[table] & found.denied)
        if columns:
            problems.append(f"{who} may not SELECT column{'s' if len(columns) > 1 else ''} "
                            f"{', '.join(columns)} of table {table}")
        elif not reads[table] and not found.any_column:
            problems.append(f"{who} may not SELECT table {table}")
        if found.row_security:
            problems.append(f"table {table} has row-level security enabled, which freshview cannot apply to "
                            f"a view's readers, and {who} does not bypass it (a superuser, a role with "
                            "BYPASSRLS, or the table's owner unless FORCE ROW LEVEL SECURITY)")
    if not problems:
        return None
    return f"freshview: permission denied for view {view}: " + "; ".join(problems)


def database_refusal(view: str, who: str, message: str) -> str:
    """The database refused the caller's own plan of the query (``ControlSchema.denial``)."""
    return f"freshview: permission denied for view {view}: the database refused {who}'s query: {message}"


def check(connector: Connector, view: str, reads: Mapping[str, frozenset[str]], requester: str | None,
          request: int | None = None, *, existing: bool = False) -> None:
    """Raise ``AccessDenied`` unless ``requester`` may read ``reads`` (and, for a user's request, the
    database let the caller plan the query); refused an ``existing`` view (a rebuild), the requester also
    loses its result table.  No requester (a view made before owners were recorded): nothing to check."""
    grants = connector.grants
    if grants is None or requester is None:
        return
    who = grants.who(requester)
    problem = refusal(view, who, reads, grants.read_rights(requester, reads))
    if problem is None and request is not None:
        denied = connector.control.denial(request)
        if denied:
            problem = database_refusal(view, who, denied)
    if problem:
        if existing:
            connector.results.revoke_reader(view, requester)
        raise AccessDenied(problem)


def check_tables(connector: Connector, view: str, tables: Iterable[str], requester: str | None,
                 request: int | None) -> None:
    """After a view's SQL failed to compile: refuse rather than let the error describe tables the
    requester may not read (MySQL hides their columns from such a user)."""
    check(connector, view, {table: frozenset() for table in tables}, requester, request)


def renamed_reads(found: Mapping[str, frozenset[str]], renamed: Mapping[str, Renamed]) -> dict[str, frozenset[str]]:
    """``reads`` of a running view under the names its tables and columns have now (``base.Renamed``: the
    engine keeps the names it followed them by)."""
    out = {}
    for table, columns in found.items():
        now = renamed.get(table)
        out[now.name if now else table] = frozenset(now.columns.get(c, c) for c in columns) if now else columns
    return out


def recheck(connector: Connector, plans: Mapping[str, pn.Node], names: Names,
            renamed: Mapping[str, Renamed] | None = None) -> list[Revoked]:
    """The running views (qualified name -> plan) whose requester may no longer read what they read (under
    the names they have now: ``renamed``): one question to the database per view."""
    grants = connector.grants
    if grants is None:
        return []
    owners = connector.control.owners()
    revoked = []
    for name, plan in plans.items():
        requester = owners.get(name)
        if requester is None:
            continue
        needed = renamed_reads(reads(plan, names), renamed or {})
        try:
            problem = refusal(name, grants.who(requester), needed, grants.read_rights(requester, needed))
        except CatalogError as exc:
            problem = str(exc)
        if problem:
            revoked.append(Revoked(name, requester, problem))
    return revoked
