"""Exact decimal arithmetic on Arrow decimal256 integers (no Python per value): a number scaled to an
integer, read back at a scale, and division rounded half away from zero.  Shared by the aggregates'
accumulators (AVG, SUM's rescale) and ``linear_aggs`` (exact variances).
"""

from __future__ import annotations

import decimal

import pyarrow as pa
import pyarrow.compute as pc

MAX_DECIMAL256 = 76


def array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col


def as_integer(x: pa.Array, scale: int) -> pa.Array:
    """``x · 10^scale`` as a decimal256 of scale 0: exact for integers and decimals of scale <= ``scale``."""
    if pa.types.is_decimal(x.type):
        digits, own = x.type.precision, x.type.scale
    elif pa.types.is_integer(x.type):
        digits, own = 19, 0
    else:
        raise TypeError(f"not an exact number type: {x.type}")
    if own > scale:
        raise ValueError(f"{x.type} has more than {scale} fractional digits")
    precision = digits - own + scale
    if precision > MAX_DECIMAL256:
        raise NotImplementedError(f"{x.type} scaled by 10^{scale} exceeds decimal256")
    scaled = array(x.cast(pa.decimal256(max(precision, 1), scale)))
    return _retype(scaled, pa.decimal256(max(precision, 1), 0))


def with_scale(q: pa.Array, scale: int) -> pa.Array:
    """Integer decimal256 ``q`` read as ``q · 10^-scale``."""
    return _retype(array(q), pa.decimal256(MAX_DECIMAL256, scale))


def _retype(x: pa.Array, t: pa.DataType) -> pa.Array:
    """The same 256-bit unscaled integers under another decimal256 type (zero-copy)."""
    return pa.Array.from_buffers(t, len(x), x.buffers(), x.null_count, x.offset)


def div_half_up(num: pa.Array, den: pa.Array) -> pa.Array:
    """``num / den`` rounded to an integer, ties away from zero (integer decimal256 in and out; ``den != 0``).

    Arrow's decimal division gives a quotient ``g`` within one of
    ``floor(|num| / |den|)``; the remainder ``|num| − g·|den|`` corrects it,
    and decides the rounding exactly.
    """
    pn, pd = num.type.precision, den.type.precision
    if pn + pd + 3 > MAX_DECIMAL256:  # the widest intermediate, |num| − g·|den|
        raise NotImplementedError(f"exact division of {pn}-digit by {pd}-digit decimals exceeds decimal256")
    zero = pa.scalar(decimal.Decimal(0), pa.decimal256(1, 0))
    one = pa.scalar(decimal.Decimal(1), pa.decimal256(1, 0))
    negative = pc.xor(pc.less(num, zero), pc.less(den, zero))
    a, d = pc.abs(num), pc.abs(den)
    g_type, r_type = pa.decimal256(pn + 1, 0), pa.decimal256(pd + 1, 0)
    g = pc.divide(a, d).cast(g_type, safe=False)  # truncated or rounded: floor or floor + 1
    r = pc.subtract(a, pc.multiply(g, d)).cast(r_type)  # in (−|den|, |den|)
    below = pc.less(r, zero)
    g = pc.if_else(below, pc.subtract(g, one), g).cast(g_type)
    r = pc.if_else(below, pc.add(r, d), r).cast(r_type)
    above = pc.greater_equal(r, d)
    g = pc.if_else(above, pc.add(g, one), g).cast(g_type)
    r = pc.if_else(above, pc.subtract(r, d), r).cast(r_type)
    g = pc.if_else(pc.greater_equal(pc.add(r, r), d), pc.add(g, one), g).cast(g_type)  # 2r >= |den|: round up
    return pc.if_else(negative, pc.negate(g), g)
