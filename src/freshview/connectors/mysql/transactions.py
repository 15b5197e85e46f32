"""From binlog events to whole source transactions. No I/O.

The stream (``stream.py``) turns each binlog event of interest into one of
the small records below (``Begin``, ``Rows``, ``Query``, ``Xid``) and feeds
them, with the binlog file and the offset after the event, to a
``TransactionAssembler``.  It hands out a ``MySqlTransaction`` only when the
transaction commits, so a source transaction is never split:

* MariaDB starts every event group with a GTID event (``Begin``; it replaces
  ``BEGIN``) and ends a transactional one with an XID event (``Xid``); a
  group on a non-transactional engine ends with a ``COMMIT`` (or ``ROLLBACK``:
  its rows were applied anyway) query; a *standalone* group (DDL,
  ``TRUNCATE``) is the GTID event and one statement.
* A ``Begin`` while a transaction is open means the connection dropped
  mid-transaction and the server is sending it again from the start (the
  reader reconnects at the last committed GTID): the partial one is dropped.
* Row changes of tables that are not followed are ignored; a transaction
  that touches no followed table (no rows, no TRUNCATE, no DDL of one) is not
  handed out, but its position still counts (``position``), so an idle
  stream's position keeps up with the server.
* ``TRUNCATE`` of a followed table is reported in ``truncated``; DDL
  statements naming a followed table (``ALTER``, ``DROP``, ``RENAME``,
  ``CREATE ... LIKE`` …) in ``ddl``: reported, never applied.

``BinlogPosition`` is a commit's place in the binlog: the server's GTID state
after it (one ``domain-server-seq`` per replication domain; where a reader
resumes) and the binlog file and offset just after the commit event (what
orders positions totally within one server).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from freshview.connectors.mysql.catalog import TableName
from freshview.connectors.mysql.rowimages import library_images
from freshview.errors import FreshviewError


class BinlogProtocolError(FreshviewError):
    """Events in an order no MariaDB/MySQL server writes (a row change outside a transaction ...)."""


@functools.total_ordering
@dataclass(frozen=True)
class BinlogPosition:
    """A commit's position: GTID state after it, and the binlog file/offset after its commit event."""

    gtid: str  # MariaDB: 'domain-server-seq[,...]', one per domain, sorted by domain (MySQL: a GTID set)
    file: str  # binlog.000003
    offset: int

    def __post_init__(self) -> None:
        if "@" in self.gtid or ":" in self.file:
            raise ValueError(f"malformed binlog position {self.gtid!r} {self.file!r}")

    @property
    def _key(self) -> tuple[int, str, int]:
        m = re.search(r"(\d+)$", self.file)
        return (int(m.group(1)) if m else -1, self.file, self.offset)

    def __lt__(self, other: "BinlogPosition") -> bool:
        if not isinstance(other, BinlogPosition):
            return NotImplemented
        return self._key < other._key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BinlogPosition):
            return NotImplemented
        return self._key == other._key and self.gtid == other.gtid

    def __hash__(self) -> int:
        return hash((self.gtid, self.file, self.offset))

    def to_text(self) -> str:
        return f"{self.gtid}@{self.file}:{self.offset}"

    @staticmethod
    def from_text(text: str) -> "BinlogPosition":
        gtid, at, rest = text.strip().rpartition("@")
        file, colon, offset = rest.rpartition(":")
        if not at or not colon or not file or not offset.isdigit():
            raise ValueError(f"not a binlog position: {text!r} (expected gtid@file:offset)")
        return BinlogPosition(gtid, file, int(offset))

    def after(self, gtid: str, file: str, offset: int) -> "BinlogPosition":
        """The position after committing the transaction ``gtid`` (its domain's entry replaced)."""
        return BinlogPosition(advance_gtid_state(self.gtid, gtid), file, offset)


def advance_gtid_state(state: str, gtid: str) -> str:
    """A MariaDB GTID state (``0-1-9,1-1-4``) after ``gtid`` committed: its domain's entry is replaced."""
    domains = {g.split("-", 1)[0]: g for g in state.split(",") if g}
    domains[gtid.split("-", 1)[0]] = gtid
    return ",".join(domains[d] for d in sorted(domains, key=int))


# -- events, as the stream hands them to the assembler ------------------------------------------
@dataclass(frozen=True)
class Begin:
    gtid: str
    standalone: bool = False  # MariaDB FL_STANDALONE: the group is one statement, no XID follows
    timestamp: int = 0


@dataclass(frozen=True)
class Rows:
    table: TableName
    changes: "RowChanges"  # the event's row images, decoded (``rowimages``)
    timestamp: int = 0

    @property
    def kind(self) -> str:
        return self.changes.kind


@dataclass(frozen=True)
class Query:
    statement: str
    database: str = ""  # the statement's current database (unqualified names resolve there)
    timestamp: int = 0


@dataclass(frozen=True)
class Xid:
    timestamp: int = 0


Event = Begin | Rows | Query | Xid


