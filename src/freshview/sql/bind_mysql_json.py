"""Binding MariaDB's JSON functions (the MySQL dialect): JSON_EXTRACT, ``->``, ``->>``, JSON_UNQUOTE,
JSON_OBJECT, JSON_ARRAYAGG.

``MySqlJsonBinding`` is a mixin of ``ExprBinder``; ``sql.bind_types`` hands it the JSON nodes when the dialect
is MySQL.  MariaDB's JSON is text (LONGTEXT with a json_valid check), and its functions write JSON their own
way (``freshview.jsontext``'s ``mariadb_*``): JSON_EXTRACT re-spaces the value it finds (keys in written
order, the first of duplicate keys), JSON_ARRAYAGG writes no spaces, JSON_OBJECT ``", "`` and ``": "``.  A
path is a constant of keys and array indexes (``$.a.b[1]``); wildcards and ranges are refused.  ``->`` and
``->>`` (MySQL's, which MariaDB 10.11 lacks) are JSON_EXTRACT and JSON_UNQUOTE(JSON_EXTRACT(...)).
"""

from __future__ import annotations

from sqlglot import exp

from freshview.plan import typing as ty
from freshview.plan.expr import Call, Expr, Literal
from freshview.schema import SqlType

JSON = SqlType("json")


class MySqlJsonBinding:
    """Mixin of ``ExprBinder``: MariaDB's JSON functions (see the module docstring)."""

    def _maria_doc(self, node: exp.Expression, arg_node: exp.Expression) -> Expr:
        arg = self.bind(arg_node)
        if arg.type.kind in ("json", "text", "null"):
            return self.coerce(arg, ty.TEXT) if arg.type.kind == "null" else arg
        raise self.type_error(node, f"a JSON document is text, not {arg.type}")

    def mysql_extract(self, node: exp.Expression, unquote: bool) -> Expr:
        path = node.expression
        if not isinstance(path, exp.JSONPath):
            raise self.unsupported(node, "JSON_EXTRACT with a non-constant path")
        steps: list[Expr] = []
        for part in path.expressions:
            if isinstance(part, exp.JSONPathRoot):
                continue
            if isinstance(part, exp.JSONPathKey) and isinstance(part.this, str):
                steps.append(Literal(ty.TEXT, part.this))
            elif isinstance(part, exp.JSONPathSubscript) and isinstance(part.this, int):
                steps.append(Literal(ty.INT4, part.this))
            else:
                raise self.unsupported(node, f"JSON path {path.sql(dialect='mysql')} (keys and indexes only)")
        found = Call(JSON, "mariadb_extract", (self._maria_doc(node, node.this), *steps))
        return Call(ty.TEXT, "json_unquote", (found,)) if unquote else found

    def fn_json_unquote(self, node: exp.Expression, args: list) -> Expr | None:
        if self.dialect.name != "mysql":
            return None
        if len(args) != 1:
            raise self.type_error(node, "JSON_UNQUOTE takes one argument")
        return Call(ty.TEXT, "json_unquote", (self._maria_doc(node, args[0]),))

    def visit_JSONObject(self, node: exp.Expression) -> Expr:
        if self.dialect.name != "mysql":
            raise self.unsupported(node, "JSON_OBJECT (use json_build_object)")
        args: list[Expr] = []
        for kv in node.expressions:
            if not isinstance(kv, exp.JSONKeyValue):
                raise self.unsupported(node, "JSON_OBJECT of this form")
            key, value = self.bind(kv.this), self.bind(kv.expression)
            if key.type.kind not in ("text", "null"):
                key = self.output_text(key)
            if value.type.kind == "null":
                value = Literal(ty.TEXT, None)
            elif not (value.type.is_integer or value.type.kind in ("numeric", "text", "json")):
                raise self.unsupported(node, f"JSON_OBJECT of a {value.type} value")
            args += [self.coerce(key, ty.TEXT), value]
        return Call(JSON, "mariadb_object", tuple(args))

    def fn_json_arrayagg(self, node: exp.Expression, args: list) -> Expr | None:
        if self.dialect.name != "mysql":
            return None
        if len(args) != 1:
            raise self.type_error(node, "JSON_ARRAYAGG takes one argument")
        array = self._agg(exp.ArrayAgg(this=args[0]), "array_agg")  # maintained as array_agg is
        element = array.type.element
        assert element is not None
        if not (element.is_integer or element.kind in ("numeric", "text", "json")):
            raise self.unsupported(node, f"JSON_ARRAYAGG of {element} values")
        return Call(JSON, "mariadb_arrayagg_finish", (array,))
