"""PostgreSQL's text functions over Arrow (the in-process executor), the ``text`` family of
``plan.functions``: ``||``, concat, lower, upper, length, substring, trim/ltrim/rtrim, replace, split_part,
strpos, left, right, lpad, rpad, repeat, reverse, initcap, md5, starts_with, octet_length, concat_ws,
regexp_replace.  ``spark`` and ``spark_functions`` lower the same functions for Spark.

Text functions count characters, not bytes (left, right, lpad, rpad, strpos); lpad/rpad cut a longer
string to the length; split_part counts from the end for a negative field and refuses field 0; a negative
substring length raises.  Functions whose pattern argument differs per row (replace, starts_with, trim's
characters, lpad's fill ...) fall back to per-row Python (or one kernel call per distinct pattern) for
those rows; literal patterns, the common case, run as one kernel.
"""

from __future__ import annotations

import hashlib
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.plan.expr import Call
from freshview.runtime.expressions import arrow_values as A

Datum = A.Datum


def op_concat_op(ev, e: Call) -> Datum:  # ||
    args = [A._text(a) for a in (ev.visit(x) for x in e.args)]
    if all(A._is_scalar(a) for a in args):
        return pa.scalar(None if any(not a.is_valid for a in args) else "".join(a.as_py() for a in args))
    return pc.binary_join_element_wise(*args, "", null_handling="emit_null")


def op_concat(ev, e: Call) -> Datum:  # concat(): NULL arguments are skipped
    args = [pc.fill_null(A._text(ev.visit(x)), "") for x in e.args]
    if all(A._is_scalar(a) for a in args):
        return pa.scalar("".join(a.as_py() for a in args))
    return pc.binary_join_element_wise(*args, "", null_handling="emit_null")


def op_lower(ev, e: Call) -> Datum:
    return pc.utf8_lower(A._text(ev.visit(e.args[0])))


def op_upper(ev, e: Call) -> Datum:
    return pc.utf8_upper(A._text(ev.visit(e.args[0])))


def op_length(ev, e: Call) -> Datum:
    return pc.utf8_length(A._text(ev.visit(e.args[0]))).cast(pa.int32())


def op_substring(ev, e: Call) -> Datum:
    vals = ev.strict_args(e.args)
    s, start = A._text(vals[0]), vals[1]
    length = vals[2] if len(vals) == 3 else None
    n = ev.n
    if length is not None:
        neg = pc.and_(pc.less(length, 0), pc.and_(pc.is_valid(s), pc.is_valid(start)))
        if (neg.as_py() if A._is_scalar(neg) else pc.any(neg).as_py()):
            raise A._fail("negative substring length not allowed")
    if A._is_scalar(start) and (length is None or A._is_scalar(length)):
        if not start.is_valid or (length is not None and not length.is_valid):
            return A._null(pa.string())
        st = start.as_py()
        first = max(st, 1) - 1
        if length is None:
            return pc.utf8_slice_codeunits(s, start=first)
        stop = st - 1 + length.as_py()  # PostgreSQL: characters start .. start+length-1, clipped at 1
        if stop <= first:
            return pc.if_else(pc.is_valid(s), "", A._null(pa.string()))
        return pc.utf8_slice_codeunits(s, start=first, stop=stop)
    # per-row start/length
    arr = A._broadcast(s, n, pa.string())
    valid = A._valid_mask(arr, n) & A._valid_mask(start, n)
    st = A._np(start, n, 1).astype(np.int64)
    first = np.maximum(st, 1) - 1
    if length is None:
        count = np.full(n, 2**40, np.int64)
    else:
        valid &= A._valid_mask(length, n)
        count = np.maximum(st - 1 + A._np(length, n, 0).astype(np.int64) - first, 0)
    return A._slice_chars(arr, first, count, valid)


