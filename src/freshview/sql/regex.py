"""PostgreSQL regular expressions for regexp_replace, as RE2 (Arrow) and Java (Spark) read them.

PostgreSQL's "advanced regular expressions" differ from RE2 and Java in ways
that change results: ``.`` matches a newline, ``$`` matches only at the very
end (Java also matches before a final newline), ``\\w`` and ``\\s`` are
Unicode-/locale-aware, a ``[`` inside a bracket is literal (Java nests
classes), and the replacement spells groups ``\\1`` and the match ``\\&``
(Java: ``$1``, ``$0``).  ``translate`` rewrites a constant pattern into the
subset both engines read the same way, or raises ``Unsupported`` naming what
it cannot carry over (back-references, look-around, POSIX classes,
PostgreSQL-only escapes, flags other than ``g`` and ``i``).

Without the ``g`` flag only the first match is replaced: RE2 takes a
replacement count, Java's ``regexp_replace`` replaces all, so its pattern is
anchored as ``^(.*?)(P)`` and its replacement keeps group 1 in front (P's groups
shift by two) (the
leftmost match, as the lazy prefix finds it first).
"""

from __future__ import annotations

from dataclasses import dataclass


class Unsupported(Exception):
    """A pattern, replacement or flag the translation cannot carry over exactly."""


_SPACE = r" \t\n\r\f\x0B"  # PostgreSQL's isspace()
_WORD = r"\p{L}\p{N}_"
_CLASS_ESCAPES = {"d": "0-9", "s": _SPACE, "w": _WORD}
_QUANTIFIERS = "*+?}"


@dataclass(frozen=True)
class Translated:
    re2_pattern: str
    re2_replacement: str
    java_pattern: str
    java_replacement: str
    all: bool

    def texts(self) -> tuple[str, str, str, str]:
        return self.re2_pattern, self.re2_replacement, self.java_pattern, self.java_replacement


def translate(pattern: str, replacement: str, flags: str) -> Translated:
    unknown = set(flags) - set("gi")
    if unknown:
        raise Unsupported(f"flag(s) {''.join(sorted(unknown))!r} (supported: g, i)")
    body, groups = _pattern(pattern)
    if "g" in flags and _nullable(pattern):
        # PostgreSQL, RE2 and Java disagree on empty matches next to a previous match.
        raise Unsupported("with the 'g' flag and a pattern that can match the empty string")
    if groups > 7:
        raise Unsupported("with more than seven capture groups")
    pieces = _replacement(replacement)
    every = "g" in flags
    prefix_re2 = "(?s" + ("i" if "i" in flags else "") + ")"
    prefix_java = "(?s" + ("iu" if "i" in flags else "") + ")"
    re2_repl = "".join(_re2_piece(p, groups) for p in pieces)
    if every:
        java_pattern, shift = prefix_java + body, 0
        java_repl = ""
    else:
        java_pattern, shift = prefix_java + "^(.*?)(" + body + ")", 2
        java_repl = "$1"
    java_repl += "".join(_java_piece(p, groups, shift) for p in pieces)
    return Translated(prefix_re2 + body, re2_repl, java_pattern, java_repl, every)


def _pattern(p: str) -> tuple[str, int]:
    out: list[str] = []
    groups = 0
    i, n = 0, len(p)
    last_quantifier = False
    while i < n:
        c = p[i]
        quantifier = False
        if c == "\\":
            if i + 1 >= n:
                raise Unsupported("pattern ending in a backslash")
            out.append(_escape(p[i + 1], in_class=False))
            i += 2
        elif c == "[":
            text, i = _bracket(p, i)
            out.append(text)
        elif c == "(":
            if p.startswith("(?", i):
                if not p.startswith("(?:", i):
                    raise Unsupported("with look-around or embedded options '(?'")
                out.append("(?:")
                i += 3
                continue
            groups += 1
            out.append("(")
            i += 1
        elif c == "$":
            out.append(r"\z")
            i += 1
        elif c in _QUANTIFIERS:
            if c == "+" and last_quantifier:
                raise Unsupported("with a possessive quantifier")
            quantifier = True
            out.append(c)
            i += 1
        elif c == "{":
            close = p.find("}", i)
            body = p[i + 1:close] if close > 0 else ""
            if close < 0 or not all(ch.isdigit() or ch == "," for ch in body) or not body or not body[0].isdigit():
                raise Unsupported("with a '{' that is not a bound {n,m}")
            out.append(p[i:close + 1])
            i = close + 1
            quantifier = True
        else:
            out.append(c)
            i += 1
        last_quantifier = quantifier
    return "".join(out), groups


