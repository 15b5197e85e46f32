"""Rows events' row images, decoded from the binlog's bytes column by column into Arrow. No I/O.

python-mysql-replication decodes a rows event value by value into a dict
per row image (with a ``Decimal``, ``datetime`` or ``str`` per value), which
capped the stream at ~67k row images per second on one core.  Here the
stream hands over the rows part of the event body as bytes, and decoding
happens in two steps:

1. **Cutting** (``decode``, per row image, Python): read the NULL bitmap and
   cut the image into its columns' bytes, without converting any value.  A
   row image is the NULL bitmap (one bit per column) followed by the
   non-NULL values in column order; consecutive fixed-width columns form a
   *run* whose bytes are kept as one slice per image (one ``bytes`` slice
   for ``id BIGINT, customer INT, amount DECIMAL(12,2)``), a
   variable-width column (VARCHAR, CHAR, TEXT: a 1–4 byte length, then the
   bytes) one slice per value.  A table whose columns are all fixed-width
   and an event with no NULL in it (every image the same size) is cut
   without a Python loop at all: one NumPy view of the whole body.
2. **Converting** (``RowImages.arrays``, per column, vectorised): the run
   slices of many events are joined into one ``(images, run bytes)`` NumPy
   matrix, and each column's bytes are turned into its Arrow array by NumPy
   arithmetic (little-endian integers, big-endian packed DECIMAL, DATETIME2,
   TIMESTAMP2, TIME2 …); text goes to Arrow as bytes and is validated as
   UTF-8 there.  Only the columns freshview reads are converted.

The values equal what the old path gave (the library's values through
``types.to_arrow``): zero dates are NULL, a zero TIMESTAMP is NULL, YEAR 0
is 0, SET members are joined in definition order, an ENUM is its member's
name (``''`` for the error value 0), text is decoded in the column's
character set.  ``layout_of`` answers None for a table with a column type
not handled here (MySQL's binary JSON, GEOMETRY, pre-5.6 temporal types,
tables without ENUM/SET metadata): the stream then uses the library's own
decoding for that table (``LibraryImages``).

The binlog formats are MySQL's (``sql/log_event.cc``, ``rpl_record.cc``,
``my_time.cc``, ``decimal.c``), which MariaDB shares; a rows event of v1
(MariaDB) or v2 (MySQL) differs only in its header, which the library reads.
Only full row images are decoded (``binlog_row_image=FULL``: the stream
refuses others before decoding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa

from freshview.connectors.mysql.types import MySqlColumn, to_arrow

# Column types as the TABLE_MAP event gives them (MySQL's enum_field_types).
TINY, SHORT, LONG, FLOAT, DOUBLE, LONGLONG, INT24, DATE, YEAR = 1, 2, 3, 4, 5, 8, 9, 10, 13
VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2 = 15, 16, 17, 18, 19
NEWDECIMAL, ENUM, SET, BLOB, STRING = 246, 247, 248, 252, 254

_INT_WIDTH = {TINY: 1, SHORT: 2, INT24: 3, LONG: 4, LONGLONG: 8}
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a packed DECIMAL group of 0..9 digits
_UTF8 = {"utf8", "utf-8", "utf8mb4", "utf_8"}


class ImageError(ValueError):
    """A value that cannot be converted (invalid text, a date the calendar lacks, a type change ...)."""

    def __init__(self, column: str, why: str) -> None:
        super().__init__(why)
        self.column = column


@dataclass(frozen=True)
class BinlogColumn:
    """One column of a TABLE_MAP event: what cutting and converting its values needs."""

    name: str
    type: int
    width: int = 0  # bytes of a fixed-width value; 0: variable (a length, then the bytes)
    length_bytes: int = 0  # variable width: bytes of the length
    unsigned: bool = False
    precision: int = 0  # DECIMAL
    scale: int = 0  # DECIMAL
    fsp: int = 0  # fractional second digits of TIME2 / DATETIME2 / TIMESTAMP2
    bits: int = 0  # BIT(n)
    encoding: str | None = None  # text: Python codec of its character set (None: UTF-8)
    members: tuple[str, ...] = ()  # ENUM / SET members in definition order


def decimal_bytes(precision: int, scale: int) -> int:
    """Bytes of a packed DECIMAL(precision, scale): 4 per 9 digits, fewer for the leftover digits."""
    whole = precision - scale
    return whole // 9 * 4 + _DIG2BYTES[whole % 9] + scale // 9 * 4 + _DIG2BYTES[scale % 9]


def binlog_column(name: str, type_code: int, *, unsigned: bool = False, max_length: int = 0,
                  length_size: int = 0, precision: int = 0, decimals: int = 0, fsp: int = 0, bits: int = 0,
                  size: int = 0, encoding: str | None = None,
                  members: Sequence[str] | None = None) -> BinlogColumn | None:
    """A column from its TABLE_MAP type and metadata; None for a type this module does not decode."""
    t = type_code
    if t in _INT_WIDTH:
        return BinlogColumn(name, t, _INT_WIDTH[t], unsigned=unsigned)
    if t in (FLOAT, DOUBLE):
        return BinlogColumn(name, t, 4 if t == FLOAT else 8)
    if t in (YEAR, DATE):
        return BinlogColumn(name, t, 1 if t == YEAR else 3)
    if t in (TIMESTAMP2, DATETIME2, TIME2):
        base = {TIMESTAMP2: 4, DATETIME2: 5, TIME2: 3}[t]
        return BinlogColumn(name, t, base + (fsp + 1) // 2, fsp=fsp)
    if t == NEWDECIMAL:
        return BinlogColumn(name, t, decimal_bytes(precision, decimals), precision=precision, scale=decimals)
    if t == BIT:
        return BinlogColumn(name, t, (bits + 7) // 8, bits=bits)
    if t in (ENUM, SET):
        if members is None or size < 1 or (t == ENUM and size > 2) or size > 8:
            return None  # no member names in the binlog (binlog_row_metadata is not FULL)
        return BinlogColumn(name, t, size, members=tuple(members))
    if t in (VARCHAR, STRING):
        return BinlogColumn(name, t, length_bytes=2 if max_length > 255 else 1, encoding=encoding)
    if t == BLOB and 1 <= length_size <= 4:  # TINY/MEDIUM/LONG BLOB and TEXT, MariaDB's JSON
        return BinlogColumn(name, t, length_bytes=length_size, encoding=encoding)
    return None


class Layout:
    """How a row image of one table map is cut: its runs of fixed-width columns and its variable ones.

    Layouts are compared by identity: ``RowImages`` of one layout concatenate (``layout_of`` gives
    equal table maps the same layout).
    """

    def __init__(self, columns: Sequence[BinlogColumn]) -> None:
        self.columns = tuple(columns)
        n = len(self.columns)
        self.null_bytes = (n + 7) // 8
        self.null_mask = (1 << n) - 1
        self._by_name = {c.name: i for i, c in enumerate(self.columns)}
        self._by_folded = {c.name.lower(): i for i, c in enumerate(self.columns)}
        # segments: (True, run size, run index) or (False, length bytes, variable index), in image order
        segments: list[tuple[bool, int, int]] = []
        self.places: list[tuple[int, int]] = []  # per column: (run index, offset) or (variable index, -1)
        run_sizes: list[int] = []
        n_vars = 0
        for c in self.columns:
            if c.width:
                if not segments or not segments[-1][0]:
                    segments.append((True, 0, len(run_sizes)))
                    run_sizes.append(0)
                run = len(run_sizes) - 1
                self.places.append((run, run_sizes[run]))
                run_sizes[run] += c.width
                segments[-1] = (True, run_sizes[run], run)
            else:
                segments.append((False, c.length_bytes, n_vars))
                self.places.append((n_vars, -1))
                n_vars += 1
        self.segments = tuple(segments)
        self.run_sizes = tuple(run_sizes)
        self.n_vars = n_vars
        self.fixed = n_vars == 0  # every image without NULLs has the same size
        self.stride = self.null_bytes + sum(run_sizes)
        mask = self.null_mask.to_bytes(self.null_bytes, "little")
        self._mask_row = np.frombuffer(mask, np.uint8)
        # per column, for images with NULLs:
        # (fixed?, width or length bytes, run/variable index, zeros, last of its run?)
        self._steps = []
        for i, c in enumerate(self.columns):
            last = i + 1 == n or not (c.width and self.columns[i + 1].width)
            self._steps.append((bool(c.width), c.width or c.length_bytes, self.places[i][0], bytes(c.width), last))

    def position(self, name: str) -> int:
        """The index of column ``name`` (exact, else case-insensitive: MySQL's column names are); KeyError."""
        i = self._by_name.get(name)
        if i is None:
            i = self._by_folded[name.lower()]
        return i

    def __repr__(self) -> str:
        return f"Layout({', '.join(c.name for c in self.columns)})"


_LAYOUTS: dict[tuple[BinlogColumn, ...], Layout] = {}


def layout_of(columns: Sequence[BinlogColumn | None]) -> Layout | None:
    """The (shared) layout of a table map's columns; None when one column is not decoded here."""
    if any(c is None for c in columns):
        return None
    key = tuple(columns)  # type: ignore[arg-type]
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) > 4096:  # tables come and go (DDL): keep the cache bounded
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = Layout(key)  # type: ignore[arg-type]
    return layout