def _trim(ev, e: Call, which: str) -> Datum:
    vals = ev.strict_args(e.args)
    s = A._text(vals[0])
    kernel = {"trim": pc.utf8_trim, "ltrim": pc.utf8_ltrim, "rtrim": pc.utf8_rtrim}[which]
    chars = A._text(vals[1]) if len(vals) == 2 else pa.scalar(" ")
    if A._is_scalar(chars):
        if not chars.is_valid:
            return A._null(pa.string())
        if chars.as_py() == "":
            return s
        if A._is_scalar(s):
            return kernel(pa.array([s.as_py()], pa.string()), characters=chars.as_py())[0]
        return kernel(s, characters=chars.as_py())
    return A._per_pattern(A._broadcast(s, ev.n, pa.string()), chars,
                        lambda v, c: kernel(v, characters=c) if c else v, pa.string())


def op_trim(ev, e: Call) -> Datum:
    return _trim(ev, e, "trim")


def op_ltrim(ev, e: Call) -> Datum:
    return _trim(ev, e, "ltrim")


def op_rtrim(ev, e: Call) -> Datum:
    return _trim(ev, e, "rtrim")


def _texts(ev, e) -> list[Datum]:
    return [A._text(v) if pa.types.is_string(v.type) or pa.types.is_null(v.type) else v
            for v in ev.strict_args(e.args)]


def _literal_args(args: list[Datum]) -> bool:
    return all(A._is_scalar(a) for a in args)


def _null_if_any(out: Datum, args: list[Datum]) -> Datum:
    """NULL where a scalar argument is NULL (kernels given a scalar pattern ignore its validity)."""
    if any(A._is_scalar(a) and not a.is_valid for a in args):
        return A._null(out.type)
    return out


def op_replace(ev, e) -> Datum:
    s, old, new = _texts(ev, e)
    if _literal_args([old, new]):
        if not old.is_valid or not new.is_valid:
            return A._null(pa.string())
        if old.as_py() == "":
            return s
        return A._scalar_out(lambda v: pc.replace_substring(v, pattern=old.as_py(), replacement=new.as_py()), s)
    return A._per_row(lambda a, b, c: a.replace(b, c) if b else a, [s, old, new], ev.n, pa.string())


def _split_part(s: str, delim: str, k: int) -> str:
    if k == 0:
        raise A._fail("field position must not be zero")
    parts = s.split(delim) if delim else [s]
    if s == "" and delim:
        parts = [""]
    idx = k - 1 if k > 0 else len(parts) + k
    return parts[idx] if 0 <= idx < len(parts) else ""


def op_split_part(ev, e) -> Datum:
    s, delim, k = _texts(ev, e)
    n = ev.n
    if A._is_scalar(k) and k.is_valid and k.as_py() == 0 and A._valid_mask(s, n).any() and \
            (not A._is_scalar(delim) or delim.is_valid):
        raise A._fail("field position must not be zero")
    if not _literal_args([delim, k]) or A._is_scalar(s) or not delim.is_valid or not k.is_valid \
            or delim.as_py() == "":
        if not A._is_scalar(k):
            zero = pc.and_(pc.and_(pc.equal(k, 0), pc.is_valid(A._broadcast(s, n))),
                           pc.is_valid(A._broadcast(delim, n)))
            if A._any(zero):
                raise A._fail("field position must not be zero")
        return A._per_row(_split_part, [s, delim, k], n, pa.string())
    index = k.as_py()
    lists = pc.split_pattern(s, pattern=delim.as_py())
    lengths = A._np(pc.list_value_length(lists), n, 0).astype(np.int64)
    idx = np.full(n, index - 1, np.int64) if index > 0 else lengths + index
    inside = (idx >= 0) & (idx < lengths)
    starts = lists.offsets.to_numpy()[:n].astype(np.int64)  # into lists.values (the unsliced child)
    flat = lists.values
    take = np.where(inside, starts + idx, 0)
    picked = flat.take(pa.array(take)) if len(flat) else pa.array([""] * n)
    out = pc.if_else(pa.array(inside), picked, "")
    return pc.if_else(pc.is_valid(s), out, A._null(pa.string())) if s.null_count else out


