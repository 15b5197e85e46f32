"""PostgreSQL's json and jsonb on their text, value by value: parsing, output, operators.  Standard library only.

The SQL front end canonicalizes jsonb literals with them, and both executors run them (the in-process one per row in ``arrow_json``, Spark in a Python UDF in
``spark_json``, which ships this module by value), so the two agree by construction.

* ``json`` keeps its text: ``->`` of a json value gives the sub-value's text exactly as written (spaces,
  duplicate keys and all); ``jsonb`` is PostgreSQL's canonical output: object keys unique (the last one
  wins) and ordered shorter first, then bytewise; ``", "`` between items and ``": "`` after keys; numbers
  as ``numeric`` prints them (``1e2`` is ``100``, ``-0`` is ``0``); strings with PostgreSQL's escapes.
* ``->`` / ``->>`` take a key (objects) or an index (arrays, negative from the end); ``#>`` / ``#>>`` a path
  of keys and indexes; ``->>`` of a string is its value, of anything else its text; JSON ``null`` under
  ``->>`` is SQL NULL.
* ``@>`` is jsonb containment and ``?`` key existence, as PostgreSQL defines them (an array contains a
  scalar it holds at top level; ``?`` finds keys and string array elements).
* ``build_object`` and ``agg`` render SQL values as ``to_json`` does (``json_build_object`` separates a key
  from its value by ``" : "``, ``json_agg`` its elements by ``", "``).

A text that is not JSON raises ``ValueError`` with PostgreSQL's message.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from typing import Any

# A parsed value: (kind, payload, start, end) with kind one of obj arr str num true false null; an object's
# payload is its (key, value) pairs in written order, an array's its values, a number's its text.
Node = tuple

_WS = " \t\n\r"
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _invalid(text: str) -> ValueError:
    return ValueError(f"invalid input syntax for type json: {text[:60]!r}")


def parse(text: str) -> Node:
    node, at = _value(text, _skip(text, 0))
    if _skip(text, at) != len(text):
        raise _invalid(text)
    return node


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WS:
        at += 1
    return at


def _value(text: str, at: int) -> tuple[Node, int]:
    if at >= len(text):
        raise _invalid(text)
    c = text[at]
    if c == "{":
        pairs, i = [], _skip(text, at + 1)
        if i < len(text) and text[i] == "}":
            return ("obj", pairs, at, i + 1), i + 1
        while True:
            if i >= len(text) or text[i] != '"':
                raise _invalid(text)
            key, i = _string(text, i)
            i = _skip(text, i)
            if i >= len(text) or text[i] != ":":
                raise _invalid(text)
            value, i = _value(text, _skip(text, i + 1))
            pairs.append((key[1], value))
            i = _skip(text, i)
            if i < len(text) and text[i] == ",":
                i = _skip(text, i + 1)
                continue
            if i < len(text) and text[i] == "}":
                return ("obj", pairs, at, i + 1), i + 1
            raise _invalid(text)
    if c == "[":
        items, i = [], _skip(text, at + 1)
        if i < len(text) and text[i] == "]":
            return ("arr", items, at, i + 1), i + 1
        while True:
            value, i = _value(text, i)
            items.append(value)
            i = _skip(text, i)
            if i < len(text) and text[i] == ",":
                i = _skip(text, i + 1)
                continue
            if i < len(text) and text[i] == "]":
                return ("arr", items, at, i + 1), i + 1
            raise _invalid(text)
    if c == '"':
        return _string(text, at)
    for word in ("true", "false", "null"):
        if text.startswith(word, at):
            return (word, None, at, at + len(word)), at + len(word)
    m = _NUMBER.match(text, at)
    if m is None:
        raise _invalid(text)
    return ("num", m.group(0), at, m.end()), m.end()


def _string(text: str, at: int) -> tuple[Node, int]:
    out, i = [], at + 1
    while True:
        if i >= len(text):
            raise _invalid(text)
        c = text[i]
        if c == '"':
            return ("str", "".join(out), at, i + 1), i + 1
        if c == "\\":
            e = text[i + 1: i + 2]
            if e in _ESCAPES:
                out.append(_ESCAPES[e])
                i += 2
            elif e == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2: i + 6]):
                code = int(text[i + 2: i + 6], 16)
                i += 6
                if 0xD800 <= code < 0xDC00 and text[i: i + 2] == "\\u":
                    low = int(text[i + 2: i + 6], 16)
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
                out.append(chr(code))
            else:
                raise _invalid(text)
        elif ord(c) < 0x20:
            raise _invalid(text)
        else:
            out.append(c)
            i += 1


# ---------------------------------------------------------------------------- output
def quote(s: str) -> str:
    """A JSON string as PostgreSQL's escape_json writes it."""
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c in "\b\f\n\r\t":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[c])
        elif ord(c) < 0x20:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _numeric_text(text: str) -> str:
    d = decimal.Decimal(text)
    return format(abs(d) if d == 0 else d, "f")


