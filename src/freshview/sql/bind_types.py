"""Binding the operators and functions of json, jsonb, arrays, enums, uuid and inet (PostgreSQL's semantics).

``TypeBinding`` is a mixin of ``ExprBinder`` (it uses ``bind``, ``coerce``, ``unsupported``, ``type_error``
and ``aggs``).  Values of these types are held as their PostgreSQL text (``SqlType.TEXTUAL``): jsonb in its
canonical form, so jsonb equality, GROUP BY and DISTINCT are text equality; uuid and inet in their canonical
output; an enum as its label.  What this module decides:

* json/jsonb: ``->``, ``->>``, ``#>``, ``#>>``, ``jsonb_extract_path[_text]``, ``json_extract_path[_text]``
  bind to the ops ``json_get``/``json_get_text``/``json_path``/``json_path_text`` (the key, index or path
  elements are arguments: text for a key, int4 for an index); jsonb ``@>`` to ``jsonb_contains``, ``?`` to
  ``jsonb_exists``; ``json[b]_build_object`` to ``json_build_object`` (its result type tells json from
  jsonb); ``json_agg``/``jsonb_agg`` are ``array_agg`` (maintained as it is, ORDER BY included) finished by
  ``json_agg_finish``; ``x::jsonb``/``x::json`` of text are ``json_in`` (checked, jsonb canonicalized), of
  these types to text ``as_text``.  A jsonb literal is canonicalized here (``freshview.jsontext``).  json has
  no equality (PostgreSQL's), jsonb no ordering here (PostgreSQL's jsonb order is not implemented): refused.
* arrays: ``x = ANY(arr)`` is ``array_any_eq``, ``array_length(arr, 1)``, ``cardinality(arr)``, ``arr[i]``
  (``array_element``, 1-based, NULL out of range); ``unnest`` is refused (a set-returning function changes
  the number of rows).
* enums compare by label for ``=``/``<>`` and by declared order for ``<``, ``<=``, ``>``, ``>=``, MIN and MAX
  (the label's rank, a CASE, is compared; MIN/MAX aggregate the rank and map it back to its label); a string
  compared with an enum must be one of its labels.
* MySQL dialect: MariaDB's JSON functions, ``sql.bind_mysql_json``.
* uuid literals are canonicalized (lower case, hyphenated), so uuid order is text order; inet literals too,
  and inet is refused under ordering operators (PostgreSQL orders by family, prefix length, then address).
"""

from __future__ import annotations

import ipaddress
import uuid

from sqlglot import exp

from freshview import jsontext
from freshview.plan import typing as ty
from freshview.plan.expr import Call, Case, Expr, Literal
from freshview.schema import SqlType, parse_array_literal
from freshview.sql.bind_mysql_json import MySqlJsonBinding

# Element kinds whose arrays cast to text (``array_text``, ``runtime.expressions.pgtext.array_text``).
ARRAY_TEXT_KINDS = ("int2", "int4", "int8", "numeric", "text", "bool", "date")

INT4 = ty.INT4
_ORDERING = ("<", "<=", ">", ">=")
_WHY_INET = "ordering inet values (PostgreSQL orders them by family, prefix length, then address)"
_WHY_JSONB = "ordering jsonb values (only = and <> on jsonb are supported)"


def convert_textual(value, target: SqlType) -> str:
    """A constant as the input function of a textual type reads it (``ValueError`` if it cannot)."""
    text = value if isinstance(value, str) else str(value)
    kind = target.kind
    if kind == "jsonb":
        return jsontext.jsonb(text)
    if kind == "json":
        return jsontext.json_check(text)
    if kind == "uuid":
        return str(uuid.UUID(text.strip()))
    if kind == "inet":
        return _inet(text.strip())
    if kind == "enum":
        assert target.enum is not None
        target.enum.rank(text)
        return text
    raise ValueError(f"cannot convert {value!r} to {target}")


def _inet(text: str) -> str:
    """inet's output: the address, and ``/bits`` unless it is the full width."""
    iface = ipaddress.ip_interface(text)
    full = iface.max_prefixlen
    return str(iface.ip) if iface.network.prefixlen == full else f"{iface.ip}/{iface.network.prefixlen}"


