"""The one small interface between the service core and a database (PostgreSQL, MySQL/MariaDB).

The core (``freshview.service``) knows nothing of slots, LSNs, GTIDs, psycopg
or PyMySQL; a connector knows nothing of the engine.  What passes between them:

* ``Position``: an opaque, totally ordered point in one source's change
  stream (PostgreSQL: an LSN; MariaDB: the binlog coordinates of a commit
  with the GTID to resume from), written as text where it is stored.
* ``Transaction``: one whole source transaction at a position (never split),
  with what the core needs to decide about it; the rows themselves stay in the
  connector's ``payload`` until ``deltas`` turns them into Arrow.
* ``Source``: the change side: a catalog (``describe``), a consistent
  ``snapshot`` at a position, a ``stream`` from a position; ``attach`` says
  whether the stored position is still readable (a lost position is repaired
  by the core: rebuild from a new snapshot).
* ``ResultSink``: result tables; a step's view changes and its position in
  ONE database transaction, and that position read back.
* ``ControlSchema``: the ``freshview`` schema inside the database (the
  request queue behind ``create_view``/``drop_view``, the status of views and
  of the service).
* ``Grants``: what a view's requester may read (``service.access`` decides
  from it whether a view may run with that requester's rights).

Connectors may import ``algebra``, ``schema``, ``errors`` and ``plan.shape`` only.  Their errors are
``freshview.errors``' (``ChangeError``, ``StreamError``, ``PositionLost``, ``UnsupportedTypeError``;
faults: ``Fault``), named here too for connectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, ContextManager, Iterator, Mapping, Protocol, Sequence

import pyarrow as pa

from freshview.errors import ChangeError, PositionLost, StreamError  # noqa: F401  (the connectors' errors)
from freshview.plan.shape import ResultKey, result_key
from freshview.schema import SqlType, TableSchema


class Position(Protocol):
    """A point in one source's change stream; positions of one source are totally ordered."""

    def __lt__(self, other: Any) -> bool: ...

    def __le__(self, other: Any) -> bool: ...

    def to_text(self) -> str: ...


def after(position: Position | None, mark: Position | None) -> bool:
    """``position > mark``, where None is before every position (nothing applied yet)."""
    if position is None:
        return False
    return mark is None or mark < position


def sink_refused(table: str, exc: BaseException) -> str:
    """The message of a ``SinkError``: the result table ``table`` refused a step's rows with ``exc``."""
    return f"freshview: the result table {table} refused a step's rows: {' '.join(str(exc).split())}"


@dataclass(frozen=True)
class Transaction:
    """One whole committed source transaction, as the core sees it.

    ``rows`` counts the row changes per table (schema-qualified names);
    ``definitions`` holds, per table whose definition the stream carried, its
    columns' types as now defined (None: a type freshview cannot follow), and
    ``ddl`` the followed tables the stream says DDL touched (with the
    statement when the stream carries it, MySQL; None else, e.g. PostgreSQL
    names a followed table's relation otherwise: renamed), so the core sees
    DDL on followed tables (``Source.recheck``); ``payload`` is the
    connector's own.  A snapshot at position Y holds exactly the transactions
    at positions <= Y.
    """

    position: Any  # Position
    commit_time: float  # Unix seconds, on the source server's clock
    rows: Mapping[str, int] = field(default_factory=dict)
    truncated: frozenset[str] = frozenset()
    definitions: Mapping[str, Mapping[str, SqlType | None]] = field(default_factory=dict)
    payload: Any = None
    ddl: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(self.rows.values())

    def restricted(self, tables: set[str] | frozenset[str]) -> "Transaction":
        """The same transaction with only the changes (and TRUNCATEs) of ``tables``."""
        return replace(self, rows={t: n for t, n in self.rows.items() if t in tables},
                       truncated=frozenset(t for t in self.truncated if t in tables))


@dataclass(frozen=True)
class TableChange:
    """One table's change over the transactions of a step, in the table's own column names: the keyed
    form of ``freshview.flow.SourceChange`` (the core hands it on as one).

    ``rows``: columns + ``_weight`` (the changes whose rows the stream carried).  ``upserts``: whole
    rows, the row each key has after the step; ``deletes``: the primary key columns of keys that have
    no row after it; the engine retracts each of their old rows (one lookup per step), so the stream
    need not carry them.  ``present``: keys (primary key columns) the engine must hold before the step
    (an UPDATE or DELETE the stream sent without its old row: one freshview never saw is refused).
    A key is in at most one of ``upserts`` and ``deletes``, and in no row of ``rows``."""

    rows: pa.Table | None = None
    upserts: pa.Table | None = None
    deletes: pa.Table | None = None
    present: pa.Table | None = None

    @property
    def empty(self) -> bool:
        return all(t is None or not t.num_rows for t in (self.rows, self.upserts, self.deletes, self.present))