def _char_index(s: pa.Array, byte_pos: np.ndarray) -> np.ndarray:
    """0-based character index of byte offset ``byte_pos`` in each row of a UTF-8 array."""
    offsets, data = A._string_view(s)
    starts = np.flatnonzero((data & 0xC0) != 0x80)
    row = offsets[:-1].astype(np.int64)
    return np.searchsorted(starts, row + byte_pos) - np.searchsorted(starts, row)


def op_strpos(ev, e) -> Datum:
    s, sub = _texts(ev, e)
    n = ev.n
    if not _literal_args([sub]) or A._is_scalar(s):
        return A._per_row(lambda a, b: a.find(b) + 1, [s, sub], n, pa.int32())
    if not sub.is_valid:
        return A._null(pa.int32())
    found = A._np(pc.find_substring(s, pattern=sub.as_py()), n, -1).astype(np.int64)
    chars = _char_index(s, np.maximum(found, 0))
    out = np.where(found >= 0, chars + 1, 0).astype(np.int32)
    return A._from_np(out, A._valid_mask(s, n), pa.int32())


def _lengths(s: Datum, n: int) -> np.ndarray:
    return A._np(pc.utf8_length(A._broadcast(s, n, pa.string())), n, 0).astype(np.int64)


def _left_right(ev, e, left: bool) -> Datum:
    s, k = ev.strict_args(e.args)
    scalar = _literal_args([s, k])
    n = 1 if scalar else ev.n
    arr = A._broadcast(s, n, pa.string())
    valid = A._valid_mask(arr, n) & A._valid_mask(k, n)
    length = _lengths(arr, n)
    kk = A._np(k, n, 0).astype(np.int64)
    if left:
        first = np.zeros(n, np.int64)
        count = np.where(kk >= 0, kk, np.maximum(length + kk, 0))
    else:
        first = np.where(kk >= 0, np.maximum(length - kk, 0), np.minimum(-kk, length))
        count = length - first
    out = A._slice_chars(arr, first, count, valid)
    return out[0] if scalar else out


def op_left(ev, e) -> Datum:
    return _left_right(ev, e, True)


def op_right(ev, e) -> Datum:
    return _left_right(ev, e, False)


