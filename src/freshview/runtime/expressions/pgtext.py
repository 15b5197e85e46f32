"""PostgreSQL's text input rules, shared by both expression executors.

A cast from text accepts exactly the spellings matched here, in both
executors: PostgreSQL's forms that Spark's parsers also read, and nothing
Spark alone would accept (``'2023'`` as a date, ``'1d'`` as a double, ...).
Anything else raises ``invalid input syntax``.  The patterns are written in
the subset of regular-expression syntax that Java (Spark's ``rlike``) and
RE2 (Arrow's ``match_substring_regex``) read the same way.

This module imports neither pyspark nor pyarrow.
"""

from __future__ import annotations

def array_text(values: list, kind: str) -> str:
    """``CAST(arr AS TEXT)``: PostgreSQL's array output (``{1,NULL,"a b"}``) of a one-dimensional array of
    ``kind`` elements (integers, numerics, text, booleans, dates: what the front end lets through)."""
    out = []
    for v in values:
        if v is None:
            out.append("NULL")
        elif kind == "bool":
            out.append("t" if v else "f")
        elif kind == "text":
            quote = v == "" or v.upper() == "NULL" or any(c in v for c in '{},"\\ \t\n\r\f\x0b')
            out.append('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' if quote else v)
        else:
            out.append(str(v))  # ints, Decimal (its scale kept, as numeric prints), date.isoformat()
    return "{" + ",".join(out) + "}"


# PostgreSQL's isspace(): space, \t, \n, \r, \f, \v.  (RE2's \s lacks \v; Java's \v is a class.)
WS = r"[ \t\n\r\f\x0B]"
WHITESPACE_CHARS = " \t\n\r\f\x0b"

INTEGER = rf"^{WS}*[+-]?[0-9]+{WS}*\z"
NUMERIC = rf"^{WS}*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?{WS}*\z"
FLOAT = (rf"^{WS}*([+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
         rf"|(?i:[+-]?inf|[+-]?infinity|nan)){WS}*\z")
# Words spelling an infinite float (anything else that parses to +-inf overflowed).
FLOAT_INFINITY = rf"^{WS}*(?i:[+-]?inf|[+-]?infinity){WS}*\z"

_DATE = r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})"
_TIME = r"(?:[ T]([0-9]{1,2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,6}))?)?)?"
_ZONE = r"(Z|[+-][0-9]{2}(?::?[0-9]{2})?)?"
DATE = rf"^{WS}*{_DATE}{WS}*\z"
# Groups: year, month, day, hour, minute, second, fraction, zone.  A zone on a
# timestamp without time zone is ignored, as PostgreSQL does.
TIMESTAMP = rf"^{WS}*{_DATE}{_TIME}{WS}*{_ZONE}{WS}*\z"

# PostgreSQL's boolin: any prefix of true/false/yes/no, on/off (2+ letters), 1/0; case-insensitive.
BOOL_TRUE = ("t", "tr", "tru", "true", "y", "ye", "yes", "on", "1")
BOOL_FALSE = ("f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0")

# PostgreSQL's date range (4713-11-24 BC .. 5874897-12-31) in days since 1970-01-01.
DATE_MIN_DAYS = -2440588
DATE_MAX_DAYS = 2145042905

TYPE_NAMES = {
    "int2": "smallint", "int4": "integer", "int8": "bigint", "numeric": "numeric",
    "float4": "real", "float8": "double precision", "bool": "boolean", "date": "date",
    "timestamp": "timestamp without time zone", "timestamptz": "timestamp with time zone",
    "text": "text",
}


def invalid_input(kind: str, value: object) -> str:
    return f'invalid input syntax for type {TYPE_NAMES.get(kind, kind)}: "{value}"'


def out_of_range(kind: str) -> str:
    """PostgreSQL's message for an integer result outside its type."""
    return {"int2": "smallint out of range", "int4": "integer out of range",
            "int8": "bigint out of range"}.get(kind, "value out of range")