@dataclass(frozen=True)
class RowChanges:
    """Consecutive rows events of one kind on a followed table: their old and new row images.

    An insert has new images only, a delete old ones only, an update both (the same number). Each
    list holds image sets (``rowimages.RowImages``, or ``LibraryImages`` for a table the library
    decodes), one or more per event, in order."""

    kind: str  # insert | delete | update
    before: list = field(default_factory=list)  # old row images (deletes, updates)
    after: list = field(default_factory=list)  # new row images (inserts, updates)

    def __len__(self) -> int:
        return sum(len(s) for s in (self.after if self.kind != "delete" else self.before))

    def extend(self, other: "RowChanges") -> None:
        self.before.extend(other.before)
        self.after.extend(other.after)

    @staticmethod
    def of(kind: str, before: Any, after: Any) -> "RowChanges":
        """From one event's (old images, new images), either None."""
        return RowChanges(kind, [] if before is None else [before], [] if after is None else [after])

    @staticmethod
    def from_library(kind: str, rows: Sequence[dict]) -> "RowChanges":
        """From python-mysql-replication's row dicts (``{'values': ..}`` or ``{'before_values': ..,
        'after_values': ..}``, with their ``*none_sources``)."""
        return RowChanges.of(kind, *library_images(kind, rows))


@dataclass(frozen=True)
class DdlStatement:
    statement: str
    database: str
    tables: tuple[TableName, ...]  # the followed tables it names


@dataclass
class MySqlTransaction:
    """A committed source transaction, restricted to the followed tables."""

    position: BinlogPosition
    gtid: str
    commit_time: dt.datetime
    changes: dict[TableName, list[RowChanges]] = field(default_factory=dict)
    truncated: tuple[TableName, ...] = ()
    ddl: tuple[DdlStatement, ...] = ()

    @property
    def tables(self) -> set[TableName]:
        return set(self.changes) | set(self.truncated) | {t for d in self.ddl for t in d.tables}

    @property
    def row_count(self) -> int:
        return sum(len(c) for parts in self.changes.values() for c in parts)


class TransactionAssembler:
    """Buffers one transaction's events; ``feed`` returns it when it commits (and touches followed tables)."""

    def __init__(self, start: BinlogPosition, followed: Iterable[TableName]) -> None:
        self.position = start  # after the last whole transaction seen, followed tables or not
        self.aliases: dict[TableName, TableName] = {}  # a renamed followed table's name now -> its followed name
        self._observed: set[TableName] = set()  # aliases from the stream's statements the service has not judged
        self._wanted = frozenset(followed)  # the followed tables, by the names they are followed by
        self.followed = self._now()  # their names now: the tables whose rows are taken
        self._open: _Open | None = None

    def follow(self, tables: Iterable[TableName]) -> None:
        """The tables followed, by the names they are followed by (renamed ones too: ``aliases``)."""
        self._wanted = frozenset(tables)
        self.followed = self._now()

    def rename(self, aliases: Mapping[TableName, TableName]) -> None:
        """The renamed followed tables as the service knows them (name now -> followed name; ``Source.rename``):
        they replace what it said before (a table it follows anew under its name now has none), and renames the
        stream has carried that it has not yet judged are kept."""
        self._observed -= set(aliases)
        self.aliases = {**{now: was for now, was in aliases.items() if now != was},
                        **{now: self.aliases[now] for now in self._observed if now in self.aliases}}
        self.followed = self._now()

    def followed_name(self, table: TableName) -> TableName:
        """The name a followed table (``table``: its name now) is followed by."""
        was = self.aliases.get(table)
        return was if was is not None and was in self._wanted else table

    def _now(self) -> frozenset[TableName]:
        renamed = {now: was for now, was in self.aliases.items() if was in self._wanted}
        return frozenset({t for t in self._wanted if t not in renamed.values()} | set(renamed))

    def _renamed(self, statement: str, database: str) -> None:
        """A followed table renamed by ``statement``: its rows are taken under its new name from now on."""
        for old, new in table_renames(statement, database):
            if old in self.followed:
                was = self.followed_name(old)
                self.aliases.pop(old, None)
                self._observed.discard(old)
                if new != was:
                    self.aliases[new] = was
                    self._observed.add(new)
                self.followed = self._now()

    @property
    def in_transaction(self) -> bool:
        return self._open is not None

    def feed(self, event: Event, file: str, offset: int) -> MySqlTransaction | None:
        """Take the next event (``offset``: where the next event starts in ``file``)."""
        if isinstance(event, Begin):
            self._open = _Open(event.gtid, event.standalone)  # a partial one is being sent again: drop it
            return None
        if self._open is None:
            if isinstance(event, Query) and _verb(event.statement) in ("BEGIN", ""):
                return None
            raise BinlogProtocolError(f"{type(event).__name__} event outside a transaction at {file}:{offset}")
        txn = self._open
        if isinstance(event, Rows):
            if event.table in self.followed:
                parts = txn.changes.setdefault(self.followed_name(event.table), [])
                change = event.changes
                if parts and parts[-1].kind == change.kind:
                    parts[-1].extend(change)  # consecutive events of one kind: one run
                else:
                    parts.append(RowChanges(change.kind, list(change.before), list(change.after)))
            return None
        if isinstance(event, Xid):
            return self._commit(file, offset, event.timestamp)
        verb = _verb(event.statement)
        if verb == "BEGIN":
            return None
        if verb in ("COMMIT", "ROLLBACK"):
            return self._commit(file, offset, event.timestamp)
        if verb == "TRUNCATE":
            txn.truncated.extend(self.followed_name(t) for t in _named_tables(event.statement, event.database)
                                 if t in self.followed)
        elif verb in _DDL:
            named = tuple(dict.fromkeys(self.followed_name(t) for t in _named_tables(event.statement, event.database)
                                        if t in self.followed))
            if named:
                txn.ddl.append(DdlStatement(event.statement, event.database, named))
                self._renamed(event.statement, event.database)
        if txn.standalone:
            return self._commit(file, offset, event.timestamp)
        return None

    def _commit(self, file: str, offset: int, timestamp: int) -> MySqlTransaction | None:
        txn, self._open = self._open, None
        assert txn is not None
        self.position = self.position.after(txn.gtid, file, offset)
        if not (txn.changes or txn.truncated or txn.ddl):
            return None
        when = dt.datetime.fromtimestamp(timestamp, dt.timezone.utc)
        return MySqlTransaction(self.position, txn.gtid, when, txn.changes,
                                tuple(dict.fromkeys(txn.truncated)), tuple(txn.ddl))


