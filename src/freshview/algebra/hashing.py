"""Deterministic 64-bit hashes of Arrow columns and rows, exact value equality, sorting by hash.

These hashes are part of the state store's on-disk format (runs are sorted by
key hash; shards are key-hash ranges), so they are fixed by ``HASH_VERSION``
and computed with explicit little-endian integer arithmetic: the same value
hashes the same in every process, on every platform, in every release that
keeps the version.  Everything is vectorised (numpy on Arrow buffers); no
Python runs per row.

Algorithm, version 1 (unsigned 64-bit arithmetic, mod 2**64; ``mix`` is the
splitmix64 finaliser ``x ^= x >> 30; x *= 0xBF58476D1CE4E5B9; x ^= x >> 27;
x *= 0x94D049BB133111EB; x ^= x >> 31``; ``G = 0x9E3779B97F4A7C15``).  A value
is first made a canonical word (``canonical``), then hashed:

* integers of every width, booleans (0/1), dates, times, timestamps (any unit
  or time zone) and durations: the value as a signed 64-bit integer, its
  two's complement word ``w``; ``uint64`` its own word.  Hash ``mix(w + G)``,
  so equal integers hash equal whatever their width.
* floats: the float64 value with ``-0.0`` made ``0.0`` and every NaN the one
  NaN ``0x7FF8000000000000``; its IEEE word ``w``, hashed ``mix(w + G)``.
* decimal128 (any precision and scale): the unscaled 128-bit integer as words
  ``lo, hi``, hashed ``mix(mix(lo + G) ^ hi)``.  Equal values of one type have
  one unscaled integer, so they hash equal.
* strings (UTF-8 bytes ``b_0 .. b_{n-1}``): ``p = sum((b_j + 1) * P**j)`` with
  ``P = 0x100000001B3``, hashed ``mix(p ^ mix(n + G))``.  ``p`` is computed for
  all strings at once from a cumulative sum over the data buffer: the sum of
  a string's terms at buffer positions ``s .. e`` times ``P**-s`` (``P`` is
  odd, hence invertible mod 2**64).
* month_day_nano intervals: the 16 bytes (months, days, nanoseconds) as words
  ``lo, hi``, hashed as a decimal128 (so '1 day' and '24 hours' differ: this
  is representation equality, not PostgreSQL's interval comparison).
* lists (one-dimensional arrays): a byte string per list, hashed as a string
  above: per element a validity byte (0 for NULL) then its canonical bytes,
  zeroed for NULL: 8 little-endian bytes per word (16 for a decimal128 or
  interval), or for a string its length as 8 bytes then its UTF-8 bytes.
  Equality is the byte strings' (element by element, NULL equals NULL).
* NULL in column position ``i`` (any type, the null type too):
  ``mix(0x6A09E667F3BCC909 + i)``.

A row of column hashes ``h_0 .. h_{k-1}``: ``r = 0x243F6A8885A308D3`` (or a
given ``seed``), ``r = (r ^ h_i) * G`` for each column in order, hash
``mix(r)``.  The state store hashes a key's columns in key order, and a row as
its value columns seeded with its key's hash.

Hashes only find candidates: equality is decided exactly, by ``values_equal``
on the canonical words.  Callers cast values to one type before comparing
(an int32 probe is cast to the stored int64 first).
"""

from __future__ import annotations

import threading
from typing import NamedTuple, Sequence

import numpy as np
import pyarrow as pa

from freshview.algebra import parallel

HASH_VERSION = 1

_G = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_NULL_SEED = 0x6A09E667F3BCC909
_ROW_SEED = np.uint64(0x243F6A8885A308D3)
_P = 0x100000001B3
_P_INV = pow(_P, -1, 2**64)
_NAN_WORD = np.uint64(0x7FF8000000000000)
_STRING_CHUNK = 1 << 20  # bytes of string data hashed per numpy pass (bounds temporary memory)

