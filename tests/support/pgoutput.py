"""Writing pgoutput payloads (protocol 2), the inverse of ``protocol.Decoder``: synthetic streams for tests.

Values are PostgreSQL text (``str``), ``None`` for NULL, or
``protocol.UNCHANGED_TOAST``.  ``xid`` is given only inside a streamed block.
"""

from __future__ import annotations

import struct

from freshview.connectors.postgres import protocol as p


def _xid(xid: int | None) -> bytes:
    return b"" if xid is None else struct.pack("!I", xid)


def _tuple(values: list) -> bytes:
    out = [struct.pack("!h", len(values))]
    for v in values:
        if v is None:
            out.append(b"n")
        elif v is p.UNCHANGED_TOAST:
            out.append(b"u")
        else:
            raw = v.encode()
            out.append(b"t" + struct.pack("!i", len(raw)) + raw)
    return b"".join(out)


def relation(rel: p.Relation, xid: int | None = None) -> bytes:
    cols = b"".join(bytes([1 if c.is_key else 0]) + c.name.encode() + b"\0" + struct.pack("!Ii", c.type_oid,
                                                                                         c.type_modifier)
                    for c in rel.columns)
    return (b"R" + _xid(xid) + struct.pack("!I", rel.oid) + rel.namespace.encode() + b"\0" + rel.name.encode()
            + b"\0" + rel.replica_identity.encode() + struct.pack("!h", len(rel.columns)) + cols)


def begin(xid: int, final_lsn: int = 0, ts: int = 0) -> bytes:
    return b"B" + struct.pack("!QqI", final_lsn, ts, xid)


def commit(commit_lsn: int, end_lsn: int, ts: int = 0) -> bytes:
    return b"C" + struct.pack("!BQQq", 0, commit_lsn, end_lsn, ts)


def insert(rel: p.Relation, new: list, xid: int | None = None) -> bytes:
    return b"I" + _xid(xid) + struct.pack("!I", rel.oid) + b"N" + _tuple(new)


def update(rel: p.Relation, new: list, old: list | None = None, key_only: bool = False,
           xid: int | None = None) -> bytes:
    before = b"" if old is None else (b"K" if key_only else b"O") + _tuple(old)
    return b"U" + _xid(xid) + struct.pack("!I", rel.oid) + before + b"N" + _tuple(new)


def delete(rel: p.Relation, old: list, key_only: bool = True, xid: int | None = None) -> bytes:
    return b"D" + _xid(xid) + struct.pack("!I", rel.oid) + (b"K" if key_only else b"O") + _tuple(old)


def truncate(rels: list[p.Relation], xid: int | None = None) -> bytes:
    return b"T" + _xid(xid) + struct.pack("!iB", len(rels), 0) + b"".join(struct.pack("!I", r.oid) for r in rels)


def stream_start(xid: int, first: bool = True) -> bytes:
    return b"S" + struct.pack("!IB", xid, 1 if first else 0)


def stream_stop() -> bytes:
    return b"E"


def stream_commit(xid: int, commit_lsn: int, end_lsn: int, ts: int = 0) -> bytes:
    return b"c" + struct.pack("!IBQQq", xid, 0, commit_lsn, end_lsn, ts)


def stream_abort(xid: int, subxid: int) -> bytes:
    return b"A" + struct.pack("!II", xid, subxid)