# (table, Arrow table of primary keys) -> the engine's current rows with those keys (absent keys: no row);
# asked only for the rare change the engine cannot take by key (PostgreSQL: unchanged TOASTed values
# sent without their old row)
LookupOld = Callable[[str, pa.Table], pa.Table]
# schema-qualified table -> its change, for the transactions given, in order
Deltas = Callable[[Sequence[Transaction], Mapping[str, TableSchema], LookupOld], dict[str, TableChange]]


@dataclass(frozen=True)
class SourceTable:
    """A followable table: its definition (the key is the schema's primary key)."""

    name: str  # schema-qualified
    schema: TableSchema
    # What, besides its columns, the table's stream and snapshot rest on, as (what, value) pairs: PostgreSQL
    # "relation" (its OID), "primary key", "replica identity", "partitions".  ``Source.recheck`` reports them
    # again; one that changed means the engine's copy may no longer match the table (it is followed anew).
    identity: tuple[tuple[str, str], ...] = ()
    # Each column's place that a rename keeps (PostgreSQL: its attnum), in the schema's order; () where the
    # database has none (MySQL: a rename is told by the column's position, ``service.following``).
    places: tuple[int, ...] = ()


@dataclass(frozen=True)
class Recheck:
    """A followed table as the database's catalog describes it now (``Source.recheck``)."""

    name: str | None  # its name now (another: renamed); None: it is gone (dropped)
    columns: Mapping[str, SqlType | None] = field(default_factory=dict)  # as ``Transaction.definitions``
    identity: tuple[tuple[str, str], ...] = ()  # as ``SourceTable.identity``
    refusal: str | None = None  # why it can no longer be followed (and how to fix it), if it cannot
    # Where the stream will have carried the DDL behind what was found, when the stream carries DDL
    # statements (MySQL's binlog): the server's position when the catalog was read.  A view is failed for
    # what the catalog shows only once the stream has passed it, so the failure names the statement.
    settles_at: "Position | None" = None
    places: tuple[int, ...] = ()  # as ``SourceTable.places``, in ``columns``' order


@dataclass(frozen=True)
class Renamed:
    """A followed table renamed, or columns of it, since it was followed (``Source.rename``): the engine keeps
    the names it followed it by."""

    name: str  # the table's name now (schema-qualified)
    columns: Mapping[str, str] = field(default_factory=dict)  # renamed columns: the followed name -> the name now


@dataclass(frozen=True)
class Attached:
    """What ``Source.attach`` found: ``lost`` says why the stored position cannot be resumed from;
    ``created`` that the source had no position at all (first start, or a dropped slot)."""

    created: bool = False
    lost: str | None = None


class Stream(Protocol):
    waited_s: float  # seconds spent blocked on the server so far
    # Every transaction at or before this position has been read (the server said so: PostgreSQL's keepalive);
    # None when unknown.  ``verify_view`` waits for the stream to pass a snapshot's position.
    reached: "Position | None"

    def read(self, timeout: float, budget: float) -> tuple[Transaction | None, bool]:
        """The next whole transaction, or (None, whether part of one arrived): nothing came within
        ``timeout`` s, or ``budget`` s went by while a transaction was still streaming in.
        Raises ``StreamError`` (``PositionLost`` when the position is gone)."""

    def acknowledge(self, position: Position) -> None:
        """Everything up to ``position`` is durable downstream: the source may let it go."""

    def keepalive(self) -> None:
        """Called during long snapshots: keep the stream's connection alive."""

    def close(self) -> None: ...