Column = pa.Array | pa.ChunkedArray

__all__ = ["HASH_VERSION", "Canonical", "argsort", "canonical", "hash_array", "hash_rows", "null_hash",
           "values_equal"]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on a uint64 array (which is returned)."""
    shifted = np.empty_like(x)
    for shift, factor in ((30, _M1), (27, _M2), (31, None)):
        np.right_shift(x, np.uint64(shift), out=shifted)
        x ^= shifted
        if factor is not None:
            x *= factor
    return x


def null_hash(position: int) -> np.uint64:
    """The hash of NULL in column position ``position`` of a row."""
    return _mix(np.array([(_NULL_SEED + position) % 2**64], dtype=np.uint64))[0]


# ---------------------------------------------------------------------- hashing
def hash_rows(columns: Sequence[Column], seed: np.ndarray | None = None, first: int = 0,
              length: int | None = None) -> np.ndarray:
    """Row hashes (uint64) of equally long columns, see the module docstring.

    ``seed``: per-row starting values instead of the constant; ``first``: the
    position of ``columns[0]`` in the row (for NULL's constant); ``length``:
    the row count when there are neither columns nor a seed.
    """
    n = len(seed) if seed is not None else len(columns[0]) if columns else length
    if n is None:
        raise ValueError("hash_rows of no columns needs a length")
    pieces = parallel.workers(n) if columns else 1
    if pieces < 2:
        return _hash_rows(columns, seed, first, n)
    out = np.empty(n, dtype=np.uint64)

    def piece(part: tuple[int, int]) -> None:  # row slices hash independently (a row's hash is its own)
        start, size = part
        out[start:start + size] = _hash_rows([c.slice(start, size) for c in columns],
                                             None if seed is None else seed[start:start + size], first, size)

    parallel.map_leaves(piece, parallel.slices(n, pieces))
    return out


def _hash_rows(columns: Sequence[Column], seed: np.ndarray | None, first: int, n: int) -> np.ndarray:
    acc = seed.astype(np.uint64, copy=True) if seed is not None else np.full(n, _ROW_SEED, dtype=np.uint64)
    for i, col in enumerate(columns):
        acc ^= hash_array(col, first + i)
        acc *= _G
    return _mix(acc)


def hash_array(col: Column, position: int = 0) -> np.ndarray:
    """The hash (uint64) of every value of ``col``; NULL hashes ``null_hash(position)``."""
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks == 1:
            return hash_array(col.chunk(0), position)
        parts = [hash_array(c, position) for c in col.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    view = canonical(col)
    if view.data is not None:
        h = _hash_strings(view.offsets, view.data)
    elif view.words is None:  # the null type
        return np.full(len(col), null_hash(position), dtype=np.uint64)
    elif view.words.ndim == 2:  # decimal128
        h = _mix(view.words[:, 0] + _G)
        h ^= view.words[:, 1]
        _mix(h)
    else:
        h = _mix(view.words + _G)
    if view.valid is not None:
        h[~view.valid] = null_hash(position)
    return h


def _hash_strings(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    n = len(offsets) - 1
    out = np.empty(n, dtype=np.uint64)
    bounds = [0, n]
    if offsets[-1] - offsets[0] > _STRING_CHUNK:  # slices of about _STRING_CHUNK bytes bound the temporaries
        marks = np.arange(offsets[0] + _STRING_CHUNK, offsets[-1], _STRING_CHUNK)
        bounds = sorted({0, n, *(np.searchsorted(offsets, marks, side="right") - 1).tolist()})
    for s0, s1 in zip(bounds[:-1], bounds[1:]):
        local = offsets[s0:s1 + 1] - offsets[s0]
        chunk = data[offsets[s0]:offsets[s1]]
        powers, inverses = _POWERS.get(len(chunk))
        terms = chunk.astype(np.uint64)
        terms += np.uint64(1)
        terms *= powers[:len(chunk)]
        sums = np.zeros(len(chunk) + 1, dtype=np.uint64)
        np.cumsum(terms, out=sums[1:])
        poly = sums[local[1:]]
        poly -= sums[local[:-1]]
        poly *= inverses[local[:-1]]
        lengths = (local[1:] - local[:-1]).astype(np.uint64)
        lengths += _G
        poly ^= _mix(lengths)
        out[s0:s1] = _mix(poly)
    return out


class _Powers:
    """``P**j`` and ``P**-j`` for ``j`` up to some size, grown on demand (replaced, never mutated)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.table = (np.ones(1, np.uint64), np.ones(1, np.uint64))

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        table = self.table
        if len(table[0]) > n:
            return table
        with self._lock:
            size = max(n + 1, 2 * len(self.table[0]), 4096)
            self.table = (_cumulative_powers(_P, size), _cumulative_powers(_P_INV, size))
            return self.table


def _cumulative_powers(base: int, n: int) -> np.ndarray:
    factors = np.full(n, base, dtype=np.uint64)
    factors[0] = 1
    return np.cumprod(factors, dtype=np.uint64)


_POWERS = _Powers()


# ---------------------------------------------------------------------- canonical words and equality
class Canonical(NamedTuple):
    """One array's values as words where equal values are equal words (NULL slots hold anything).

    Fixed-width types: ``words``, uint64 of shape ``(n,)`` (``(n, 2)`` for
    decimal128).  Strings: ``offsets`` (int64, ``n + 1``) into ``data`` (uint8).
    The null type: neither.  ``valid`` is None when no value is NULL.
    """

    words: np.ndarray | None
    offsets: np.ndarray | None
    data: np.ndarray | None
    valid: np.ndarray | None


def canonical(col: pa.Array) -> Canonical:
    """The canonical words of one Arrow array (see the module docstring)."""
    kind, dtype = _kind(col.type)
    if kind == "null":
        return Canonical(None, None, None, None)
    n, offset, buffers = len(col), col.offset, col.buffers()
    valid = _bits(buffers[0], offset, n) if col.null_count else None
    if kind == "int":  # (an int64 column's words are its buffer, not a copy: nobody writes to them)
        words = np.frombuffer(buffers[1], dtype, count=n, offset=offset * dtype.itemsize)
        return Canonical(words.astype(np.int64, copy=False).view(np.uint64), None, None, valid)
    if kind == "string":
        offsets = np.frombuffer(buffers[1], dtype, count=n + 1, offset=offset * dtype.itemsize).astype(np.int64)
        data = buffers[2]
        return Canonical(None, offsets, np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8), valid)
    if kind == "pair":  # decimal128, month_day_nano: two little-endian words per value
        words = np.frombuffer(buffers[1], np.dtype("<u8"), count=2 * n, offset=offset * 16)
        return Canonical(words.reshape(-1, 2), None, None, valid)
    if kind == "float":
        values = np.frombuffer(buffers[1], dtype, count=n, offset=offset * dtype.itemsize).astype(np.float64)
        values += 0.0  # -0.0 + 0.0 == 0.0
        words = values.view(np.uint64)
        words[np.isnan(values)] = _NAN_WORD
        return Canonical(words, None, None, valid)
    if kind == "uint":
        words = np.frombuffer(buffers[1], dtype, count=n, offset=offset * dtype.itemsize)
        return Canonical(words.astype(np.uint64), None, None, valid)
    if kind == "bool":
        return Canonical(_bits(buffers[1], offset, n).astype(np.uint64), None, None, valid)
    offsets, data = _list_bytes(col)  # "list"
    return Canonical(None, offsets, data, valid)


