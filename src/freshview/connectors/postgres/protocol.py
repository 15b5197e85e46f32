"""Decoding PostgreSQL's ``pgoutput`` logical-replication messages, without I/O.

The decoder turns the payload of one XLogData message into a typed message
record.  It keeps the relation cache (Relation messages arrive before a
relation's first change and after DDL) and knows whether it is inside a
streamed transaction (protocol ≥ 2: Stream Start … Stop blocks carry the
transaction id in every change).  Values stay in PostgreSQL's text format;
``types`` converts them.  Layouts follow the PostgreSQL documentation,
"Logical Replication Message Formats".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from freshview.connectors.postgres.identifiers import qualified
from freshview.errors import FreshviewError

_I16 = struct.Struct("!h").unpack_from
_I32 = struct.Struct("!i").unpack_from
_U32 = struct.Struct("!I").unpack_from
_U64 = struct.Struct("!Q").unpack_from
_BEGIN = struct.Struct("!QqI").unpack_from
_COMMIT = struct.Struct("!BQQq").unpack_from
_STREAM_COMMIT = struct.Struct("!IBQQq").unpack_from
_COLUMN_TYPE = struct.Struct("!Ii").unpack_from


class _Unchanged:
    """A TOASTed value the server did not send because the UPDATE did not change it."""

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = _Unchanged()
Tuple = list  # of str | bytes | None | UNCHANGED_TOAST


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str  # d(efault) n(othing) f(ull) i(ndex)
    columns: tuple[Column, ...]

    @property
    def qualified_name(self) -> str:
        """``schema.table``, parts quoted when they must be (``identifiers.qualified``)."""
        return qualified(self.namespace, self.name)


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_time: int  # microseconds since 2000-01-01
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int  # acknowledge this one
    commit_time: int


@dataclass(frozen=True)
class Insert:
    relation: Relation
    new: Tuple
    xid: int | None = None


@dataclass(frozen=True)
class Update:
    relation: Relation
    new: Tuple
    old: Tuple | None = None  # full old row (REPLICA IDENTITY FULL) or key columns only
    old_is_key_only: bool = False
    xid: int | None = None


@dataclass(frozen=True)
class Delete:
    relation: Relation
    old: Tuple
    old_is_key_only: bool = False
    xid: int | None = None


@dataclass(frozen=True)
class Truncate:
    relations: tuple[Relation, ...]
    cascade: bool
    restart_identity: bool
    xid: int | None = None


@dataclass(frozen=True)
class StreamStart:
    xid: int
    first_segment: bool


@dataclass(frozen=True)
class StreamStop:
    pass


@dataclass(frozen=True)
class StreamCommit:
    xid: int
    commit_lsn: int
    end_lsn: int
    commit_time: int


@dataclass(frozen=True)
class StreamAbort:
    xid: int
    subxid: int


@dataclass(frozen=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes
    xid: int | None = None


@dataclass(frozen=True)
class Other:
    """A message freshview does not act on (Origin, Type, two-phase ...)."""

    kind: str


class ProtocolError(FreshviewError):
    """A payload that does not follow the pgoutput format."""


@dataclass
class Decoder:
    relations: dict[int, Relation] = field(default_factory=dict)
    in_stream: bool = False

    def decode(self, buf: bytes | memoryview):
        try:
            return self._decode(buf)
        except (struct.error, IndexError, ValueError, KeyError) as exc:
            kind = chr(buf[0]) if len(buf) else "?"
            raise ProtocolError(f"malformed pgoutput message {kind!r}: {exc}") from None

    def _decode(self, buf):
        kind, pos, xid = buf[0], 1, None
        if self.in_stream and kind in b"RYIUDTM":
            (xid,) = _U32(buf, pos)
            pos += 4
        if kind in (0x49, 0x55, 0x44):  # I U D
            (rel,) = _U32(buf, pos)
            return row_change(buf, pos + 4, self.relations[rel], xid)
        if kind == 0x42:  # B
            final_lsn, ts, x = _BEGIN(buf, pos)
            return Begin(final_lsn, ts, x)
        if kind == 0x43:  # C
            _flags, commit_lsn, end_lsn, ts = _COMMIT(buf, pos)
            return Commit(commit_lsn, end_lsn, ts)
        if kind == 0x52:  # R
            return self._relation(buf, pos)
        if kind == 0x54:  # T
            (n,) = _I32(buf, pos)
            options = buf[pos + 4]
            oids = struct.unpack_from(f"!{n}I", buf, pos + 5)
            return Truncate(tuple(self.relations[o] for o in oids), bool(options & 1), bool(options & 2), xid)
        if kind == 0x4D:  # M
            flags = buf[pos]
            (lsn,) = _U64(buf, pos + 1)
            prefix, p = _cstring(buf, pos + 9)
            (length,) = _I32(buf, p)
            return LogicalMessage(bool(flags & 1), lsn, prefix, bytes(buf[p + 4:p + 4 + length]), xid)
        if kind == 0x53:  # S
            self.in_stream = True
            (x,) = _U32(buf, pos)
            return StreamStart(x, bool(buf[pos + 4]))
        if kind == 0x45:  # E
            self.in_stream = False
            return StreamStop()
        if kind == 0x63:  # c
            x, _flags, commit_lsn, end_lsn, ts = _STREAM_COMMIT(buf, pos)
            return StreamCommit(x, commit_lsn, end_lsn, ts)
        if kind == 0x41:  # A
            x, sub = struct.unpack_from("!II", buf, pos)
            return StreamAbort(x, sub)
        return Other(chr(kind))

    def _relation(self, buf, pos: int) -> Relation:
        (oid,) = _U32(buf, pos)
        namespace, pos = _cstring(buf, pos + 4)
        name, pos = _cstring(buf, pos)
        identity = chr(buf[pos])
        (ncols,) = _I16(buf, pos + 1)
        pos += 3
        columns = []
        for _ in range(ncols):
            flags = buf[pos]
            col_name, pos = _cstring(buf, pos + 1)
            type_oid, modifier = _COLUMN_TYPE(buf, pos)
            pos += 8
            columns.append(Column(col_name, type_oid, modifier, bool(flags & 1)))
        relation = Relation(oid, namespace or "pg_catalog", name, identity, tuple(columns))
        self.relations[oid] = relation
        return relation


def row_change(buf, pos: int, relation: Relation, xid: int | None = None) -> "Insert | Update | Delete":
    """The Insert, Update or Delete in ``buf`` (kind byte first) whose relation OID ends at ``pos``."""
    kind = buf[0]
    if kind == 0x49:  # I
        new, _ = _tuple(buf, pos + 1)  # skip the 'N'
        return Insert(relation, new, xid)
    if kind == 0x55:  # U
        old, key_only = None, False
        if buf[pos] in (0x4B, 0x4F):  # K / O
            key_only = buf[pos] == 0x4B
            old, pos = _tuple(buf, pos + 1)
        new, _ = _tuple(buf, pos + 1)  # skip the 'N'
        return Update(relation, new, old, key_only, xid)
    if kind == 0x44:  # D
        key_only = buf[pos] == 0x4B
        old, _ = _tuple(buf, pos + 1)
        return Delete(relation, old, key_only, xid)
    raise ValueError(f"not a row change: {chr(kind)!r}")


def _cstring(buf, pos: int) -> tuple[str, int]:
    end = bytes(buf[pos:pos + 1024]).find(b"\0")
    if end < 0:
        end = bytes(buf[pos:]).index(b"\0")
    return bytes(buf[pos:pos + end]).decode(), pos + end + 1


def _tuple(buf, pos: int) -> tuple[Tuple, int]:
    (n,) = _I16(buf, pos)
    pos += 2
    values: Tuple = [None] * n
    for i in range(n):
        kind = buf[pos]
        pos += 1
        if kind in (0x74, 0x62):  # t(ext) / b(inary)
            (length,) = _I32(buf, pos)
            pos += 4
            raw = bytes(buf[pos:pos + length])
            values[i] = raw.decode() if kind == 0x74 else raw
            pos += length
        elif kind == 0x75:  # u: unchanged TOAST
            values[i] = UNCHANGED_TOAST
        elif kind != 0x6E:  # n: NULL
            raise ValueError(f"unknown tuple value kind {chr(kind)!r}")
    return values, pos


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)