class Snapshot(Protocol):
    position: Position  # holds exactly the transactions at positions <= this

    def estimate(self, table: str) -> int | None:
        """The table's approximate row count (for progress), if known."""

    def read(self, table: SourceTable, chunk_rows: int, progress: Callable[[int], None],
             columns: Collection[str] | None = None) -> Iterator[pa.Table]:
        """The table's rows at the snapshot, as inserts (+1) in chunks; ``progress(rows done)``.  ``columns``:
        only these (``TableSchema.projected``), selected by the database's query itself."""

    def compare(self, spec: "ResultSpec", sql: str, change: Callable[[Any], pa.Table | None],
                limit: int) -> Comparison:
        """In one transaction under the snapshot: read the result tables' stored position P, ask
        ``change(P)`` for the view's change from P to the snapshot's position (view columns + _weight, or
        None; it may raise to give up), and compare ``sql`` computed by the database (the sources at the
        snapshot) with the result table plus that change, as multisets (``service.verify``: floating point
        and numeric columns matched rounded to 12 significant digits); at most ``limit`` differing rows."""


@dataclass(frozen=True)
class Comparison:
    """A view's SQL against its result table, compared by the database under one snapshot (``Snapshot.compare``)."""

    results_at: Any  # Position | None: the result tables' stored position under the snapshot
    # The rows that differ, as the database writes them as text (None: NULL), with n > 0 when the SQL gives
    # the row n more times than the result table (plus the change handed in) holds, n < 0 when fewer.
    differences: tuple[tuple[int, tuple[str | None, ...]], ...] = ()


class Source(Protocol):
    label: str  # names the source in metrics and logs (PostgreSQL: the slot)

    def retained_bytes(self) -> int | None:
        """How much change log the server keeps for this service (PostgreSQL: WAL behind the slot), if known."""

    def attach(self, position: Position | None, has_state: bool) -> Attached:
        """Find (or create) the source's stream position; say if it was lost (``position``, the engine's,
        can no longer be streamed from, or the source's own position is gone while ``has_state``)."""

    def stream(self, position: Position | None) -> Stream:
        """The transactions after ``position`` (``decide.stream_start``: the engine's position, else the
        earliest snapshot's; None: from now).  PostgreSQL's slot keeps its own position and ignores it."""

    def describe(self, table: str) -> SourceTable:
        """A table's definition; ``CatalogError`` for tables that do not exist ("does not exist" in the
        message) or cannot be followed (saying how to fix it)."""

    def prepare(self, tables: Sequence[str]) -> None:
        """Make the tables' changes appear in the stream (PostgreSQL: add them to the publication).  A table
        whose presence there would make the application's writes fail is refused (``CatalogError``)."""

    def retain(self, tables: Collection[str]) -> None:
        """Stream only these tables from now on (PostgreSQL: every other table leaves the publication, so it
        no longer constrains the application's writes)."""

    def recheck(self, tables: Mapping[str, tuple[tuple[str, str], ...]]) -> dict[str, Recheck]:
        """The followed tables (name -> the ``SourceTable.identity`` it was followed with) as the catalog
        describes them now."""

    def rename(self, renamed: Mapping[str, Renamed]) -> None:
        """The followed tables known to the engine by other names than the database's now (the name they were
        followed by -> ``Renamed``; replaces what was said before).  From now on the stream hands their
        changes (``Transaction``, ``deltas``) under the followed table and column names, and ``recheck``,
        ``prepare``, ``retain`` and ``deltas`` take the followed names.  MySQL: a rename the stream itself
        carries (``RENAME TABLE``) is followed by the stream at once, in the stream's order."""

    def expansion(self, relation: str) -> str | None:
        """SQL that stands for ``relation`` in a view, when it is not followed as itself: a plain view's
        definition, an inheritance parent's rows and its children's (``UNION ALL`` of ``ONLY`` each).
        ``CatalogError`` for a relation that can be neither (a materialized view, a foreign table)."""

    def snapshot(self) -> ContextManager[Snapshot]:
        """A consistent snapshot at a position of the stream."""

    def position_from_text(self, text: str) -> Position: ...

    deltas: Deltas

    def close(self) -> None: ...


@dataclass(frozen=True)
class ViewRun:
    """One view's part of a step, as ``freshview.views`` shows it (``changes_received``, ``last_step_*``)."""

    received: int  # delta rows the view read (its sources' or views' changes)
    duration_ms: float
    executor: str | None  # local | spark


@dataclass(frozen=True)
class StepStats:
    """What a step's result transaction records besides the changes."""

    changes: int  # source row changes in the step
    lag_ms: float  # oldest source commit in the step to now
    rate: float  # changes per second, smoothed
    views: Mapping[str, ViewRun] = field(default_factory=dict)  # the views that ran (qualified names)


