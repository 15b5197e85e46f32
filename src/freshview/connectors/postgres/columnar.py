"""Many pgoutput row changes decoded at once, a column at a time.  No I/O.

The assembler keeps the Insert/Update/Delete payloads of a transaction as
sent (``changes.RawChanges``); when a step needs them, ``parse`` reads all of a
relation's payloads in one pass per column with numpy: the message layout
(``I`` rel ``N`` tuple, ``U`` rel [``K``|``O`` tuple] ``N`` tuple, ``D`` rel
``K``|``O`` tuple), then per column each value's kind (``n`` NULL, ``u``
unchanged TOAST, ``t`` text) and length, and finally every column's text
values gathered into one Arrow string array.  No Python runs per row; the
layout is the one ``protocol.Decoder`` reads one message at a time, and
``tests/connectors/test_columnar.py`` holds the two to the same answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from freshview.connectors.postgres import protocol as p

INSERT, UPDATE, DELETE = 0x49, 0x55, 0x44
_N, _K, _O = 0x4E, 0x4B, 0x4F
_TEXT, _BINARY, _TOAST, _NULL = 0x74, 0x62, 0x75, 0x6E


@dataclass
class Tuples:
    """One tuple per change: each column's text (null for NULL and unchanged TOAST) and TOAST marks."""

    columns: list[pa.Array]  # string arrays, one per relation column, in the relation's order
    toast: np.ndarray  # bool, shape (rows, columns): the value is an unchanged TOAST (not sent)


@dataclass
class Parsed:
    """A relation's changes decoded: kinds, and the new and old tuples of the changes that have them."""

    kind: np.ndarray  # uint8: I / U / D per change
    old_kind: np.ndarray  # uint8: K (key only), O (full row) or 0 (no old tuple sent)
    new: Tuples  # for changes with a new tuple (I, U), in change order
    has_new: np.ndarray  # bool per change
    old: Tuples  # for changes with an old tuple (K, O), in change order
    has_old: np.ndarray  # bool per change


def parse(payloads: list, starts: list[int], ncols: int) -> Parsed:
    """Decode I/U/D payloads of one relation (``ncols`` columns) a column at a time."""
    try:
        return _parse(payloads, starts, ncols)
    except IndexError:
        raise p.ProtocolError("a row change payload ends too early") from None


def _parse(payloads: list, starts: list[int], ncols: int) -> Parsed:
    n = len(payloads)
    lengths = np.fromiter(map(len, payloads), np.int64, count=n)
    buf = np.frombuffer(b"".join(payloads), np.uint8)
    begin = np.zeros(n, np.int64)
    np.cumsum(lengths[:-1], out=begin[1:])
    kind = buf[begin]
    if not np.isin(kind, (INSERT, UPDATE, DELETE)).all():
        raise p.ProtocolError("a row change payload that is not an Insert, Update or Delete")
    at = begin + np.asarray(starts, np.int64) + 4  # after the relation OID
    flag = buf[at]
    has_old = (kind != INSERT) & ((flag == _K) | (flag == _O))
    old_kind = np.where(has_old, flag, 0).astype(np.uint8)
    if ((kind == DELETE) & ~has_old).any() or ((kind == INSERT) & (flag != _N)).any():
        raise p.ProtocolError("malformed pgoutput row change")
    old, old_end = _tuples(buf, at[has_old] + 1, ncols)
    new_at = at.copy()
    new_at[has_old] = old_end  # the 'N' after the old tuple
    has_new = kind != DELETE
    if (buf[new_at[has_new]] != _N).any():
        raise p.ProtocolError("malformed pgoutput row change: no new tuple")
    new, _ = _tuples(buf, new_at[has_new] + 1, ncols)
    return Parsed(kind, old_kind, new, has_new, old, has_old)


def _tuples(buf: np.ndarray, at: np.ndarray, ncols: int) -> tuple[Tuples, np.ndarray]:
    """TupleData starting at each of ``at``; returns them and where each ends."""
    rows = len(at)
    if rows and (_int(buf, at, 2) != ncols).any():
        raise p.ProtocolError(f"a tuple without the relation's {ncols} columns")
    pos = at + 2
    columns, toast = [], np.zeros((rows, ncols), bool)
    for c in range(ncols):
        kind = buf[pos] if rows else np.zeros(0, np.uint8)
        text = kind == _TEXT
        if (~(text | (kind == _NULL) | (kind == _TOAST))).any():
            raise p.ProtocolError("binary or unknown tuple values are not supported")
        size = np.zeros(rows, np.int64)
        size[text] = _int(buf, pos[text] + 1, 4)
        columns.append(_gather(buf, pos + 5, size, text))
        toast[:, c] = kind == _TOAST
        pos = pos + 1 + np.where(text, 4 + size, 0)
    return Tuples(columns, toast), pos


def _int(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed integers of ``width`` bytes at each of ``at``."""
    value = np.zeros(len(at), np.int64)
    for i in range(width):
        value = (value << 8) | buf[at + i]
    sign = np.int64(1) << (8 * width - 1)
    return (value ^ sign) - sign


def _gather(buf: np.ndarray, start: np.ndarray, size: np.ndarray, valid: np.ndarray) -> pa.Array:
    """One string array of the byte ranges ``[start, start + size)`` (null where not ``valid``)."""
    rows = len(start)
    offsets = np.zeros(rows + 1, np.int64)
    np.cumsum(size, out=offsets[1:])
    total = int(offsets[-1])
    index = np.repeat(start - offsets[:-1], size) + np.arange(total, dtype=np.int64)
    data = buf[index]
    nulls = rows - int(valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if total < 2**31 - 1:
        out = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data),
                                          bitmap, nulls)
    else:
        out = pa.LargeStringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data), bitmap, nulls)
    try:
        out.validate(full=True)  # the text is UTF-8 (the database's encoding)
    except pa.ArrowInvalid as exc:
        raise p.ProtocolError(f"a text value that is not UTF-8: {exc}") from None
    return out