@dataclass
class _Open:
    gtid: str
    standalone: bool
    changes: dict[TableName, list[RowChanges]] = field(default_factory=dict)
    truncated: list[TableName] = field(default_factory=list)
    ddl: list[DdlStatement] = field(default_factory=list)


_DDL = {"ALTER", "DROP", "RENAME", "CREATE"}
_COMMENT = re.compile(r"/\*.*?\*/|--[^\n]*\n|#[^\n]*\n", re.S)
# A (possibly qualified, possibly backticked) name: `a`.`b`, a.b, `a`, a
_IDENT = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$\u0080-\uffff]+)"
_QUALIFIED = re.compile(rf"({_IDENT})(?:\s*\.\s*({_IDENT}))?")
_STRINGS = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"")


def _verb(statement: str) -> str:
    text = _COMMENT.sub(" ", statement).lstrip()
    m = re.match(r"[A-Za-z]+", text)
    return m.group(0).upper() if m else ""


_NAME = rf"{_IDENT}(?:\s*\.\s*{_IDENT})?"
_RENAME_TABLE = re.compile(rf"^\s*RENAME\s+TABLES?\s+(.*)$", re.I | re.S)
_RENAME_PAIR = re.compile(rf"\s*({_NAME})\s+TO\s+({_NAME})\s*(?:,|$)", re.I)
_ALTER_TABLE = re.compile(rf"^\s*ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?({_NAME})(.*)$",
                          re.I | re.S)
_ALTER_RENAME = re.compile(rf"(?:^|,)\s*RENAME\s+(?!COLUMN\b|INDEX\b|KEY\b)(?:(?:TO|AS)\s+)?({_NAME})", re.I)


def table_renames(statement: str, database: str) -> list[tuple[TableName, TableName]]:
    """The tables ``statement`` renames, (old, new): ``RENAME TABLE a TO b[, c TO d]``, ``ALTER TABLE a ...
    RENAME [TO | AS] b``."""
    text = _STRINGS.sub(" ", _COMMENT.sub(" ", statement)).strip().rstrip(";")

    def name(found: str) -> TableName:
        return _named_tables(found, database)[0]

    m = _RENAME_TABLE.match(text)
    if m:
        return [(name(a), name(b)) for a, b in _RENAME_PAIR.findall(m.group(1))]
    m = _ALTER_TABLE.match(text)
    if m:
        renamed = _ALTER_RENAME.findall(m.group(2))
        if renamed:
            return [(name(m.group(1)), name(renamed[-1]))]
    return []


def _named_tables(statement: str, database: str) -> list[TableName]:
    """Every name in the statement that could be a table, resolved against ``database``.

    Deliberately generous (a column that shares a followed table's name makes
    a DDL statement reported too): DDL is reported for a human or the service
    to judge, and missing one is worse than one too many.
    """
    text = _STRINGS.sub(" ", _COMMENT.sub(" ", statement))

    def unquote(part: str) -> str:
        return part[1:-1].replace("``", "`") if part.startswith("`") else part

    names = []
    for m in _QUALIFIED.finditer(text):
        first, second = m.group(1), m.group(2)
        if second is not None:
            names.append(TableName(unquote(first), unquote(second)))
        elif database:
            names.append(TableName(database, unquote(first)))
    return names
