"""json/jsonb and array functions lowered to Spark Columns (the Spark executor); the twin of ``arrow_json``.

The json ops are Python UDFs over ``freshview.jsontext`` (Spark's own JSON functions re-serialize and follow
other rules), so both executors give the same text.  The UDFs and ``jsontext`` are pickled by value: a Spark
worker needs no freshview to run them.  Array ops are Spark's own functions with PostgreSQL's NULL and range
rules made explicit (``size`` of NULL is -1 in Spark, ``element_at`` out of range raises under ANSI).
"""

from __future__ import annotations

from typing import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as st

from freshview import jsontext
from freshview.runtime.expressions import pgtext
from freshview.plan.expr import Call

_registered = False


def _udf(fn: Callable, returns: st.DataType) -> Callable[..., Column]:
    global _registered
    if not _registered:
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(jsontext)
        cloudpickle.register_pickle_by_value(pgtext)
        _registered = True
    return F.udf(fn, returns)


def _binary(e: Call) -> bool:
    return e.args[0].type.kind == "jsonb"


def json_get(e: Call, a: list[Column], param: str) -> Column:
    binary = _binary(e)
    fn = _udf(lambda j, k: None if j is None or k is None else jsontext.get(j, k, False, binary), st.StringType())
    return fn(*a)


def json_get_text(e: Call, a: list[Column], param: str) -> Column:
    binary = _binary(e)
    fn = _udf(lambda j, k: None if j is None or k is None else jsontext.get(j, k, True, binary), st.StringType())
    return fn(*a)


def json_path(e: Call, a: list[Column], param: str) -> Column:
    binary = _binary(e)
    fn = _udf(lambda j, *p: None if j is None else jsontext.get_path(j, list(p), False, binary), st.StringType())
    return fn(*a)


def json_path_text(e: Call, a: list[Column], param: str) -> Column:
    binary = _binary(e)
    fn = _udf(lambda j, *p: None if j is None else jsontext.get_path(j, list(p), True, binary), st.StringType())
    return fn(*a)


def jsonb_contains(e: Call, a: list[Column], param: str) -> Column:
    return _udf(lambda x, y: None if x is None or y is None else jsontext.contains(x, y), st.BooleanType())(*a)


def jsonb_exists(e: Call, a: list[Column], param: str) -> Column:
    return _udf(lambda x, k: None if x is None or k is None else jsontext.exists(x, k), st.BooleanType())(*a)


def json_in(e: Call, a: list[Column], param: str) -> Column:
    binary = e.type.kind == "jsonb"
    return _udf(lambda t: None if t is None else (jsontext.jsonb(t) if binary else jsontext.json_check(t)),
                st.StringType())(*a)


def json_build_object(e: Call, a: list[Column], param: str) -> Column:
    binary = e.type.kind == "jsonb"
    kinds = [x.type.kind for x in e.args[1::2]]
    if not a:
        return F.lit("{}")
    return _udf(lambda *row: jsontext.build_object(list(row[0::2]), list(row[1::2]), kinds, binary),
                st.StringType())(*a)


def json_agg_finish(e: Call, a: list[Column], param: str) -> Column:
    binary = e.type.kind == "jsonb"
    element = e.args[0].type.element
    kind = element.kind if element is not None else "text"
    return _udf(lambda values: jsontext.agg(values, kind, binary), st.StringType())(*a)


def as_text(e: Call, a: list[Column], param: str) -> Column:
    return a[0].cast("string")


# ---------------------------------------------------------------------------- MariaDB's JSON functions (MySQL dialect)
def mariadb_extract(e: Call, a: list[Column], param: str) -> Column:
    steps = [x.value for x in e.args[1:]]  # constant keys and indexes (sql.bind_mysql_json)
    return _udf(lambda j: None if j is None else jsontext.mariadb_extract(j, steps), st.StringType())(a[0])


def json_unquote(e: Call, a: list[Column], param: str) -> Column:
    return _udf(lambda t: None if t is None else jsontext.mariadb_unquote(t), st.StringType())(*a)


def mariadb_object(e: Call, a: list[Column], param: str) -> Column:
    kinds = [x.type.kind for x in e.args[1::2]]
    if not a:
        return F.lit("{}")
    return _udf(lambda *row: jsontext.mariadb_object(list(row[0::2]), list(row[1::2]), kinds), st.StringType())(*a)


def mariadb_arrayagg_finish(e: Call, a: list[Column], param: str) -> Column:
    element = e.args[0].type.element
    kind = element.kind if element is not None else "text"
    return _udf(lambda values: jsontext.mariadb_arrayagg(values, kind), st.StringType())(*a)


def enum_unknown(e: Call, a: list[Column], param: str) -> Column:
    message = F.concat(F.lit(f'enum {e.args[0].type} has no label "'), a[0], F.lit(
        "\" in the view's definition (added by ALTER TYPE ... ADD VALUE since): create the view again"))
    return F.when(a[0].isNull(), F.lit(None).cast("int")).otherwise(F.raise_error(message).cast("int"))


# ---------------------------------------------------------------------------- arrays
def array_length(e: Call, a: list[Column], param: str) -> Column:
    n = F.size(a[0])
    return F.when(a[0].isNull() | (n == 0), F.lit(None).cast("int")).otherwise(n.cast("int"))


def cardinality(e: Call, a: list[Column], param: str) -> Column:
    return F.when(a[0].isNull(), F.lit(None).cast("int")).otherwise(F.size(a[0]).cast("int"))


def array_element(e: Call, a: list[Column], param: str) -> Column:
    arr, i = a
    return F.when((i >= 1) & (i <= F.size(arr)), F.element_at(arr, i)).otherwise(
        F.lit(None).cast(e.type.spark()))


def array_any_eq(e: Call, a: list[Column], param: str) -> Column:
    x, arr = a
    return (F.when(arr.isNull(), F.lit(None).cast("boolean"))
            .when(F.size(arr) == 0, F.lit(False))
            .when(x.isNull(), F.lit(None).cast("boolean"))
            .when(F.exists(arr, lambda y: y == x), F.lit(True))
            .when(F.exists(arr, lambda y: y.isNull()), F.lit(None).cast("boolean"))
            .otherwise(F.lit(False)))


def array_text(e: Call, a: list[Column], param: str) -> Column:
    kind = e.args[0].type.element.kind
    return _udf(lambda v: None if v is None else pgtext.array_text(list(v), kind), st.StringType())(*a)


def jsonb_key(e: Call, a: list[Column], param: str) -> Column:
    return _udf(lambda j: None if j is None else jsontext.equality_key(j), st.StringType())(*a)


LOWER: dict[str, Callable[[Call, list[Column], str], Column]] = {
    "json_get": json_get, "json_get_text": json_get_text, "json_path": json_path, "json_path_text": json_path_text,
    "jsonb_contains": jsonb_contains, "jsonb_exists": jsonb_exists, "json_in": json_in,
    "json_build_object": json_build_object, "json_agg_finish": json_agg_finish, "as_text": as_text,
    "array_length": array_length, "cardinality": cardinality, "array_element": array_element,
    "array_any_eq": array_any_eq, "mariadb_extract": mariadb_extract, "json_unquote": json_unquote,
    "mariadb_object": mariadb_object, "mariadb_arrayagg_finish": mariadb_arrayagg_finish,
    "enum_unknown": enum_unknown, "jsonb_key": jsonb_key, "array_text": array_text,
}
