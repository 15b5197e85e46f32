"""to_char(timestamp, format) as a concatenation of plan expressions both executors evaluate.

A constant format is read as PostgreSQL's formatting.c reads it (longest
pattern first, ``FM`` suppressing the padding of the next pattern, double
quotes for literal text, anything else copied) and each pattern becomes an
expression over EXTRACT results: zero-padded numbers through ``lpad``, month
and day names through CASE.  Patterns whose output depends on settings or
that this expansion does not carry (time zones, Roman numerals, ordinal
suffixes, Julian days, ISO years, BC markers) raise ``Unsupported``.
"""

from __future__ import annotations

from freshview.plan.expr import Call, Case, Cast, Expr, Literal
from freshview.schema import SqlType

TEXT, INT8, INT4, BOOL = SqlType("text"), SqlType("int8"), SqlType("int4"), SqlType("bool")


class Unsupported(Exception):
    pass


_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December"]
_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]

# Longest first, as formatting.c matches them.
_REFUSED = ["TZH", "TZM", "TZ", "tz", "OF", "SSSSS", "SSSS", "IYYY", "IYY", "IY", "Y,YYY", "B.C.", "b.c.",
            "A.D.", "a.d.", "BC", "bc", "AD", "ad", "RM", "rm", "CC", "cc", "J", "FX", "TM", "TH", "th", "SP", "W",
            "I"]
_PATTERNS = ["HH24", "HH12", "HH", "MI", "SS", "MS", "US", "A.M.", "P.M.", "a.m.", "p.m.", "AM", "PM", "am", "pm",
             "YYYY", "YYY", "YY", "Y", "MONTH", "Month", "month", "MON", "Mon", "mon", "MM", "DAY", "Day", "day",
             "DY", "Dy", "dy", "DDD", "DD", "D", "ID", "IW", "Q", "WW",
             "yyyy", "yyy", "yy", "y", "hh24", "hh12", "hh", "mi", "ss", "ms", "us", "ddd", "dd", "d", "id", "iw",
             "q", "ww", "mm"]


def expand(ts: Expr, fmt: str) -> Expr:
    parts: list[Expr] = []
    i, n = 0, len(fmt)
    literal = []

    def flush() -> None:
        if literal:
            parts.append(Literal(TEXT, "".join(literal)))
            literal.clear()

    while i < n:
        if fmt[i] == '"':
            j = i + 1
            while j < n and fmt[j] != '"':
                if fmt[j] == "\\" and j + 1 < n:
                    j += 1
                literal.append(fmt[j])
                j += 1
            i = j + 1
            continue
        if fmt[i] == "\\" and i + 1 < n and fmt[i + 1] == '"':
            literal.append('"')
            i += 2
            continue
        fill_mode = fmt.startswith("FM", i) or fmt.startswith("fm", i)
        j = i + 2 if fill_mode else i
        pattern = next((p for p in _PATTERNS if fmt.startswith(p, j)), None)
        refused = next((p for p in _REFUSED if fmt.startswith(p, j)), None)
        if refused is not None and (pattern is None or len(refused) > len(pattern)):
            raise Unsupported(f"pattern {refused!r}")
        if pattern is None:
            if fill_mode:
                i += 2
                continue
            literal.append(fmt[i])
            i += 1
            continue
        flush()
        parts.append(_pattern(ts, pattern, fill_mode))
        i = j + len(pattern)
    flush()
    if all(isinstance(part, Literal) for part in parts):  # no pattern: the text, or NULL for a NULL timestamp
        text = "".join(part.value for part in parts)  # type: ignore[attr-defined]
        return Case(TEXT, ((Call(BOOL, "is_null", (ts,)), Literal(TEXT, None)),), Literal(TEXT, text))
    if len(parts) == 1:
        return parts[0]
    return Call(TEXT, "||", tuple(parts))


def _field(ts: Expr, name: str) -> Expr:
    return Cast(INT8, Call(SqlType.numeric(None, 0), "extract", (ts,), name))


def _i8(v: int) -> Literal:
    return Literal(INT8, v)


