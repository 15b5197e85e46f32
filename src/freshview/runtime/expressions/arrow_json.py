"""json/jsonb and array functions over Arrow (the in-process executor); ``spark_json`` is the Spark twin.

The json ops run ``freshview.jsontext`` on each row's Python values (a json value is its text: there is no
Arrow kernel for PostgreSQL's json).  NULL in, NULL out, except where PostgreSQL says otherwise
(``json_build_object`` takes NULL values, ``array_any_eq`` is three-valued).  The array ops are Arrow
kernels: ``arr[i]`` is 1-based and NULL out of range, ``array_length`` is NULL for an empty array (it has no
dimension), ``cardinality`` 0.  ``as_text`` re-types text-held values (json, jsonb, uuid, inet, enums).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview import jsontext
from freshview.errors import ExecutionError
from freshview.runtime.expressions import arrow_values as A

Datum = A.Datum


def _rows(ev, args: list[Datum]) -> int:
    return 1 if all(A._is_scalar(a) for a in args) else ev.n


def _per_row(ev, args: list[Datum], fn: Callable[..., object], out_type: pa.DataType, strict: bool = True) -> Datum:
    """``fn`` on each row's values (None where ``strict`` and an argument is NULL); a scalar for scalars."""
    n = _rows(ev, args)
    cols = [A._broadcast(a, n).to_pylist() for a in args]
    try:
        out = [None if strict and None in row else fn(*row) for row in zip(*cols)]
    except ValueError as why:
        raise ExecutionError(str(why)) from None
    result = pa.array(out, out_type)
    return result[0] if all(A._is_scalar(a) for a in args) else result


def _binary(e) -> bool:
    return e.args[0].type.kind == "jsonb"


def op_json_get(ev, e) -> Datum:
    binary = _binary(e)
    return _per_row(ev, ev.strict_args(e.args), lambda j, k: jsontext.get(j, k, False, binary), pa.string())


def op_json_get_text(ev, e) -> Datum:
    binary = _binary(e)
    return _per_row(ev, ev.strict_args(e.args), lambda j, k: jsontext.get(j, k, True, binary), pa.string())


def op_json_path(ev, e) -> Datum:
    binary = _binary(e)
    return _per_row(ev, [ev.visit(a) for a in e.args],
                    lambda j, *p: None if j is None else jsontext.get_path(j, list(p), False, binary),
                    pa.string(), strict=False)


def op_json_path_text(ev, e) -> Datum:
    binary = _binary(e)
    return _per_row(ev, [ev.visit(a) for a in e.args],
                    lambda j, *p: None if j is None else jsontext.get_path(j, list(p), True, binary),
                    pa.string(), strict=False)


def op_jsonb_contains(ev, e) -> Datum:
    return _per_row(ev, ev.strict_args(e.args), jsontext.contains, pa.bool_())


def op_jsonb_exists(ev, e) -> Datum:
    return _per_row(ev, ev.strict_args(e.args), jsontext.exists, pa.bool_())


def op_json_in(ev, e) -> Datum:
    fn = jsontext.jsonb if e.type.kind == "jsonb" else jsontext.json_check
    return _per_row(ev, ev.strict_args(e.args), fn, pa.string())


def op_json_build_object(ev, e) -> Datum:
    binary = e.type.kind == "jsonb"
    kinds = [a.type.kind for a in e.args[1::2]]
    values = [ev.visit(a) for a in e.args]
    if not values:
        return pa.scalar("{}", pa.string())

    def build(*row):
        return jsontext.build_object(list(row[0::2]), list(row[1::2]), kinds, binary)

    return _per_row(ev, values, build, pa.string(), strict=False)


def op_json_agg_finish(ev, e) -> Datum:
    binary = e.type.kind == "jsonb"
    element = e.args[0].type.element
    kind = element.kind if element is not None else "text"
    (arr,) = ev.strict_args(e.args)
    return _per_row(ev, [arr], lambda values: jsontext.agg(values, kind, binary), pa.string())


def op_as_text(ev, e) -> Datum:
    (x,) = ev.strict_args(e.args)
    return x.cast(pa.string())


# ---------------------------------------------------------------------------- MariaDB's JSON functions (MySQL dialect)
def op_mariadb_extract(ev, e) -> Datum:
    steps = [a.value for a in e.args[1:]]  # constant keys and indexes (sql.bind_mysql_json)
    (doc,) = ev.strict_args(e.args[:1])
    return _per_row(ev, [doc], lambda j: jsontext.mariadb_extract(j, steps), pa.string())