def _key_order(key: str) -> tuple[int, bytes]:
    b = key.encode()
    return len(b), b


def canonical(node: Node) -> str:
    """jsonb's output of a parsed value."""
    kind, payload = node[0], node[1]
    if kind == "obj":
        unique = dict(payload)  # the last of duplicate keys wins
        items = sorted(unique.items(), key=lambda kv: _key_order(kv[0]))
        return "{" + ", ".join(f"{quote(k)}: {canonical(v)}" for k, v in items) + "}"
    if kind == "arr":
        return "[" + ", ".join(canonical(v) for v in payload) + "]"
    if kind == "str":
        return quote(payload)
    if kind == "num":
        return _numeric_text(payload)
    return kind


def jsonb(text: str) -> str:
    """``text::jsonb``: the canonical text of a JSON text."""
    node = parse(text)
    if "\\u0000" in text and _has_nul(node):
        raise ValueError("unsupported Unicode escape sequence: \\u0000 cannot be converted to text")
    return canonical(node)


def _has_nul(node: Node) -> bool:
    if node[0] == "str":
        return "\x00" in node[1]
    if node[0] == "obj":
        return any("\x00" in k or _has_nul(v) for k, v in node[1])
    if node[0] == "arr":
        return any(_has_nul(v) for v in node[1])
    return False


def json_check(text: str) -> str:
    """``text::json``: the text itself, once it is known to be JSON."""
    parse(text)
    return text


def _out(text: str, node: Node, binary: bool) -> str:
    return canonical(node) if binary else text[node[2]: node[3]]


def _as_text(text: str, node: Node, binary: bool) -> str | None:
    if node[0] == "null":
        return None
    if node[0] == "str":
        return node[1]
    return _out(text, node, binary)


# ---------------------------------------------------------------------------- operators
def _step(node: Node, key: Any, binary: bool) -> Node | None:
    kind, payload = node[0], node[1]
    if isinstance(key, int) and not isinstance(key, bool):
        if binary and kind not in ("arr", "obj"):  # jsonb subscripts a scalar as a one-element array
            kind, payload = "arr", [node]
        if kind != "arr":
            return None
        index = key + len(payload) if key < 0 else key
        return payload[index] if 0 <= index < len(payload) else None
    if kind == "obj":
        found = None
        for k, v in payload:
            if k == key:
                found = v  # the last of duplicate keys (json's text keeps them all)
        return found
    return None


def _path_step(node: Node, key: str, binary: bool) -> Node | None:
    if node[0] == "arr":
        if not re.fullmatch(r"\s*-?[0-9]+\s*", key):
            return None
        return _step(node, int(key), binary)
    return _step(node, key, binary)


def get(text: str, key: Any, as_text: bool, binary: bool) -> str | None:
    """``text -> key`` (``->>`` with ``as_text``); ``key`` a str (object field) or an int (array element)."""
    node = _step(parse(text), key, binary)
    if node is None:
        return None
    return _as_text(text, node, binary) if as_text else _out(text, node, binary)


def get_path(text: str, path: list, as_text: bool, binary: bool) -> str | None:
    """``text #> path`` (``#>>`` with ``as_text``); a NULL path element gives NULL."""
    node: Node | None = parse(text)
    for key in path:
        if key is None or node is None:
            return None
        node = _path_step(node, key, binary)
    if node is None:
        return None
    return _as_text(text, node, binary) if as_text else _out(text, node, binary)


def _scalar_equal(a: Node, b: Node) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "num":
        return decimal.Decimal(a[1]) == decimal.Decimal(b[1])
    return a[1] == b[1]