def _num(value: Expr, width: int, fill_mode: bool) -> Expr:
    text = Cast(TEXT, value)
    if fill_mode:
        return text
    padded = Call(TEXT, "lpad", (text, Literal(INT4, width), Literal(TEXT, "0")))
    if width != 4:  # (every other field fits its width)
        return padded
    # lpad would cut a wider number (year 10000): such values print in full.
    wide = Call(BOOL, ">=", (value, _i8(10 ** width)))
    return Case(TEXT, ((wide, text),), padded)


def _names(index: Expr, names: list[str], first: int, style: str, width: int | None) -> Expr:
    whens = []
    for k, name in enumerate(names):
        text = name.upper() if style == "upper" else name.lower() if style == "lower" else name
        if width is not None:
            text = text.ljust(width)
        whens.append((Call(BOOL, "=", (index, _i8(k + first))), Literal(TEXT, text)))
    return Case(TEXT, tuple(whens), None)


def _style(p: str) -> str:
    return "upper" if p.isupper() else "lower" if p.islower() else "cap"


def _pattern(ts: Expr, p: str, fm: bool) -> Expr:
    up = p.upper()
    div = lambda a, k: Call(INT8, "/", (a, _i8(k)))  # noqa: E731
    mod = lambda a, k: Call(INT8, "%", (a, _i8(k)))  # noqa: E731
    hour = _field(ts, "hour")
    if up == "HH24":
        return _num(hour, 2, fm)
    if up in ("HH12", "HH"):
        return _num(Call(INT8, "+", (mod(Call(INT8, "+", (hour, _i8(11))), 12), _i8(1))), 2, fm)
    if up == "MI":
        return _num(_field(ts, "minute"), 2, fm)
    micros = _field(ts, "microseconds")  # of the minute
    if up == "SS":
        return _num(div(micros, 1_000_000), 2, fm)
    if up == "MS":
        return _num(div(mod(micros, 1_000_000), 1000), 3, fm)
    if up == "US":
        return _num(mod(micros, 1_000_000), 6, fm)
    if up.replace(".", "") in ("AM", "PM"):
        dots = "." in p
        am, pm = ("A.M.", "P.M.") if dots else ("AM", "PM")
        if p.islower():
            am, pm = am.lower(), pm.lower()
        return Case(TEXT, ((Call(BOOL, "<", (hour, _i8(12))), Literal(TEXT, am)),
                           (Call(BOOL, ">=", (hour, _i8(12))), Literal(TEXT, pm))), None)
    year = _field(ts, "year")
    if up == "YYYY":
        return _num(year, 4, fm)
    if up in ("YYY", "YY", "Y"):
        digits = len(up)
        return _num(mod(year, 10 ** digits), digits, fm)
    month = _field(ts, "month")
    if up == "MONTH":
        return _names(month, _MONTHS, 1, _style(p), None if fm else 9)
    if up == "MON":
        return _names(month, [m[:3] for m in _MONTHS], 1, _style(p), None)
    if up == "MM":
        return _num(month, 2, fm)
    dow = _field(ts, "dow")
    if up == "DAY":
        return _names(dow, _DAYS, 0, _style(p), None if fm else 9)
    if up == "DY":
        return _names(dow, [d[:3] for d in _DAYS], 0, _style(p), None)
    if up == "DDD":
        return _num(_field(ts, "doy"), 3, fm)
    if up == "DD":
        return _num(_field(ts, "day"), 2, fm)
    if up == "D":
        return Cast(TEXT, Call(INT8, "+", (dow, _i8(1))))
    if up == "ID":
        return Cast(TEXT, _field(ts, "isodow"))
    if up == "IW":
        return _num(_field(ts, "week"), 2, fm)
    if up == "Q":
        return Cast(TEXT, _field(ts, "quarter"))
    if up == "WW":
        return _num(Call(INT8, "+", (div(Call(INT8, "-", (_field(ts, "doy"), _i8(1))), 7), _i8(1))), 2, fm)
    raise Unsupported(f"pattern {p!r}")  # pragma: no cover