class RowImages:
    """Row images of one layout, cut into columns (not yet converted): run slices, variable values, NULL bits."""

    __slots__ = ("layout", "runs", "vars", "nulls", "_matrices", "_null_words")

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.runs: list[list[bytes]] = [[] for _ in layout.run_sizes]  # per run: slices of whole images
        self.vars: list[list[bytes | None]] = [[] for _ in range(layout.n_vars)]
        self.nulls: list[int] = []  # per image: its NULL bits (bit i: column i); its length is the count
        self._matrices: dict[int, np.ndarray] = {}
        self._null_words: Any = None

    def __len__(self) -> int:
        return len(self.nulls)

    @property
    def group(self) -> Layout:
        return self.layout

    @staticmethod
    def concat(sets: Sequence["RowImages"]) -> "RowImages":
        """One set of the images of ``sets`` (all of one layout), in order."""
        out = RowImages(sets[0].layout)
        for s in sets:
            assert s.layout is out.layout
            for mine, theirs in zip(out.runs, s.runs):
                mine.extend(theirs)
            for mine_v, theirs_v in zip(out.vars, s.vars):
                mine_v.extend(theirs_v)
            out.nulls.extend(s.nulls)
        return out

    # -- converting -----------------------------------------------------------------------------
    def arrays(self, columns: Sequence[MySqlColumn]) -> list[pa.Array]:
        """Each of ``columns`` (freshview's description of the table) as an Arrow array of its type.

        KeyError: the images have no such column; ``ImageError``: a value does not convert."""
        out = []
        for col in columns:
            i = self.layout.position(col.name)
            try:
                out.append(self._array(i, col))
            except ImageError:
                raise
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, OverflowError, TypeError) as error:
                raise ImageError(col.name, str(error)) from None
        return out

    def _matrix(self, run: int) -> np.ndarray:
        m = self._matrices.get(run)
        if m is None:
            data = b"".join(self.runs[run])
            m = np.frombuffer(data, np.uint8).reshape(len(self.nulls), self.layout.run_sizes[run])
            self._matrices[run] = m
        return m

    def _nulls_of(self, i: int) -> np.ndarray | None:
        """Where column ``i`` is NULL (bool per image), or None when no image has a NULL."""
        if self._null_words is None:
            self._null_words = False
            if any(self.nulls):
                if self.layout.null_mask < 1 << 64:
                    self._null_words = np.array(self.nulls, np.uint64)
                else:
                    self._null_words = self.nulls
        words = self._null_words
        if words is False:
            return None
        if isinstance(words, np.ndarray):
            return ((words >> np.uint64(i)) & np.uint64(1)).astype(bool)
        return np.array([(w >> i) & 1 for w in words], bool)

    def _array(self, i: int, col: MySqlColumn) -> pa.Array:
        bc = self.layout.columns[i]
        nulls = self._nulls_of(i)
        if bc.width:
            run, offset = self.layout.places[i]
            m = self._matrix(run)[:, offset:offset + bc.width]
            arr = _FIXED[bc.type](m, bc, nulls, col)
        else:
            arr = _text(self.vars[self.layout.places[i][0]], bc)
        return _to_target(arr, bc, col)