def enum_rank(e: Expr) -> Expr:
    """An enum value's position in its declared order (int4; NULL for NULL)."""
    assert e.type.enum is not None
    return Case(INT4, tuple((Call(ty.BOOL, "=", (e, Literal(e.type, label))), Literal(INT4, i))
                            for i, label in enumerate(e.type.enum.labels)),
                Call(INT4, "enum_unknown", (e,)))  # a label added since (ALTER TYPE ... ADD VALUE): an error


def enum_label(rank: Expr, t: SqlType) -> Expr:
    """The label at position ``rank`` of enum type ``t`` (the inverse of ``enum_rank``)."""
    assert t.enum is not None
    return Case(t, tuple((Call(ty.BOOL, "=", (rank, Literal(INT4, i))), Literal(t, label))
                         for i, label in enumerate(t.enum.labels)), None)


class TypeBinding(MySqlJsonBinding):
    """Mixin of ``ExprBinder``: json/jsonb, arrays, enums, uuid, inet (see the module docstring)."""

    # ------------------------------------------------------------------ comparisons and casts
    def typed_comparison(self, node: exp.Expression, op: str, left: Expr, right: Expr) -> Expr | None:
        """A comparison involving one of these types, or None when neither side is one."""
        kinds = {left.type.kind, right.type.kind}
        special = kinds & {"json", "jsonb", "uuid", "inet", "enum"}
        if not special:
            return None
        if len(special) > 1:
            raise self.type_error(node, f"operator does not exist: {left.type} {op} {right.type}")
        kind = special.pop()
        typed = left.type if left.type.kind == kind else right.type
        left, right = (self._as_type(node, side, typed) for side in (left, right))
        if kind == "json":
            raise self.type_error(node, f"operator does not exist: json {op} json (compare jsonb, or the text)")
        if op in _ORDERING:
            if kind == "inet":
                raise self.unsupported(node, _WHY_INET)
            if kind == "jsonb":
                raise self.unsupported(node, _WHY_JSONB)
            if kind == "enum":
                return Call(ty.BOOL, op, (enum_rank(left), enum_rank(right)))
        if kind == "jsonb":  # numbers equal by value: '1.0'::jsonb = '1'::jsonb (freshview.jsontext.equality_key)
            return Call(ty.BOOL, op, self.collated(node, left, right))  # type: ignore[attr-defined]
        return Call(ty.BOOL, op, (left, right))

    def _as_type(self, node: exp.Expression, e: Expr, t: SqlType) -> Expr:
        """``e`` as type ``t``: a constant converted by ``t``'s input function, an expression of ``t`` itself."""
        if e.type == t:
            return e
        if isinstance(e, Literal) and e.type.kind in ("text", "null"):
            return self.textual_literal(node, e.value, t)
        raise self.type_error(node, f"cannot compare {t} with {e.type}")

    def textual_literal(self, node: exp.Expression, value, t: SqlType) -> Literal:
        if value is None:
            return Literal(t, None)
        try:
            return Literal(t, convert_textual(value, t))
        except ValueError as why:
            raise self.type_error(node, f"invalid input value for type {t}: {value!r} ({why})") from None

    def typed_cast(self, node: exp.Expression, arg: Expr, target: SqlType) -> Expr | None:
        """A cast to or from one of these types, or None when neither is one."""
        if arg.type.is_array and target.kind == "text":  # PostgreSQL's array output, {1,NULL,"a b"}
            assert arg.type.element is not None
            if arg.type.element.kind not in ARRAY_TEXT_KINDS:
                raise self.unsupported(node, f"a cast from {arg.type} to text")
            return Call(ty.TEXT, "array_text", (arg,))
        if not (target.kind in SqlType.TEXTUAL and target.kind != "text") and not \
                (arg.type.kind in SqlType.TEXTUAL and arg.type.kind != "text"):
            return None
        if arg.type == target:
            return arg
        if isinstance(arg, Literal) and arg.type.kind in ("text", "null") and target.kind != "text":
            return self.textual_literal(node, arg.value, target)
        if target.kind == "text" and arg.type.kind == "inet":  # text(inet) shows the prefix length always
            text = Call(ty.TEXT, "as_text", (arg,))
            has = lambda c: Call(ty.BOOL, ">", (Call(INT4, "strpos", (text, Literal(ty.TEXT, c))),  # noqa: E731
                                                Literal(INT4, 0)))
            return Case(ty.TEXT, ((has("/"), text), (has(":"), Call(ty.TEXT, "||", (text, Literal(ty.TEXT, "/128"))))),
                        Call(ty.TEXT, "||", (text, Literal(ty.TEXT, "/32"))))
        if target.kind == "text":
            return Call(ty.TEXT, "as_text", (arg,))
        if target.is_json and arg.type.kind in ("text", "json", "jsonb"):
            if arg.type.kind == "jsonb" and target.kind == "json":
                return Call(target, "as_text", (arg,))  # jsonb's text is json
            return Call(target, "json_in", (arg,))
        raise self.unsupported(node, f"a cast from {arg.type} to {target} of a non-constant value")

    # ------------------------------------------------------------------ json operators
    def _json_arg(self, node: exp.Expression, arg_node: exp.Expression, what: str) -> Expr:
        arg = self.bind(arg_node)
        if isinstance(arg, Literal) and arg.type.kind == "text":  # an untyped string: PostgreSQL picks jsonb
            return self.textual_literal(node, arg.value, SqlType("jsonb"))
        if not arg.type.is_json:
            raise self.type_error(node, f"operator does not exist: {arg.type} {what}")
        return arg

    def _key_or_index(self, node: exp.Expression, key_node: exp.Expression) -> Expr:
        if isinstance(key_node, exp.JSONPath):
            parts = [p for p in key_node.expressions if not isinstance(p, exp.JSONPathRoot)]
            if len(parts) == 1 and isinstance(parts[0], exp.JSONPathKey) and isinstance(parts[0].this, str):
                return Literal(ty.TEXT, parts[0].this)
            if len(parts) == 1 and isinstance(parts[0], exp.JSONPathSubscript) and isinstance(parts[0].this, int):
                return Literal(INT4, parts[0].this)
            raise self.unsupported(node, f"JSON path {key_node.sql(dialect='postgres')}")
        key = self.bind(key_node)
        if key.type.is_integer:
            return self.coerce(key, INT4)
        if key.type.kind in ("text", "null"):
            return self.coerce(key, ty.TEXT)
        raise self.type_error(node, f"a json key is text or an integer, not {key.type}")

    def _path(self, node: exp.Expression, path_node: exp.Expression) -> list[Expr]:
        if isinstance(path_node, exp.JSONPath):
            parts = [p for p in path_node.expressions if not isinstance(p, exp.JSONPathRoot)]
            out: list[Expr] = []
            for p in parts:
                if not isinstance(p, (exp.JSONPathKey, exp.JSONPathSubscript)) or not isinstance(p.this, (str, int)):
                    raise self.unsupported(node, f"JSON path {path_node.sql(dialect='postgres')}")
                out.append(Literal(ty.TEXT, str(p.this)))
            return out
        path = self.bind(path_node)
        if not (isinstance(path, Literal) and path.type.kind == "text"):
            raise self.unsupported(node, "a JSON path that is not a constant text[] ('{a,1,b}')")
        try:
            return [Literal(ty.TEXT, p) for p in parse_array_literal(path.value)]
        except ValueError as why:
            raise self.type_error(node, f"malformed array literal {path.value!r}: {why}") from None

    def _get(self, node: exp.Expression, as_text: bool) -> Expr:
        j = self._json_arg(node, node.this, "->>" if as_text else "->")
        key = self._key_or_index(node, node.expression)
        return Call(ty.TEXT if as_text else j.type, "json_get_text" if as_text else "json_get", (j, key))

    def _get_path(self, node: exp.Expression, j: Expr, path: list[Expr], as_text: bool) -> Expr:
        return Call(ty.TEXT if as_text else j.type, "json_path_text" if as_text else "json_path", (j, *path))

    def visit_JSONExtract(self, node: exp.JSONExtract) -> Expr:
        if self.dialect.name == "mysql":  # JSON_EXTRACT, ->: MariaDB's (sql.bind_mysql_json)
            return self.mysql_extract(node, False)
        if isinstance(node.expression, exp.JSONPath) and len(node.expression.expressions) > 2:
            return self._get_path(node, self._json_arg(node, node.this, "#>"), self._path(node, node.expression), False)
        return self._get(node, False)

    def visit_JSONExtractScalar(self, node: exp.JSONExtractScalar) -> Expr:
        if self.dialect.name == "mysql":  # ->>
            return self.mysql_extract(node, True)
        if node.args.get("only_json_types") is False or (
                isinstance(node.expression, exp.JSONPath) and len(node.expression.expressions) > 2):
            # json_extract_path_text(j, 'a', 'b'), sqlglot's spelling of it
            return self._get_path(node, self._json_arg(node, node.this, "#>>"), self._path(node, node.expression), True)
        return self._get(node, True)

    def visit_JSONBExtract(self, node: exp.JSONBExtract) -> Expr:
        return self._get_path(node, self._json_arg(node, node.this, "#>"), self._path(node, node.expression), False)

    def visit_JSONBExtractScalar(self, node: exp.JSONBExtractScalar) -> Expr:
        return self._get_path(node, self._json_arg(node, node.this, "#>>"), self._path(node, node.expression), True)

    def _extract_path_fn(self, node: exp.Expression, args: list, as_text: bool, binary: bool) -> Expr:
        if len(args) < 1:
            raise self.type_error(node, "a json path function needs a json value and path elements")
        j = self.bind(args[0])
        if j.type.kind != ("jsonb" if binary else "json"):
            if isinstance(j, Literal) and j.type.kind == "text":
                j = self.textual_literal(node, j.value, SqlType("jsonb" if binary else "json"))
            else:
                raise self.type_error(node, f"function {'jsonb' if binary else 'json'}_extract_path"
                                            f"{'_text' if as_text else ''}({j.type}, ...) does not exist")
        path = [self.coerce(self._text_path_element(node, a), ty.TEXT) for a in args[1:]]
        return self._get_path(node, j, path, as_text)

    def _text_path_element(self, node: exp.Expression, arg_node: exp.Expression) -> Expr:
        e = self.bind(arg_node)
        if e.type.kind not in ("text", "null"):
            raise self.type_error(node, f"a json path element is text, not {e.type}")
        return e

    def fn_jsonb_extract_path_text(self, node, args): return self._extract_path_fn(node, args, True, True)  # noqa: E704
    def fn_jsonb_extract_path(self, node, args): return self._extract_path_fn(node, args, False, True)  # noqa: E704
    def fn_json_extract_path(self, node, args): return self._extract_path_fn(node, args, False, False)  # noqa: E704
    def fn_json_extract_path_text(self, node, args): return self._extract_path_fn(node, args, True, False)  # noqa: E704

    def visit_ArrayContainsAll(self, node: exp.ArrayContainsAll) -> Expr:
        left, right = self.bind(node.this), self.bind(node.expression)
        if left.type.is_array or right.type.is_array:
            raise self.unsupported(node, "@> on arrays")
        a = self._json_arg(node, node.this, "@>")
        b = self._json_arg(node, node.expression, "@>")
        if a.type.kind != "jsonb" or b.type.kind != "jsonb":
            raise self.type_error(node, f"operator does not exist: {a.type} @> {b.type}")
        return Call(ty.BOOL, "jsonb_contains", (a, b))

    def visit_JSONBContainsTopKey(self, node: exp.Expression) -> Expr:
        a = self._json_arg(node, node.this, "?")
        if a.type.kind != "jsonb":
            raise self.type_error(node, f"operator does not exist: {a.type} ? text")
        key = self.bind(node.expression)
        if key.type.kind not in ("text", "null"):
            raise self.type_error(node, f"operator does not exist: jsonb ? {key.type}")
        return Call(ty.BOOL, "jsonb_exists", (a, self.coerce(key, ty.TEXT)))

    def _build_object(self, node: exp.Expression, args: list, binary: bool) -> Expr:
        name = "jsonb_build_object" if binary else "json_build_object"
        if len(args) % 2:
            raise self.type_error(node, f"argument list must have even number of elements ({name})")
        bound: list[Expr] = []
        for i, a in enumerate(args):
            e = self.bind(a)
            if i % 2 == 0:
                if e.type.kind not in ("text", "null") and not e.type.is_numeric:
                    raise self.type_error(node, f"{name}: key must be a scalar, not {e.type}")
                e = self.output_text(e) if e.type.kind != "text" else e
            elif e.type.kind in ("timestamptz", "interval", "array"):
                raise self.unsupported(node, f"{name}() of a {e.type} value")
            elif e.type.kind == "null":
                e = Literal(ty.TEXT, None)
            bound.append(e)
        return Call(SqlType("jsonb" if binary else "json"), "json_build_object", tuple(bound))

    def fn_json_build_object(self, node, args): return self._build_object(node, args, False)  # noqa: E704
    def fn_jsonb_build_object(self, node, args): return self._build_object(node, args, True)  # noqa: E704

    def _json_agg(self, node: exp.Expression, arg_node: exp.Expression, binary: bool) -> Expr:
        array = self._agg(exp.ArrayAgg(this=arg_node), "array_agg")  # (ExprBinder's: sql.bind_aggs)
        element = array.type.element
        assert element is not None
        if element.kind in ("timestamptz", "interval"):
            raise self.unsupported(node, f"{'jsonb' if binary else 'json'}_agg() of {element} values")
        return Call(SqlType("jsonb" if binary else "json"), "json_agg_finish", (array,))

    def visit_JSONArrayAgg(self, node: exp.Expression) -> Expr:
        return self._json_agg(node, node.this, False)

    def fn_json_agg(self, node, args):  # noqa: E704
        return self._json_agg(node, args[0], False) if len(args) == 1 else None

    def fn_jsonb_agg(self, node, args):  # noqa: E704
        if len(args) != 1:
            raise self.type_error(node, "jsonb_agg() takes one argument")
        return self._json_agg(node, args[0], True)

    # ------------------------------------------------------------------ arrays
    def _array_arg(self, node: exp.Expression, arg_node: exp.Expression, name: str) -> Expr:
        arr = self.bind(arg_node)
        if not arr.type.is_array:
            raise self.type_error(node, f"function {name}({arr.type}) does not exist")
        return arr

    def any_comparison(self, node: exp.Expression, op: str, left: Expr, arr: Expr) -> Expr:
        """``left op ANY(arr)`` over an array value (only ``=``)."""
        if op != "=" or not arr.type.is_array:
            raise self.unsupported(node, f"{op} ANY over an array column (only = ANY)")
        element = arr.type.element
        assert element is not None
        if element.kind in SqlType.TEXTUAL and element.kind != "text":
            left = self._as_type(node, left, element)
        else:
            target = ty.common_type(left.type, element) if not isinstance(left, Literal) else element
            if target != element and not (target is not None and target.is_integer and element.is_integer):
                raise self.type_error(node, f"operator does not exist: {left.type} = ANY({arr.type})")
            left = self.coerce(left, target)  # (bigint = ANY(int[]): integers compare as numbers)
        return Call(ty.BOOL, "array_any_eq", (left, arr))

    def visit_ArraySize(self, node: exp.ArraySize) -> Expr:
        arr = self._array_arg(node, node.this, "array_length")
        dim = self.bind(node.expression) if node.expression is not None else Literal(INT4, 1)
        if not (isinstance(dim, Literal) and dim.type.is_integer):
            raise self.unsupported(node, "array_length() with a non-constant dimension")
        if dim.value != 1:  # freshview's arrays have one dimension
            return Literal(INT4, None)
        return Call(INT4, "array_length", (arr,))

    def fn_cardinality(self, node, args) -> Expr:
        if len(args) != 1:
            raise self.type_error(node, "cardinality() takes one argument")
        return Call(INT4, "cardinality", (self._array_arg(node, args[0], "cardinality"),))

    def fn_array_length(self, node, args) -> Expr:
        return self.visit_ArraySize(exp.ArraySize(this=args[0], expression=args[1] if len(args) > 1 else None))

    def visit_Bracket(self, node: exp.Bracket) -> Expr:
        arr = self.bind(node.this)
        if not arr.type.is_array:
            raise self.type_error(node, f"cannot subscript type {arr.type} because it does not support subscripting")
        if len(node.expressions) != 1 or isinstance(node.expressions[0], exp.Slice):
            raise self.unsupported(node, "array slices and multi-dimensional subscripts")
        index_node = node.expressions[0]
        if isinstance(index_node, exp.Literal) and not index_node.is_string:
            index: Expr = Literal(INT4, int(index_node.this) + 1)  # sqlglot keeps a constant subscript 0-based
        else:
            index = self.bind(index_node)
            if not index.type.is_integer and index.type.kind != "null":
                raise self.type_error(node, f"array subscript must have type integer, not {index.type}")
            index = self.coerce(index, INT4)
        assert arr.type.element is not None
        return Call(arr.type.element, "array_element", (arr, index))

    def visit_Explode(self, node: exp.Expression) -> Expr:
        raise self.unsupported(node, "unnest() (a set-returning function: each input row would give several "
                                     "rows; freshview's views keep one row per input row in the SELECT list)",
                               "unnest")