@dataclass(frozen=True)
class ResultSpec:
    """A view's result table: columns (engine types) and key (``plan.shape``)."""

    name: str  # schema-qualified
    columns: tuple[tuple[str, SqlType], ...]
    key: ResultKey

    @classmethod
    def of(cls, name: str, plan: Any) -> "ResultSpec":
        """The result table of view ``name`` whose plan is ``plan`` (its columns, ``plan.shape``'s key)."""
        return cls(name, tuple(plan.columns), result_key(plan))


class ResultSink(Protocol):
    def stored_position(self) -> Position | None:
        """The position whose effects the result tables hold (committed with them)."""

    def prefill(self, spec: ResultSpec, rows: pa.Table, request: int | None) -> str | None:
        """(A population's worker, on a connection of its own.)  ``rows`` written aside into a new table beside
        the result table's name: that table's name, for ``create(prefilled=(name, rows))``; None if the view
        cannot be filled so (it fills the user's table)."""

    def drop_prefill(self, shadow: str | None = None) -> None:
        """A table ``prefill`` wrote that no create will rename into place (None: every such table in the
        database, at attach: what populations of a service that stopped wrote aside)."""

    def create(self, spec: ResultSpec, sql: str, initial: pa.Table, position: Position | None, *,
               replace: bool, reader: str | None, request: int | None,
               prefilled: tuple[str, pa.Table] | None = None) -> None:
        """In one transaction: (re)create the result table, fill it, mark the view active (and the request
        done).  ``prefilled``: a table ``prefill`` wrote and the rows it holds: renamed into place, only the
        rows that differ from ``initial`` written (if it is gone: created and filled as without it).
        ``CatalogError`` when the database refuses."""

    def alter(self, spec: ResultSpec, sql: str, initial: pa.Table, position: Position | None, *,
              reader: str | None, request: int | None, altered: bool = True,
              previous: pa.Table | None = None) -> None:
        """``alter_view``'s swap: the view's table gets ``initial`` (its new definition's rows at ``position``)
        and the view's row ``sql`` (and ``altered_at``, when ``altered``), readers seeing the old rows or the
        new ones (the request done with it).  The table is kept where the database can (README: alter_view);
        kept with its columns, and ``previous`` given (the rows it holds now), only the difference is written
        (``result_changes.replacing``)."""

    def attach(self, spec: ResultSpec) -> None:
        """Know an existing result table again (after a restart)."""

    def forget(self, name: str) -> None:
        """No longer write this view's changes (its table stays)."""

    def knows(self, name: str) -> bool:
        """Whether this view's result table is known (created or attached, not forgotten)."""

    def drop(self, name: str, request: int | None) -> None:
        """In one transaction: drop the result table and the view's status (and finish the request)."""

    def commit_step(self, outputs: Mapping[str, pa.Table], position: Position, stats: StepStats) -> float:
        """In ONE transaction: apply each known view's changes (name -> delta with _weight), update the
        views' status and store ``position``; returns the commit time on the server's clock."""

    def record_position(self, position: Position) -> None:
        """Store a position reached without result changes (lets the source free what precedes it)."""

    def revoke_reader(self, name: str, reader: str) -> None:
        """``reader`` (a view's requester) may no longer read the view's result table."""


@dataclass(frozen=True)
class ReadRights:
    """What the database says about a requester and one relation a view reads (``Grants.read_rights``)."""

    exists: bool = True  # the relation exists
    denied: frozenset[str] = frozenset()  # of the columns asked about, those the requester may not SELECT
    any_column: bool = True  # the requester may SELECT some column (reading rows and no column needs that)
    schema_usage: bool = True  # PostgreSQL: USAGE on the relation's schema
    row_security: bool = False  # row-level security is enabled on it and the requester does not bypass it


class Grants(Protocol):
    """The database's privileges, as ``service.access`` needs them (requester: a PostgreSQL role, a MySQL
    account ``user@host``, as ``Request.requested_by`` holds it)."""

    def who(self, requester: str) -> str:
        """The requester as messages name it (``role bob``, ``account 'bob'@'%'``)."""

    def read_rights(self, requester: str, reads: Mapping[str, frozenset[str]]) -> Mapping[str, ReadRights] | None:
        """For each relation (qualified name) and the columns read of it, what ``requester`` may read; None
        when the requester is unknown to the database.  ``CatalogError`` when the database cannot tell."""