def decode(layout: Layout, body: bytes | memoryview, kind: str) -> tuple[RowImages | None, RowImages | None]:
    """The row images in ``body`` (the rows part of one rows event): (old images, new images).

    An insert has new images only, a delete old ones only, an update both (its images alternate
    before, after).  ValueError: the body does not cut into whole images of this layout."""
    update = kind == "update"
    first = RowImages(layout)
    targets = [first, RowImages(layout)] if update else [first]
    body = bytes(body)
    if not (layout.fixed and _cut_fixed(layout, body, targets)):
        _cut(layout, body, targets)
    if update:
        if len(targets[0]) != len(targets[1]):
            raise ValueError("an update rows event with an odd number of row images")
        return targets[0], targets[1]
    return (first, None) if kind == "delete" else (None, first)


def _cut_fixed(layout: Layout, body: bytes, targets: list[RowImages]) -> bool:
    """All columns fixed-width: if no image has a NULL, every image is ``stride`` bytes and the body is
    a matrix; False (nothing done) when some image has a NULL (then the sizes differ)."""
    stride, nb = layout.stride, layout.null_bytes
    if not body or len(body) % stride:
        return False
    a = np.frombuffer(body, np.uint8).reshape(-1, stride)
    if (a[:, :nb] & layout._mask_row).any():
        return False  # (padding bits of the bitmap may be set: only the columns' bits count)
    k = len(targets)
    if a.shape[0] % k:
        return False
    for j, t in enumerate(targets):
        part = a[j::k, nb:] if k > 1 else a[:, nb:]
        t.runs[0].append(part.tobytes())
        t.nulls.extend([0] * part.shape[0])
    return True