def _contains(a: Node, b: Node, top: bool) -> bool:
    if a[0] == "obj":
        if b[0] != "obj":
            return False
        have = dict(a[1])
        return all(k in have and _contains(have[k], v, False) for k, v in dict(b[1]).items())
    if a[0] == "arr":
        if b[0] == "arr":
            return all(any(_contains(x, y, False) for x in a[1]) for y in b[1])
        if top and b[0] not in ("obj", "arr"):
            return any(_scalar_equal(x, b) for x in a[1])
        return False
    if b[0] in ("obj", "arr"):
        return False
    return _scalar_equal(a, b)


def contains(left: str, right: str) -> bool:
    """jsonb ``left @> right``."""
    return _contains(parse(left), parse(right), True)


def exists(text: str, key: str) -> bool:
    """jsonb ``text ? key``: a top-level key, or a string element of a top-level array (or the string itself)."""
    node = parse(text)
    if node[0] == "obj":
        return any(k == key for k, _ in node[1])
    if node[0] == "arr":
        return any(v[0] == "str" and v[1] == key for v in node[1])
    return node[0] == "str" and node[1] == key


# ---------------------------------------------------------------------------- SQL values to JSON
def _float_text(x: float) -> str:
    """float8out's shortest text (exponent form below 1e-4 and from 1e15)."""
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    d = decimal.Decimal(repr(x))
    exponent = d.adjusted()
    if -4 <= exponent < 15:
        return format(d, "f").rstrip("0").rstrip(".") if "." in format(d, "f") else format(d, "f")
    digits = d.as_tuple().digits
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])).rstrip("0") if len(digits) > 1 else "")
    mantissa = mantissa.rstrip(".")
    return f"{'-' if x < 0 else ''}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def to_json(value: Any, kind: str) -> str:
    """A SQL value of freshview type kind ``kind`` as to_json writes it (NULL is ``null``)."""
    if value is None:
        return "null"
    if kind in ("json", "jsonb"):
        return value
    if kind == "bool":
        return "true" if value else "false"
    if kind in ("int2", "int4", "int8"):
        return str(int(value))
    if kind == "numeric":
        return format(value, "f")
    if kind in ("float4", "float8"):
        if math.isnan(value) or math.isinf(value):
            return quote("NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity"))
        return _float_text(float(value))
    if kind == "date":
        return quote(value.isoformat())
    if kind == "timestamp":
        return quote(value.isoformat() if isinstance(value, dt.datetime) else str(value))
    if isinstance(value, (list, tuple)):
        raise ValueError("arrays in JSON values are not supported")
    return quote(str(value))


def build_object(keys: list, values: list, kinds: list, binary: bool) -> str:
    """``json_build_object`` / ``jsonb_build_object`` of key, value pairs."""
    for i, k in enumerate(keys):
        if k is None:
            raise ValueError(f"argument {2 * i + 1}: key must not be null")
    parts = [(k, to_json(v, kind)) for k, v, kind in zip(keys, values, kinds)]
    if binary:
        return canonical(("obj", [(k, parse(v)) for k, v in parts], 0, 0))
    return "{" + ", ".join(f"{quote(k)} : {v}" for k, v in parts) + "}"


def agg(values: list | None, kind: str, binary: bool) -> str | None:
    """``json_agg`` / ``jsonb_agg`` of a group's values (in order); NULL for no values."""
    if values is None:
        return None
    if binary:
        return canonical(("arr", [parse(to_json(v, kind)) for v in values], 0, 0))
    return "[" + ", ".join(to_json(v, kind) for v in values) + "]"


# ---------------------------------------------------------------------------- MariaDB's JSON functions
def _maria(text: str, node: Node) -> str:
    """MariaDB's text of a value found in ``text``: objects and arrays re-spaced (``", "``, ``": "``, keys in
    written order, duplicates kept), scalars as written."""
    kind, payload = node[0], node[1]
    if kind == "obj":
        return "{" + ", ".join(f"{quote(k)}: {_maria(text, v)}" for k, v in payload) + "}"
    if kind == "arr":
        return "[" + ", ".join(_maria(text, v) for v in payload) + "]"
    return text[node[2]: node[3]]


def mariadb_extract(text: str, path: list) -> str | None:
    """``JSON_EXTRACT(text, path)`` of a path of keys (str: the first such key) and array indexes (int)."""
    node: Node | None = parse(text)
    for key in path:
        if node is None:
            return None
        if isinstance(key, int):
            node = node[1][key] if node[0] == "arr" and 0 <= key < len(node[1]) else None
        else:
            node = next((v for k, v in node[1] if k == key), None) if node[0] == "obj" else None
    return None if node is None else _maria(text, node)