_KINDS: dict[pa.DataType, tuple[str, np.dtype | None]] = {}


def _kind(t: pa.DataType) -> tuple[str, np.dtype | None]:
    """How ``canonical`` reads a type (decided once per type): its kind and buffer dtype."""
    found = _KINDS.get(t)
    if found is None:
        found = _KINDS[t] = _classify(t)
    return found


def _classify(t: pa.DataType) -> tuple[str, np.dtype | None]:
    if pa.types.is_null(t):
        return "null", None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string", np.dtype("<i8") if pa.types.is_large_string(t) else np.dtype("<i4")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list", None
    if t == pa.month_day_nano_interval():
        return "pair", None
    if pa.types.is_decimal(t):
        if t.bit_width != 128:
            raise TypeError(f"cannot hash {t}: only decimal128 is supported")
        return "pair", None
    if pa.types.is_floating(t) and t.bit_width in (32, 64):
        return "float", np.dtype(f"<f{t.bit_width // 8}")
    if pa.types.is_boolean(t):
        return "bool", None
    if pa.types.is_unsigned_integer(t):
        return "uint", np.dtype(f"<u{t.bit_width // 8}")
    if (pa.types.is_integer(t) or pa.types.is_temporal(t)) and t.bit_width in (8, 16, 32, 64):
        return "int", np.dtype(f"<i{t.bit_width // 8}")
    raise TypeError(f"cannot hash Arrow type {t}")