@dataclass(frozen=True)
class Request:
    id: int
    action: str  # create | drop | verify
    name: str
    sql: str | None
    requested_by: str | None = None
    attempts: int = 1  # how many times a service has started working on it (this time included)
    blocking: bool = True  # a CALL waits for it (create_view); False: create_view_async, block_until_running => false


class ControlSchema(Protocol):
    def is_installed(self) -> bool: ...

    def start(self) -> None:
        """At service start: the service's progress row exists; views left half-created are forgotten."""

    def interrupted_requests(self) -> list[Request]:
        """Requests a killed service was working on (still ``running``), with their attempts so far."""

    def requeue_request(self, request_id: int) -> None:
        """An interrupted request goes back to the queue."""

    def next_request(self) -> Request | None:
        """Claim the oldest pending request (marks it running and counts the attempt, durably, before
        any work on it)."""

    def finish_request(self, request_id: int, error: str | None = None) -> None: ...

    def views(self) -> list[tuple[str, str, str]]:
        """(name, sql, status) of every view, in creation order."""

    def view(self, name: str) -> tuple[str, str] | None:
        """(sql, status) of one view."""

    def relation_exists(self, name: str) -> bool: ...

    def begin_create(self, name: str, sql: str, owner: str | None = None, existing: bool = False) -> None:
        """Record a view as being created (status populating) by ``owner`` (the requesting user); ``existing``: it
        fills a table the user made (``uses_existing_table``), which nothing may drop."""

    def drop_refusal(self, name: str, requester: str | None) -> str | None:
        """Why ``requester`` may not drop view ``name`` (only its creator or an administrator may), or None."""

    def owners(self) -> dict[str, str | None]:
        """Each view's requester (``owner``: whose rights it runs with), by view name."""

    def denial(self, request_id: int) -> str | None:
        """The database's own refusal of the request's query, run as the caller by the procedure before
        it queued the request (PostgreSQL; None when it was allowed, or on MySQL, where it fails the CALL)."""

    def abandon_create(self, name: str) -> None: ...

    def mark_rebuilding(self, reason: str, names: Sequence[str] | None = None) -> None:
        """Every active view (of ``names``, when given) goes to status rebuilding, with the reason."""

    def mark_failed(self, name: str, error: str, status: str = "failed") -> None:
        """The view stopped with ``error``: status ``failed``, or ``sink error`` (its result table refused rows)."""

    def set_sql(self, name: str, sql: str) -> None:
        """The view's definition is now ``sql`` (rewritten after a table it reads was renamed)."""

    def show_population(self, name: str, phase: str, rows_read: int, rows_total: int | None,
                        elapsed_s: float) -> None:
        """A populating view's progress (``freshview.views``: phase, rows read of the estimated total, elapsed)."""

    def show_alter(self, name: str, phase: str | None) -> None:
        """An active view's alter: its phase (None: no alter any more); ``show_population`` then updates it."""

    def uses_existing_table(self, request_id: int) -> bool:
        """The request asked to fill a table the user made (PostgreSQL: ``use_existing_table => true``; MySQL:
        ``create_view_use_existing_table``)."""

    def record_verification(self, name: str, result: str, detail: str, request_id: int | None) -> None:
        """A verification's outcome (``service.verify``: equal | different | error, and what it says) on the view's
        status, and as the answer to its request (done with the text as result when equal, else failed with it)."""

    def heartbeat(self, status: str) -> None: ...

    def close(self) -> None: ...


class NameRules(Protocol):
    """How one database writes table names as SQL text (``service.names`` builds on it)."""

    def split(self, text: str) -> tuple[str | None, str]:
        """A table name as the database reads it: (schema or None for a bare name, table); raises
        ``CatalogError`` naming the accepted forms."""

    def spell(self, schema: str, table: str) -> str:
        """``schema.table`` as valid SQL text of this database, each part quoted only when it must be
        (``split`` reads it back to the same parts)."""


@dataclass
class Connector:
    """One database's pieces, as the core uses them."""

    source: Source
    results: ResultSink
    control: ControlSchema
    names: NameRules
    errors: tuple[type[BaseException], ...] = ()  # the driver's error classes (a failed request, not a crash)
    dialect: str = "postgres"  # how view SQL is read and computed (``sql.dialect``)
    default_schema: str = "public"  # the schema of bare table names (MySQL: the DSN's database)
    grants: Grants | None = None  # None: nothing to check (in-process test doubles only)
