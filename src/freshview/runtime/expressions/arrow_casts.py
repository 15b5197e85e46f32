"""CAST and comparisons across types over Arrow, as PostgreSQL (and the Spark lowering) do them:
one function per (source group, target group) in ``_CASTS``; text input accepts exactly
``pgtext``'s spellings; ``_compare`` compares in the operands' common type.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.errors import ExecutionError
from freshview.plan.typing import common_type
from freshview.runtime.expressions import pgtext
from freshview.runtime.expressions.arrow_values import (
    _CMP,
    _OVERFLOW,
    Datum,
    _broadcast,
    _checked_int,
    _days_from_civil,
    _days_in_month,
    _decimal_text,
    _decimal_to_float,
    _double_to_decimal,
    _fail,
    _float_compare,
    _float_text,
    _from_np,
    _int_range_error,
    _is_scalar,
    _np,
    _null,
    _to_decimal,
    _valid_mask,
)
from freshview.schema import MAX_DECIMAL_PRECISION, SqlType


def _compare(op: str, a: Datum, b: Datum, ta: SqlType, tb: SqlType, n: int) -> Datum:
    if ta.kind == "null" or tb.kind == "null":
        return _null(pa.bool_())
    if ta != tb:  # as the Spark lowering: both sides cast to the common type first
        common = common_type(ta, tb) or ta
        convert = lambda d, t: d if t == common else _CASTS[(_group(t), _group(common))](d, t, common, n)  # noqa: E731
        a, b = convert(a, ta), convert(b, tb)
    if pa.types.is_floating(a.type):
        return _float_compare(op, a, b)
    return _CMP[op](a, b)


# ---------------------------------------------------------------------------
# casts
# ---------------------------------------------------------------------------

def _group(t: SqlType) -> str:
    if t.is_integer:
        return "int"
    if t.is_float:
        return "float"
    return t.kind


def _cast_int_int(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return _checked_int(lambda x: x.cast(dst.arrow), dst.kind, v)


def _cast_to_numeric(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    p, s = dst.decimal_precision_scale
    return _to_decimal(v, p, s)


def _cast_int_float(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return pc.cast(v, dst.arrow, safe=False)


def _cast_int_bool(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return pc.not_equal(v, pa.scalar(0, v.type))


def _cast_numeric_int(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    try:
        rounded = _to_decimal(v, MAX_DECIMAL_PRECISION, 0)  # half away from zero, as PostgreSQL
    except ExecutionError:  # (not an integer's range anyway)
        raise _int_range_error(dst.kind) from None
    return _checked_int(lambda x: x.cast(dst.arrow), dst.kind, rounded)


def _cast_numeric_float(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return _decimal_to_float(v, n, dst.arrow)


def _cast_float_int(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    rounded = pc.round(v.cast(pa.float64()), 0, round_mode="half_to_even")  # rint, as PostgreSQL
    return _checked_int(lambda x: x.cast(dst.arrow), dst.kind, rounded)


def _cast_float_numeric(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    p, s = dst.decimal_precision_scale
    return _double_to_decimal(v.cast(pa.float64()), p, s)


def _cast_float_float(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return pc.cast(v, dst.arrow, safe=False)


def _cast_numeric_numeric(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    p, s = dst.decimal_precision_scale
    return _to_decimal(v, p, s)


def _cast_bool_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return pc.if_else(v, "true", "false")


def _cast_bool_int(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return v.cast(dst.arrow)


def _cast_to_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return v.cast(pa.string())


def _cast_numeric_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return _decimal_text(v)


def _cast_float_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    if _is_scalar(v):
        return _float_text(_broadcast(v, 1), src.kind)[0]
    return _float_text(v, src.kind)


def _cast_date_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    if _is_scalar(v):
        return _calendar_text(_broadcast(v, 1).cast(pa.string()))[0]
    return _calendar_text(v.cast(pa.string()))


def _calendar_text(text: pa.Array) -> pa.Array:
    """ISO text of dates/timestamps spelled as PostgreSQL: no ``+`` before years past 9999, and years
    before 1 as ``YYYY-MM-DD… BC`` (ISO year 0 is 1 BC, -1 is 2 BC)."""
    text = pc.replace_substring_regex(text, pattern=r"^\+", replacement="")
    bc = pc.fill_null(pc.match_substring_regex(text, r"^(-|0000-)"), False)
    if not pc.any(bc).as_py():
        return text
    import re as _re

    def era(s: str) -> str:  # (BC rows only: rare, so Python per row)
        m = _re.fullmatch(r"(-?\d+)(-.*)", s, _re.S)
        return f"{1 - int(m.group(1)):04d}{m.group(2)} BC"
    bc_rows = bc.to_pylist()
    return pa.array([era(x) if b else x for x, b in zip(text.to_pylist(), bc_rows)], pa.string())


def _cast_timestamp_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    if _is_scalar(v):
        return _cast_timestamp_text(_broadcast(v, 1), src, dst, 1)[0]
    text = v.cast(pa.string())
    text = pc.replace_substring_regex(text, pattern=r"Z$", replacement="")
    text = pc.replace_substring_regex(text, pattern=r"\.0+$", replacement="")
    text = pc.replace_substring_regex(text, pattern=r"(\.[0-9]*[1-9])0+$", replacement=r"\1")
    if src.kind == "timestamptz":
        text = pc.binary_join_element_wise(text, "+00", "")
    return _calendar_text(text)


def _cast_temporal(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    if dst.kind == "date":
        return pc.cast(pc.floor_temporal(v, unit="day"), pa.date32(), safe=False) if src.kind != "date" else v
    if src.kind == "date":
        return v.cast(pa.timestamp("us")).cast(dst.arrow)
    return v.cast(pa.int64()).cast(dst.arrow)  # timestamp <-> timestamptz: the same instant in UTC


def _cast_identity(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return v if v.type == dst.arrow else v.cast(dst.arrow)


def _text_rows_failing(v: Datum, pattern: str) -> Datum:
    return pc.invert(pc.match_substring_regex(v, pattern))


def _first_bad(v: Datum, bad: Datum) -> str | None:
    if _is_scalar(bad):
        return v.as_py() if bad.is_valid and bad.as_py() else None
    hits = pc.fill_null(bad, False)
    if not pc.any(hits).as_py():
        return None
    return v.filter(hits)[0].as_py()


def _check_grammar(v: Datum, pattern: str, kind: str) -> None:
    bad = _first_bad(v, _text_rows_failing(v, pattern))
    if bad is not None:
        raise _fail(pgtext.invalid_input(kind, bad))


def _strip(v: Datum) -> Datum:
    return pc.utf8_trim(v, characters=pgtext.WHITESPACE_CHARS)


def _cast_text_int(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    try:  # Arrow reads plain [-]digits only: anything it reads, PostgreSQL reads the same
        return v.cast(dst.arrow)
    except pa.ArrowInvalid:
        pass
    _check_grammar(v, pgtext.INTEGER, dst.kind)
    digits = pc.replace_substring_regex(_strip(v), pattern=r"^\+", replacement="")
    try:
        wide = digits.cast(pa.decimal128(38, 0))
        return wide.cast(dst.arrow)
    except pa.ArrowInvalid:
        # name the offending value, as PostgreSQL does (error path only)
        lo, hi = {"int2": (-2**15, 2**15 - 1), "int4": (-2**31, 2**31 - 1), "int8": (-2**63, 2**63 - 1)}[dst.kind]
        values = [v.as_py()] if _is_scalar(v) else v.to_pylist()
        for text in values:
            if text is not None and not lo <= int(text.strip(pgtext.WHITESPACE_CHARS)) <= hi:
                raise _fail(f'value "{text}" is out of range for type {pgtext.TYPE_NAMES[dst.kind]}') from None
        raise  # pragma: no cover


def _cast_text_numeric(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    _check_grammar(v, pgtext.NUMERIC, "numeric")
    p, s = dst.decimal_precision_scale
    try:
        wide = pc.cast(_strip(v), pa.decimal256(76, 38), safe=False)
    except pa.ArrowInvalid:
        raise _fail(_OVERFLOW) from None
    return _to_decimal(wide, p, s)


def _cast_text_float(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    _check_grammar(v, pgtext.FLOAT, dst.kind)
    out = pc.cast(_strip(v), dst.arrow)
    overflow = pc.and_(pc.invert(pc.is_finite(out)), pc.invert(pc.is_nan(out)))
    overflow = pc.and_(overflow, _text_rows_failing(v, pgtext.FLOAT_INFINITY))
    bad = _first_bad(v, overflow)
    if bad is not None:
        raise _fail(f'"{bad.strip(pgtext.WHITESPACE_CHARS)}" is out of range for type {pgtext.TYPE_NAMES[dst.kind]}')
    return out


def _cast_text_bool(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    word = pc.utf8_lower(_strip(v))
    true = pc.is_in(word, value_set=pa.array(pgtext.BOOL_TRUE))
    false = pc.is_in(word, value_set=pa.array(pgtext.BOOL_FALSE))
    bad = _first_bad(v, pc.and_(pc.invert(true), pc.invert(false)))
    if bad is not None:
        raise _fail(pgtext.invalid_input("bool", bad))
    return pc.if_else(pc.is_null(v), _null(pa.bool_()), true)


def _cast_text_temporal(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    scalar = _is_scalar(v)
    arr = _broadcast(v, 1) if scalar else v
    pattern = pgtext.DATE if dst.kind == "date" else pgtext.TIMESTAMP
    _check_grammar(arr, pattern, dst.kind)
    names = ["y", "mo", "d", "h", "mi", "s", "f", "z"][: 3 if dst.kind == "date" else 8]
    named = pattern
    for name in names:  # name the capture groups for extract_regex
        named = re.sub(r"(?<!\\)\((?!\?)", f"(?P<{name}>", named, count=1)
    parts = pc.extract_regex(arr, named)
    m = len(arr)

    def field(name: str, default: int = 0) -> np.ndarray:
        col = pc.struct_field(parts, name)
        col = pc.if_else(pc.equal(col, ""), _null(pa.string()), col) if pa.types.is_string(col.type) else col
        return pc.fill_null(col.cast(pa.int64()), default).to_numpy(zero_copy_only=False)

    y, mo, d = field("y", 1970), field("mo", 1), field("d", 1)
    valid = _valid_mask(arr, m)
    bad = valid & ((mo < 1) | (mo > 12) | (d < 1) | (d > _days_in_month(y, mo)))
    micros = _days_from_civil(y, mo, d) * 86_400_000_000
    if dst.kind != "date":
        h, mi, s = field("h"), field("mi"), field("s")
        frac = pc.utf8_rpad(pc.fill_null(pc.struct_field(parts, "f"), ""), width=6, padding="0")
        f = frac.cast(pa.int64()).to_numpy(zero_copy_only=False)
        bad |= valid & ((h > 23) | (mi > 59) | (s > 59))
        micros = micros + ((h * 60 + mi) * 60 + s) * 1_000_000 + f
        if dst.kind == "timestamptz":
            zone = pc.fill_null(pc.struct_field(parts, "z"), "")
            digits = pc.utf8_rpad(pc.replace_substring_regex(zone, pattern=r"[^0-9]", replacement=""),
                                  width=4, padding="0")
            zh = _np(pc.utf8_slice_codeunits(digits, 0, 2).cast(pa.int64()), m, 0)
            zm = _np(pc.utf8_slice_codeunits(digits, 2, 4).cast(pa.int64()), m, 0)
            sign = np.where(_np(pc.starts_with(zone, pattern="-"), m, False), -1, 1)
            offset = sign * (zh * 60 + zm) * 60_000_000
            micros = micros - offset
    if bad.any():
        raise _fail(f'date/time field value out of range: "{arr.filter(pa.array(bad))[0].as_py()}"')
    if dst.kind == "date":
        out = _from_np((micros // 86_400_000_000).astype(np.int32), valid, pa.int32()).cast(pa.date32())
    else:
        out = _from_np(micros, valid, pa.int64()).cast(dst.arrow)
    return out[0] if scalar else out


_CASTS: dict[tuple[str, str], Callable[[Datum, SqlType, SqlType, int], Datum]] = {
    ("int", "int"): _cast_int_int,
    ("int", "numeric"): _cast_to_numeric,
    ("int", "float"): _cast_int_float,
    ("int", "text"): _cast_to_text,
    ("int", "bool"): _cast_int_bool,
    ("numeric", "int"): _cast_numeric_int,
    ("numeric", "numeric"): _cast_numeric_numeric,
    ("numeric", "float"): _cast_numeric_float,
    ("numeric", "text"): _cast_numeric_text,
    ("float", "int"): _cast_float_int,
    ("float", "numeric"): _cast_float_numeric,
    ("float", "float"): _cast_float_float,
    ("float", "text"): _cast_float_text,
    ("bool", "text"): _cast_bool_text,
    ("bool", "int"): _cast_bool_int,
    ("bool", "bool"): _cast_identity,
    ("text", "text"): _cast_identity,
    ("text", "int"): _cast_text_int,
    ("text", "numeric"): _cast_text_numeric,
    ("text", "float"): _cast_text_float,
    ("text", "bool"): _cast_text_bool,
    ("text", "date"): _cast_text_temporal,
    ("text", "timestamp"): _cast_text_temporal,
    ("text", "timestamptz"): _cast_text_temporal,
    ("date", "text"): _cast_date_text,
    ("timestamp", "text"): _cast_timestamp_text,
    ("timestamptz", "text"): _cast_timestamp_text,
    **{(a, b): _cast_temporal for a in ("date", "timestamp", "timestamptz")
       for b in ("date", "timestamp", "timestamptz")},
    ("interval", "interval"): _cast_identity,
}