def _list_bytes(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Each list of ``col`` as one byte string (offsets, data): see the module docstring."""
    offs = np.asarray(col.offsets, dtype=np.int64)
    child = col.values.slice(int(offs[0]), int(offs[-1] - offs[0]))
    offs = offs - offs[0]
    c = canonical(child)
    n = len(child)
    valid = np.ones(n, bool) if c.valid is None else c.valid
    if c.data is not None:  # strings: validity, length (8 bytes), bytes
        lens = (c.offsets[1:] - c.offsets[:-1]) * valid
        size = 9 + lens
        pos = np.zeros(n + 1, np.int64)
        np.cumsum(size, out=pos[1:])
        data = np.zeros(int(pos[-1]), np.uint8)
        data[pos[:-1]] = valid
        if n:
            data[pos[:-1, None] + 1 + np.arange(8)] = lens.astype("<u8").view(np.uint8).reshape(-1, 8)
        total = int(lens.sum())
        if total:
            firsts = np.cumsum(lens) - lens
            step = np.arange(total) - np.repeat(firsts, lens)
            data[np.repeat(pos[:-1] + 9, lens) + step] = c.data[np.repeat(c.offsets[:-1], lens) + step]
        return pos[offs], data
    if c.words is None:  # the null type: only the validity byte
        return offs, np.zeros(n, np.uint8)
    words = c.words.reshape(n, 2 if c.words.ndim == 2 else 1).astype("<u8", copy=True)
    words[~valid] = 0
    width = 1 + 8 * words.shape[1]
    data = np.concatenate([valid.astype(np.uint8)[:, None], words.view(np.uint8).reshape(n, width - 1)], axis=1)
    return offs * width, data.reshape(-1)


def values_equal(x: Canonical, y: Canonical, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Exact equality of values ``x[i]`` and ``y[j]`` of one type: NULL equals NULL, NaN equals NaN."""
    if x.data is not None:
        eq = _strings_equal(x, y, i, j)
    elif x.words is not None:
        eq = x.words[i] == y.words[j]
        if eq.ndim == 2:
            eq = eq.all(axis=1)
    else:
        return np.ones(len(i), dtype=bool)
    if x.valid is not None or y.valid is not None:
        vx = x.valid[i] if x.valid is not None else True
        vy = y.valid[j] if y.valid is not None else True
        eq = (eq & vx & vy) | ~(vx | vy)
    return eq


def _strings_equal(x: Canonical, y: Canonical, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    start_x, start_y = x.offsets[i], y.offsets[j]
    lengths = x.offsets[i + 1] - start_x
    eq = lengths == y.offsets[j + 1] - start_y
    check = np.flatnonzero(eq & (lengths > 0))
    if check.size:  # compare the bytes of equally long strings, all at once
        counts = lengths[check]
        firsts = np.cumsum(counts) - counts
        step = np.arange(int(counts.sum())) - np.repeat(firsts, counts)
        differ = x.data[np.repeat(start_x[check], counts) + step] != y.data[np.repeat(start_y[check], counts) + step]
        eq[check] = np.add.reduceat(differ, firsts) == 0
    return eq


def _bits(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    packed = np.frombuffer(buf, dtype=np.uint8, count=(offset + n + 7) // 8)
    return np.unpackbits(packed, bitorder="little", count=offset + n)[offset:].view(bool)


# ---------------------------------------------------------------------- sorting by hash
def argsort(keys: np.ndarray, presorted: bool = False) -> np.ndarray:
    """A stable argsort of uint64 ``keys`` (intp indices).

    numpy sorts uint64 values much faster than it argsorts them, so the row
    index is packed into the low bits of each key (keys are first shifted
    to fill the high bits when their range allows, which keeps them exact),
    the packed words are sorted, and the rows whose keys agree in the kept
    high bits but not in the dropped low bits are sorted again: for hashes,
    a handful.  ``presorted``: the keys are a few sorted sequences one after
    another (runs to merge), which timsort merges in linear time.

    A large input is sorted as ranges of its top bits on several threads
    (``parallel``): every key falls in one range, so the ranges' stable
    orders, one after the other, are the whole's (and a range's part of a
    sorted sequence is sorted: runs to merge split the same way).
    """
    pieces = parallel.workers(len(keys))
    if pieces < 2:
        return _argsort(keys, presorted)
    bits = (pieces - 1).bit_length()
    top = keys >> np.uint64(64 - bits)
    parts = [np.flatnonzero(top == b) for b in range(1 << bits)] if bits > 1 else \
        [np.flatnonzero(top == 0), np.flatnonzero(top)]
    del top
    return np.concatenate(parallel.map_leaves(lambda rows: rows[_argsort(keys[rows], presorted)], parts))


def _argsort(keys: np.ndarray, presorted: bool = False) -> np.ndarray:
    n = len(keys)
    if n < 2:
        return np.arange(n, dtype=np.intp)
    bits = int(n - 1).bit_length()
    low = np.uint64((1 << bits) - 1)
    smallest = keys.min()
    spread = int(keys.max() - smallest).bit_length()
    if spread <= 64 - bits:  # exact: the keys fit above the index bits
        packed = (keys - smallest) << np.uint64(64 - spread) if spread else np.zeros(n, np.uint64)
    else:
        packed = keys & ~low
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort(kind="stable" if presorted else None)
    order = (packed & low).astype(np.intp)
    if spread <= 64 - bits:
        return order
    high = packed & ~low
    shared = np.flatnonzero(high[1:] == high[:-1])
    if shared.size:
        unsorted = shared[keys[order[shared + 1]] < keys[order[shared]]]
        if unsorted.size:
            order = _resort_groups(keys, order, high, unsorted)
    return order


def _resort_groups(keys: np.ndarray, order: np.ndarray, high: np.ndarray, unsorted: np.ndarray) -> np.ndarray:
    """Stable-sort by full key the groups of equal high bits that hold the positions ``unsorted``."""
    lo = np.searchsorted(high, high[unsorted], "left")  # ``high`` is sorted: find each group's extent
    hi = np.searchsorted(high, high[unsorted], "right")
    keep = np.concatenate([[True], lo[1:] != lo[:-1]])  # one entry per group
    lo, hi = lo[keep], hi[keep]
    counts = hi - lo
    pos = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts - lo, counts)
    group_of = np.repeat(np.arange(len(lo)), counts)
    rows = order[pos]
    order = order.copy()
    order[pos] = rows[np.lexsort((rows, keys[rows], group_of))]
    return order