def _pad(s: str, length: int, fill: str, left: bool) -> str:
    if length <= 0:
        return ""
    if len(s) >= length or fill == "":
        return s[:length]
    k = length - len(s)
    pad = (fill * (k // len(fill) + 1))[:k]
    return pad + s if left else s + pad


def _pad_op(ev, e, left: bool) -> Datum:
    s, k, fill = _texts(ev, e)
    n = ev.n
    if _literal_args([s, k, fill]) or not _literal_args([fill]):
        return A._per_row(lambda a, b, c: _pad(a, b, c, left), [s, k, fill], n, pa.string())
    if not fill.is_valid:
        return A._null(pa.string())
    f = fill.as_py()
    arr = A._broadcast(s, n, pa.string())
    valid = A._valid_mask(arr, n) & A._valid_mask(k, n)
    target = np.maximum(A._np(k, n, 0).astype(np.int64), 0)
    length = _lengths(arr, n)
    kept = A._slice_chars(arr, np.zeros(n, np.int64), np.minimum(length, target), valid)
    if f == "":
        return kept
    missing = np.maximum(target - length, 0)
    reps = missing // len(f) + 1
    pad = pc.binary_repeat(pa.scalar(f), pa.array(np.where(missing > 0, reps, 0)))
    pad = A._slice_chars(pad, np.zeros(n, np.int64), missing, np.ones(n, bool))
    parts = (pad, kept) if left else (kept, pad)
    return pc.binary_join_element_wise(*parts, "")


def op_lpad(ev, e) -> Datum:
    return _pad_op(ev, e, True)


def op_rpad(ev, e) -> Datum:
    return _pad_op(ev, e, False)


def op_repeat(ev, e) -> Datum:
    s, k = ev.strict_args(e.args)
    times = pc.max_element_wise(A._as_type(k, pa.int64()), pa.scalar(0, pa.int64()), skip_nulls=False)
    return A._scalar_out(lambda a, b: pc.binary_repeat(a, b), A._text(s), times)


def op_reverse(ev, e) -> Datum:
    (s,) = ev.strict_args(e.args)
    return A._scalar_out(pc.utf8_reverse, A._text(s))


def initcap_text(s: str) -> str:
    """PostgreSQL's initcap: a letter after a non-alphanumeric character is upper-cased, others lower-cased."""
    out, after_alnum = [], False
    for c in s:
        mapped = c.lower() if after_alnum else c.upper()
        out.append(mapped if len(mapped) == 1 else c)
        after_alnum = c.isalnum()
    return "".join(out)


def op_initcap(ev, e) -> Datum:
    (s,) = ev.strict_args(e.args)
    return A._per_row(initcap_text, [A._text(s)], ev.n, pa.string())


def op_md5(ev, e) -> Datum:
    (s,) = ev.strict_args(e.args)
    return A._per_row(lambda v: hashlib.md5(v.encode("utf-8")).hexdigest(), [A._text(s)], ev.n, pa.string())


def op_starts_with(ev, e) -> Datum:
    s, prefix = _texts(ev, e)
    if _literal_args([prefix]) and not A._is_scalar(s):
        if not prefix.is_valid:
            return A._null(pa.bool_())
        return pc.starts_with(s, pattern=prefix.as_py())
    return A._per_row(lambda a, b: a.startswith(b), [s, prefix], ev.n, pa.bool_())


def op_octet_length(ev, e) -> Datum:
    (s,) = ev.strict_args(e.args)
    return A._scalar_out(lambda v: pc.binary_length(v).cast(pa.int32()), A._text(s))


def op_concat_ws(ev, e) -> Datum:
    sep, *values = [A._text(ev.visit(a)) for a in e.args]
    if _literal_args([sep, *values]):
        if not sep.is_valid:
            return A._null(pa.string())
        return pa.scalar(sep.as_py().join(v.as_py() for v in values if v.is_valid))
    # (binary_join_element_wise's null_handling="skip" drops trailing all-NULL rows in Arrow 26)
    n = ev.n
    sep_text = pc.fill_null(A._broadcast(sep, n, pa.string()), "")
    out: Datum = pa.scalar("")
    seen: Datum = pa.scalar(False)
    for v in values:
        text = pc.fill_null(v, "")
        joined = pc.if_else(seen, pc.binary_join_element_wise(out, sep_text, text, ""), text)
        valid = pc.is_valid(v)
        out = pc.if_else(valid, joined, out)
        seen = pc.or_(seen, valid)
    out = A._broadcast(out, n, pa.string())
    return pc.if_else(pc.is_valid(A._broadcast(sep, n, pa.string())), out, A._null(pa.string()))


def op_regexp_replace(ev, e) -> Datum:
    s = A._text(ev.visit(e.args[0]))
    pattern, repl, every = e.args[1].value, e.args[2].value, e.args[5].value
    return A._scalar_out(lambda v: pc.replace_substring_regex(
        v, pattern=pattern, replacement=repl, max_replacements=None if every else 1), s)


OPS: dict[str, Callable[..., Datum]] = {
    "||": op_concat_op,
    "concat": op_concat,
    "lower": op_lower,
    "upper": op_upper,
    "length": op_length,
    "substring": op_substring,
    "trim": op_trim,
    "ltrim": op_ltrim,
    "rtrim": op_rtrim,
    "replace": op_replace,
    "split_part": op_split_part,
    "strpos": op_strpos,
    "left": op_left,
    "right": op_right,
    "lpad": op_lpad,
    "rpad": op_rpad,
    "repeat": op_repeat,
    "reverse": op_reverse,
    "initcap": op_initcap,
    "md5": op_md5,
    "starts_with": op_starts_with,
    "octet_length": op_octet_length,
    "concat_ws": op_concat_ws,
    "regexp_replace": op_regexp_replace,
}