def _cut(layout: Layout, body: bytes, targets: list[RowImages]) -> None:
    """Cut image after image (any layout, NULLs or not)."""
    nb, mask = layout.null_bytes, layout.null_mask
    from_bytes = int.from_bytes
    plans = []
    for t in targets:  # per target: the segments with the lists they append to
        plans.append([(is_run, size, (t.runs[slot] if is_run else t.vars[slot]).append)
                      for is_run, size, slot in layout.segments])
    k = len(targets)
    pos, end, image = 0, len(body), 0
    while pos < end:
        target = targets[image % k]
        plan = plans[image % k]
        image += 1
        bits = from_bytes(body[pos:pos + nb], "little") & mask
        pos += nb
        target.nulls.append(bits)
        if bits:
            pos = _cut_with_nulls(layout, body, pos, bits, target)
            continue
        for is_run, size, append in plan:
            if is_run:
                append(body[pos:pos + size])
                pos += size
            else:
                if size == 1:
                    n = body[pos]
                elif size == 2:
                    n = body[pos] | body[pos + 1] << 8
                else:
                    n = from_bytes(body[pos:pos + size], "little")
                pos += size
                append(body[pos:pos + n])
                pos += n
    if pos != end:
        raise ValueError(f"rows event body of {end} bytes ends inside a row image (at {pos})")


def _cut_with_nulls(layout: Layout, body: bytes, pos: int, bits: int, target: RowImages) -> int:
    pieces: list[bytes] = []
    for i, (fixed, size, slot, zeros, last) in enumerate(layout._steps):
        null = bits >> i & 1
        if fixed:
            if null:
                pieces.append(zeros)
            else:
                pieces.append(body[pos:pos + size])
                pos += size
            if last:
                target.runs[slot].append(b"".join(pieces))
                pieces = []
        elif null:
            target.vars[slot].append(None)
        else:
            n = int.from_bytes(body[pos:pos + size], "little")
            pos += size
            target.vars[slot].append(body[pos:pos + n])
            pos += n
    if pos > len(body):
        raise ValueError("rows event body ends inside a row image")
    return pos


# -- converting one column: (images, width) bytes -> Arrow ------------------------------------------
def _le(m: np.ndarray, signed: bool = False) -> np.ndarray:
    """Little-endian integers of the matrix's rows (as int64, or uint64 for unsigned 8-byte values)."""
    w = m.shape[1]
    if w in (1, 2, 4, 8):
        v = np.ascontiguousarray(m).view(f"<{'i' if signed else 'u'}{w}").ravel()
        return v.astype(np.int64) if w < 8 or signed else v
    wide = np.zeros((m.shape[0], 8), np.uint8)
    wide[:, :w] = m
    v = wide.view("<i8").ravel()
    if signed:
        v = (v << (64 - 8 * w)) >> (64 - 8 * w)  # (arithmetic shift: the sign bit spread)
    return v