def mariadb_unquote(text: str) -> str:
    """``JSON_UNQUOTE``: a JSON string's value; any other text as it is."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        try:
            node, end = _string(text, 0)
        except (ValueError, IndexError):
            return text
        if end == len(text):
            return node[1]
    return text


def _maria_value(value: Any, kind: str) -> str:
    if value is None:
        return "null"
    if kind in ("json", "jsonb"):
        return value
    if kind in ("int2", "int4", "int8"):
        return str(int(value))
    if kind == "numeric":
        return format(value, "f")
    if kind == "text":
        return quote(value)
    raise ValueError(f"a {kind} value in a MariaDB JSON function is not supported")


def mariadb_object(keys: list, values: list, kinds: list) -> str:
    """``JSON_OBJECT(k1, v1, ...)`` as MariaDB writes it."""
    for k in keys:
        if k is None:
            raise ValueError("JSON documents may not contain NULL member names")
    return "{" + ", ".join(f"{quote(k)}: {_maria_value(v, kind)}" for k, v, kind in zip(keys, values, kinds)) + "}"


def mariadb_arrayagg(values: list | None, kind: str) -> str | None:
    """``JSON_ARRAYAGG`` of a group's values (in order): no spaces between elements."""
    if values is None:
        return None
    return "[" + ",".join(_maria_value(v, kind) for v in values) + "]"


# ---------------------------------------------------------------------------- jsonb equality
def equality_key(text: str) -> str:
    """The text two jsonb values are equal by in PostgreSQL: the canonical text with each number as its
    value (``1.0`` and ``1``, ``1.50`` and ``1.5`` are equal jsonb; their output keeps the written scale)."""
    if "." not in text:  # a canonical text without a fraction has its numbers as their values already
        return text
    return _keyed(parse(text))


def _keyed(node: Node) -> str:
    kind, payload = node[0], node[1]
    if kind == "obj":
        items = sorted(dict(payload).items(), key=lambda kv: _key_order(kv[0]))
        return "{" + ", ".join(f"{quote(k)}: {_keyed(v)}" for k, v in items) + "}"
    if kind == "arr":
        return "[" + ", ".join(_keyed(v) for v in payload) + "]"
    if kind == "num":
        d = decimal.Decimal(payload)
        return "0" if d == 0 else format(d.normalize(), "f")
    return canonical(node)


# ---------------------------------------------------------------------------- set-returning functions
def elements(text: str, as_text: bool, binary: bool, name: str) -> list[str | None]:
    """``json[b]_array_elements[_text]`` of one value: its elements' texts (``as_text``: ``->>``'s
    rendering, JSON null as None); PostgreSQL's error for a non-array."""
    node = parse(text)
    if node[0] != "arr":
        if binary:
            what = "an object" if node[0] == "obj" else "a scalar"
            raise ValueError(f"cannot extract elements from {what}")
        raise ValueError(f"cannot call {name} on {'a non-array' if node[0] == 'obj' else 'a scalar'}")
    return [_as_text(text, v, binary) if as_text else _out(text, v, binary) for v in node[1]]


def members(text: str, as_text: bool, binary: bool, name: str) -> list[tuple[str, str | None]]:
    """``json[b]_each[_text]`` of one value: its (key, value) pairs, json's as written (duplicates and
    all), jsonb's in its key order; PostgreSQL's error for a non-object."""
    node = parse(text)
    if node[0] != "obj":
        if binary:
            raise ValueError(f"cannot call {name} on a non-object")
        raise ValueError("cannot deconstruct an array as an object" if node[0] == "arr"
                         else "cannot deconstruct a scalar")
    pairs = node[1]
    if binary:
        pairs = sorted(dict(pairs).items(), key=lambda kv: _key_order(kv[0]))
    return [(k, _as_text(text, v, binary) if as_text else _out(text, v, binary)) for k, v in pairs]


def object_keys(text: str, binary: bool, name: str) -> list[str]:
    """``json[b]_object_keys`` of one value (jsonb's unique, in its order); PostgreSQL's error otherwise."""
    node = parse(text)
    if node[0] != "obj":
        raise ValueError(f"cannot call {name} on {'an array' if node[0] == 'arr' else 'a scalar'}")
    if binary:
        return sorted(dict(node[1]), key=_key_order)
    return [k for k, _ in node[1]]