def op_json_unquote(ev, e) -> Datum:
    return _per_row(ev, ev.strict_args(e.args), jsontext.mariadb_unquote, pa.string())


def op_mariadb_object(ev, e) -> Datum:
    kinds = [a.type.kind for a in e.args[1::2]]
    values = [ev.visit(a) for a in e.args]
    if not values:
        return pa.scalar("{}", pa.string())
    return _per_row(ev, values, lambda *row: jsontext.mariadb_object(list(row[0::2]), list(row[1::2]), kinds),
                    pa.string(), strict=False)


def op_mariadb_arrayagg_finish(ev, e) -> Datum:
    element = e.args[0].type.element
    kind = element.kind if element is not None else "text"
    (arr,) = ev.strict_args(e.args)
    return _per_row(ev, [arr], lambda values: jsontext.mariadb_arrayagg(values, kind), pa.string())


def op_enum_unknown(ev, e) -> Datum:
    """The ELSE of an enum's rank: NULL for NULL; a label the view's enum type does not have is an error (a
    label added by ALTER TYPE ... ADD VALUE after the view was created), never a silently wrong order."""
    (x,) = ev.strict_args(e.args)
    found = [v for v in (A._broadcast(x, 1).to_pylist() if A._is_scalar(x) else x.to_pylist()) if v is not None]
    if found:
        raise ExecutionError(_unknown_label(e, found[0]))
    return A._null(pa.int32()) if A._is_scalar(x) else pa.nulls(len(x), pa.int32())


def _unknown_label(e, label: str) -> str:
    return (f'enum {e.args[0].type} has no label "{label}" in the view\'s definition (added by ALTER TYPE ... ADD '
            "VALUE since): create the view again")


# ---------------------------------------------------------------------------- arrays
def op_array_length(ev, e) -> Datum:
    (arr,) = ev.strict_args(e.args)
    n = pc.list_value_length(arr)
    return pc.if_else(pc.equal(n, 0), pa.scalar(None, pa.int32()), n.cast(pa.int32()))


def op_cardinality(ev, e) -> Datum:
    (arr,) = ev.strict_args(e.args)
    return pc.list_value_length(arr).cast(pa.int32())


def op_array_element(ev, e) -> Datum:
    arr, index = ev.strict_args(e.args)
    n = _rows(ev, [arr, index])
    lists = A._broadcast(arr, n)
    at = np.asarray(A._broadcast(index, n).fill_null(0).cast(pa.int64()))
    lengths = np.asarray(pc.list_value_length(lists).fill_null(0))
    inside = (at >= 1) & (at <= lengths) & np.asarray(lists.is_valid())
    offsets = np.asarray(lists.offsets)[:-1] if len(lists) else np.zeros(0, np.int64)
    flat = lists.values
    take = np.where(inside, offsets + at - 1, 0)
    out = flat.take(pa.array(take)) if len(flat) else pa.nulls(n, flat.type)
    out = pc.if_else(pa.array(inside), out, pa.scalar(None, flat.type))
    return out[0] if all(A._is_scalar(a) for a in (arr, index)) else out


def op_array_any_eq(ev, e) -> Datum:
    """``x = ANY(arr)``: true if an element equals x; else NULL if x or an element is NULL; else false (NULL
    for a NULL array, false for an empty one)."""
    x, arr = [ev.visit(a) for a in e.args]

    def any_eq(v, values):
        if values is None:
            return None
        if not values:
            return False
        if v is None:
            return None
        if any(w == v for w in values if w is not None):
            return True
        return None if any(w is None for w in values) else False

    return _per_row(ev, [x, arr], any_eq, pa.bool_(), strict=False)


OPS: dict[str, Callable[..., Datum]] = {
    "json_get": op_json_get, "json_get_text": op_json_get_text, "json_path": op_json_path,
    "json_path_text": op_json_path_text, "jsonb_contains": op_jsonb_contains, "jsonb_exists": op_jsonb_exists,
    "json_in": op_json_in, "json_build_object": op_json_build_object, "json_agg_finish": op_json_agg_finish,
    "as_text": op_as_text, "array_length": op_array_length, "cardinality": op_cardinality,
    "array_element": op_array_element, "array_any_eq": op_array_any_eq,
    "mariadb_extract": op_mariadb_extract, "json_unquote": op_json_unquote, "mariadb_object": op_mariadb_object,
    "mariadb_arrayagg_finish": op_mariadb_arrayagg_finish, "enum_unknown": op_enum_unknown,
}