def _be(m: np.ndarray) -> np.ndarray:
    """Big-endian unsigned integers (up to 8 bytes) of the matrix's rows, as int64 (uint64 for 8 bytes)."""
    w = m.shape[1]
    if w in (1, 2, 4, 8):
        v = np.ascontiguousarray(m).view(f">u{w}").ravel()
        return v.astype(np.uint64 if w == 8 else np.int64)
    wide = np.zeros((m.shape[0], 8), np.uint8)
    wide[:, 8 - w:] = m
    return wide.view(">u8").ravel().astype(np.int64)


def _with_nulls(values: np.ndarray, nulls: np.ndarray | None, arrow_type: pa.DataType) -> pa.Array:
    return pa.array(values, arrow_type, mask=nulls)


def _validity(nulls: np.ndarray | None) -> pa.Buffer | None:
    if nulls is None or not nulls.any():
        return None
    return pa.py_buffer(np.packbits(~nulls, bitorder="little"))


_NUMPY_INTS = {pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64}


def _int(m, bc: BinlogColumn, nulls, col) -> pa.Array:
    v = _le(m, signed=not bc.unsigned)
    target = col.type.arrow
    dtype = _NUMPY_INTS.get(target)
    if dtype is not None and v.size:  # to the column's integer type here (cheaper than an Arrow cast)
        info = np.iinfo(dtype)
        lo, hi = v.min(), v.max()
        if (v.dtype == np.uint64 and hi > info.max) or (v.dtype != np.uint64 and (lo < info.min or hi > info.max)):
            raise ImageError(bc.name, f"a value beyond {target} ({int(lo)}..{int(hi)})")
        return pa.array(v.astype(dtype), target, mask=nulls)
    return _with_nulls(v, nulls, pa.uint64() if v.dtype == np.uint64 else pa.int64())


def _float(m, bc: BinlogColumn, nulls, col) -> pa.Array:
    v = np.ascontiguousarray(m).view("<f4" if bc.type == FLOAT else "<f8").ravel()
    return _with_nulls(v, nulls, pa.float32() if bc.type == FLOAT else pa.float64())


def _year(m, bc, nulls, col) -> pa.Array:
    v = m[:, 0].astype(np.int16)
    return _with_nulls(np.where(v == 0, 0, v + 1900).astype(np.int16), nulls, pa.int16())


def _bit(m, bc: BinlogColumn, nulls, col) -> pa.Array:
    v = _be(m).astype(np.int64) if bc.width < 8 else _be(m)
    if bc.bits < 64:
        v = v & ((1 << bc.bits) - 1)
    return _with_nulls(v, nulls, pa.uint64() if v.dtype == np.uint64 else pa.int64())


def _enum(m, bc: BinlogColumn, nulls, col) -> pa.Array:
    index = _le(m)
    if index.size and index.max() > len(bc.members):
        raise ImageError(bc.name, f"ENUM index {int(index.max())} beyond its {len(bc.members)} members")
    return pa.array(("",) + bc.members, pa.string()).take(pa.array(index, pa.int64(), mask=nulls))


def _set(m, bc: BinlogColumn, nulls, col) -> pa.Array:
    masks = _le(m)
    uniq, inverse = np.unique(masks, return_inverse=True)
    texts = [",".join(name for b, name in enumerate(bc.members) if int(u) >> b & 1) for u in uniq]
    return pa.array(texts, pa.string()).take(pa.array(inverse.ravel(), pa.int64(), mask=nulls))