def _escape(c: str, in_class: bool) -> str:
    if c in _CLASS_ESCAPES:
        return _CLASS_ESCAPES[c] if in_class else f"[{_CLASS_ESCAPES[c]}]"
    if c.lower() in _CLASS_ESCAPES and c.isupper():
        if in_class:
            raise Unsupported(f"with \\{c} inside a bracket expression")
        return f"[^{_CLASS_ESCAPES[c.lower()]}]"
    if c in "tnrf":
        return "\\" + c
    if c == "v":
        return r"\x0B"
    if not c.isalnum() and c.isascii():
        return "\\" + c
    raise Unsupported(f"with the escape \\{c}")


def _bracket(p: str, i: int) -> tuple[str, int]:
    """A bracket expression starting at p[i] == '['; returns its translation and the index after it."""
    out = ["["]
    j = i + 1
    if j < len(p) and p[j] == "^":
        out.append("^")
        j += 1
    first = True
    while j < len(p):
        c = p[j]
        if c == "]" and not first:
            out.append("]")
            return "".join(out), j + 1
        if c == "[" and j + 1 < len(p) and p[j + 1] in ":.=":
            raise Unsupported("with a POSIX class such as [[:alpha:]]")
        if c == "\\":
            if j + 1 >= len(p):
                raise Unsupported("pattern ending in a backslash")
            out.append(_escape(p[j + 1], in_class=True))
            j += 2
        elif c in "[]&":
            out.append("\\" + c)
            j += 1
        else:
            out.append(c)
            j += 1
        first = False
    raise Unsupported("with an unterminated bracket expression")


def _replacement(r: str) -> list[str | int]:
    """PostgreSQL's replacement as text pieces and group numbers (0: the whole match)."""
    pieces: list[str | int] = []
    i = 0
    while i < len(r):
        c = r[i]
        if c == "\\" and i + 1 < len(r):
            nxt = r[i + 1]
            if nxt in "123456789":
                pieces.append(int(nxt))
                i += 2
                continue
            if nxt == "&":
                pieces.append(0)
                i += 2
                continue
            if nxt == "\\":
                pieces.append("\\")
                i += 2
                continue
            pieces.append("\\")  # an unknown escape keeps its backslash
            i += 1
            continue
        pieces.append(c)
        i += 1
    return pieces


def _re2_piece(piece: str | int, groups: int) -> str:
    if isinstance(piece, int):
        return f"\\{piece}" if piece <= groups else ""
    return "\\\\" if piece == "\\" else piece


def _java_piece(piece: str | int, groups: int, shift: int) -> str:
    if isinstance(piece, int):
        if piece > groups:
            return ""
        return f"${piece + shift}" if piece else ("$2" if shift else "$0")
    return "\\" + piece if piece in "\\$" else piece


def _nullable(p: str) -> bool:
    """Whether the pattern can match the empty string (conservative: unsure counts as yes)."""
    # A stack of alternatives per group: each a list of sequences, a sequence a list of item nullabilities.
    stack: list[list[list[bool]]] = [[[]]]
    i = 0
    while i < len(p):
        c = p[i]
        seq = stack[-1][-1]
        if c == "\\":
            seq.append(False)
            i += 2
        elif c == "[":
            _, i = _bracket(p, i)
            seq.append(False)
        elif c == "(":
            stack.append([[]])
            i += 3 if p.startswith("(?:", i) else 1
        elif c == ")":
            if len(stack) == 1:
                return True
            group = stack.pop()
            stack[-1][-1].append(any(all(s) for s in group))
            i += 1
        elif c == "|":
            stack[-1].append([])
            i += 1
        elif c in "*?":
            if seq:
                seq[-1] = True
            i += 1
        elif c == "{":
            close = p.find("}", i)
            if seq and p[i + 1:close].split(",")[0] in ("0", ""):
                seq[-1] = True
            i = close + 1 if close > 0 else len(p)
        elif c in "+":
            i += 1
        elif c in "^$":
            seq.append(True)
            i += 1
        else:
            seq.append(False)
            i += 1
    return any(all(s) for s in stack[0])