def _decimal(m, bc: BinlogColumn, nulls, col) -> pa.Array:
    """Packed DECIMAL: big-endian groups of 9 digits in 4 bytes (fewer bytes for the leftover digits
    before and after the point); the sign in the first byte's high bit (set: positive), negatives
    stored with every bit inverted."""
    p, s = bc.precision, bc.scale
    if p > 38:
        raise ImageError(bc.name, f"DECIMAL({p},{s}) is wider than 38 digits")
    n = m.shape[0]
    negative = (m[:, 0] & 0x80) == 0
    x = m ^ np.where(negative, np.uint8(0xFF), np.uint8(0))[:, None]
    x[:, 0] ^= 0x80
    if nulls is not None:  # (their bytes are zeros, not a packed value)
        x[nulls] = 0
        negative &= ~nulls
    whole = p - s
    groups = []  # (bytes, digits)
    if whole % 9:
        groups.append((_DIG2BYTES[whole % 9], whole % 9))
    groups += [(4, 9)] * (whole // 9) + [(4, 9)] * (s // 9)
    if s % 9:
        groups.append((_DIG2BYTES[s % 9], s % 9))
    at = 0
    if p <= 18:
        acc = np.zeros(n, np.int64)
        for size, digits in groups:
            acc = acc * (10 ** digits) + _be(x[:, at:at + size])
            at += size
        unscaled = np.where(negative, -acc, acc)
        words = np.empty((n, 2), np.int64)
        words[:, 0] = unscaled
        words[:, 1] = unscaled >> 63
        data = words.tobytes()
    else:
        acc = np.zeros(n, object)
        for size, digits in groups:
            acc = acc * (10 ** digits) + _be(x[:, at:at + size]).astype(object)
            at += size
        data = b"".join((-int(v) if neg else int(v)).to_bytes(16, "little", signed=True)
                        for v, neg in zip(acc, negative))
    return pa.Array.from_buffers(pa.decimal128(max(p, 1), s), n, [_validity(nulls), pa.py_buffer(data)])


def _days(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's days_from_civil)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


_MONTH_DAYS = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)


def _real_date(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    last = _MONTH_DAYS[np.clip(month - 1, 0, 11)] + ((month == 2) & leap)
    return (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= last)


def _date(m, bc: BinlogColumn, nulls, col) -> pa.Array:
    """3 bytes, little-endian: day (5 bits), month (4), year (15). A zero date, or one with a zero
    part, is NULL; a date the calendar lacks (ALLOW_INVALID_DATES) cannot be held: an error."""
    v = _le(m)
    day, month, year = v & 31, (v >> 5) & 15, v >> 9
    zero = (year == 0) | (month == 0) | (day == 0)
    bad = ~zero & ~_real_date(year, month, day)
    if nulls is not None:
        bad &= ~nulls
    if bad.any():
        j = int(np.argmax(bad))
        raise ImageError(bc.name, f"invalid date {int(year[j]):04d}-{int(month[j]):02d}-{int(day[j]):02d}")
    nulls = zero if nulls is None else (nulls | zero)
    return pa.array(_days(year, month, day).astype(np.int32), pa.date32(), mask=nulls)


def _fraction(m: np.ndarray, base: int) -> np.ndarray:
    """Microseconds of the fractional part after the ``base`` bytes (1–3 bytes: 2, 4 or 6 digits)."""
    extra = m.shape[1] - base
    if not extra:
        return np.zeros(m.shape[0], np.int64)
    return _be(m[:, base:]) * 10 ** (6 - 2 * extra)


def _datetime2(m, bc: BinlogColumn, nulls, col) -> pa.Array:
    """5 bytes, big-endian: sign (1 bit), year*13+month (17), day (5), hour (5), minute (6), second (6);
    then the fraction. As the library: a value ``datetime`` refuses (zero dates) is NULL."""
    v = _be(m[:, :5])
    ym = (v >> 22) & 0x1FFFF
    year, month = ym // 13, ym % 13
    day, hour, minute, second = (v >> 17) & 31, (v >> 12) & 31, (v >> 6) & 63, v & 63
    ok = _real_date(year, month, day) & (hour < 24) & (minute < 60) & (second < 60)
    seconds = _days(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    micros = np.where(ok, seconds * 1_000_000 + _fraction(m, 5), 0)
    nulls = ~ok if nulls is None else (nulls | ~ok)
    return pa.array(micros, pa.timestamp("us"), mask=nulls)


def _timestamp2(m, bc: BinlogColumn, nulls, col) -> pa.Array:
    """4 bytes, big-endian: seconds since the epoch (UTC); then the fraction. Zero (the zero
    TIMESTAMP) is NULL."""
    micros = _be(m[:, :4]) * 1_000_000 + _fraction(m, 4)
    zero = micros == 0
    nulls = zero if nulls is None else (nulls | zero)
    return pa.array(micros, pa.timestamp("us", tz="UTC"), mask=nulls)


def _time2(m, bc: BinlogColumn, nulls, col) -> pa.Array:
    """3 + fraction bytes, big-endian, one number offset by 0x800000 << fraction bits: its magnitude
    is hour (10 bits), minute (6), second (6), fraction; negative durations are negated whole."""
    extra = m.shape[1] - 3
    packed = _be(m) - (0x800000 << (8 * extra))
    negative = packed < 0
    a = np.abs(packed)
    hms, frac = a >> (8 * extra), a & ((1 << (8 * extra)) - 1)
    micros = (((hms >> 12) & 0x3FF) * 3600 + ((hms >> 6) & 63) * 60 + (hms & 63)) * 1_000_000
    micros = micros + (frac * 10 ** (6 - 2 * extra) if extra else 0)
    micros = np.where(negative, -micros, micros)
    mdn = np.zeros(m.shape[0], np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")]))
    mdn["nanos"] = micros * 1000
    return pa.Array.from_buffers(pa.month_day_nano_interval(), m.shape[0],
                                 [_validity(nulls), pa.py_buffer(mdn.tobytes())])


_FIXED = {TINY: _int, SHORT: _int, INT24: _int, LONG: _int, LONGLONG: _int, FLOAT: _float, DOUBLE: _float,
          YEAR: _year, BIT: _bit, ENUM: _enum, SET: _set, NEWDECIMAL: _decimal, DATE: _date,
          DATETIME2: _datetime2, TIMESTAMP2: _timestamp2, TIME2: _time2}


def _text(values: list, bc: BinlogColumn) -> pa.Array:
    encoding = bc.encoding
    if encoding is None or encoding.lower() in _UTF8:
        return pa.array(values, pa.binary()).cast(pa.string())  # (the cast checks the UTF-8)
    return pa.array([None if v is None else v.decode(encoding) for v in values], pa.string())


def _family(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    return str(t)


def _to_target(arr: pa.Array, bc: BinlogColumn, col: MySqlColumn) -> pa.Array:
    """The column's Arrow type (a safe cast: values that do not fit raise); a different kind of type
    (the table was altered since it was described) is refused."""
    target = col.type.arrow
    if arr.type == target:
        return arr
    if _family(arr.type) != _family(target) and not (
            pa.types.is_timestamp(arr.type) and pa.types.is_timestamp(target) and arr.type.tz == target.tz):
        raise ImageError(col.name, f"the binlog's column type ({arr.type}) is not the described one "
                                   f"({target}): the table was altered")
    return arr.cast(target)


# -- the library's decoding, for tables this module does not decode ------------------------------------
_EMPTY_SET = "empty set"  # mysql-replication's NONE_SOURCE.EMPTY_SET


class LibraryImages:
    """Row images as python-mysql-replication decodes them: (values, NULL reasons) dicts per image."""

    __slots__ = ("images",)
    group = "library"

    def __init__(self, images: Iterable[tuple[dict, dict]]) -> None:
        self.images = list(images)

    def __len__(self) -> int:
        return len(self.images)

    @staticmethod
    def concat(sets: Sequence["LibraryImages"]) -> "LibraryImages":
        return LibraryImages(i for s in sets for i in s.images)

    def arrays(self, columns: Sequence[MySqlColumn]) -> list[pa.Array]:
        out = []
        for col in columns:
            name = col.name
            values = [v[name] for v, _ in self.images]  # KeyError: no such column
            empty = ()
            if col.data_type == "set":
                empty = [i for i, (v, n) in enumerate(self.images) if v[name] is None and n.get(name) == _EMPTY_SET]
            try:
                out.append(to_arrow(values, col, empty))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as error:
                raise ImageError(name, str(error)) from None
        return out


def library_images(kind: str, rows: Sequence[dict]) -> tuple[LibraryImages | None, LibraryImages | None]:
    """(old images, new images) of a rows event's library row dicts (``event.rows``)."""
    if kind == "update":
        return (LibraryImages((r["before_values"], r.get("before_none_sources") or {}) for r in rows),
                LibraryImages((r["after_values"], r.get("after_none_sources") or {}) for r in rows))
    images = LibraryImages((r["values"], r.get("none_sources") or {}) for r in rows)
    return (images, None) if kind == "delete" else (None, images)
