"""What each set-returning function returns for each row, over Arrow (``plan.flatmap.FlatMap``).

``rows(call, args)`` takes a function's arguments evaluated over n input rows
and returns, per input row, how many rows it returns (``counts``) and those
rows' columns, all input rows' rows in order.  PostgreSQL's semantics:

* ``unnest(array)``: the elements (NULL ones too); a NULL or empty array none;
* ``json[b]_array_elements[_text]``, ``json[b]_each[_text]``, ``json[b]_object_keys``:
  ``freshview.jsontext`` on each value (json's text as written, jsonb's
  canonical; ``_text`` as ``->>``); a NULL none; a value of the wrong kind
  PostgreSQL's error;
* ``generate_series(start, stop[, step])`` over integers or numerics: none when
  an argument is NULL; a zero step is an error; one row's series is capped at
  ``MAX_SERIES_ROWS`` (an error, not a silent cut);
* ``regexp_split_to_table(s, pattern[, flags])``: the pieces between matches
  (the pattern a constant the front end translated to RE2, ``sql.regex``);
* ``string_to_table(s, delimiter[, null_string])``: as PostgreSQL 14+ (a NULL
  delimiter splits into characters, an empty one keeps the string whole, an
  empty string gives no row; pieces equal to ``null_string`` are NULL).

The Spark executor runs the same code on the rows it collects
(``kernels.spark``): the two cannot differ.
"""

from __future__ import annotations

import decimal
import fractions
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview import jsontext
from freshview.errors import ExecutionError
from freshview.plan.flatmap import SrfCall

MAX_SERIES_ROWS = 1_000_000


def rows(call: SrfCall, args: list[pa.Array]) -> tuple[np.ndarray, list[pa.Array]]:
    """Per input row the number of rows ``call`` returns, and those rows' columns (in input order)."""
    args = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in args]
    if call.func == "unnest":
        return _unnest(args[0])
    if call.func == "regexp_split_to_table":
        return _unnest(pc.split_pattern_regex(args[0], call.option))
    per_row = _PER_ROW[call.func]
    columns = [a.to_pylist() for a in args]
    counts = np.zeros(len(args[0]), dtype=np.int64)
    out: list[list] = [[] for _ in call.columns]
    try:
        for i, values in enumerate(zip(*columns)):
            got = per_row(call, *values)
            counts[i] = len(got)
            if len(call.columns) == 1:
                out[0].extend(got)
            else:
                for row in got:
                    for j, v in enumerate(row):
                        out[j].append(v)
    except ValueError as why:
        raise ExecutionError(str(why)) from None
    return counts, [pa.array(vals, t.arrow) for vals, (_, t) in zip(out, call.columns)]


def _unnest(lists: pa.Array) -> tuple[np.ndarray, list[pa.Array]]:
    counts = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return counts, [pc.list_flatten(lists)]


def _elements(call: SrfCall, value, *_):
    if value is None:
        return []
    return jsontext.elements(value, call.func.endswith("_text"), call.func.startswith("jsonb"), call.func)


def _members(call: SrfCall, value, *_):
    if value is None:
        return []
    return jsontext.members(value, call.func.endswith("_text"), call.func.startswith("jsonb"), call.func)


def _keys(call: SrfCall, value, *_):
    if value is None:
        return []
    return jsontext.object_keys(value, call.func.startswith("jsonb"), call.func)


def _series(call: SrfCall, start, stop, step=1):
    if start is None or stop is None or step is None:
        return []
    if step == 0:
        raise ValueError("step size cannot equal zero")
    count = max(0, math.floor(fractions.Fraction(stop - start) / fractions.Fraction(step)) + 1)
    if count > MAX_SERIES_ROWS:
        raise ValueError(f"generate_series(...) of {count} rows for one input row (a view takes at most "
                         f"{MAX_SERIES_ROWS})")
    numeric = call.columns[0][1].kind == "numeric"
    return [decimal.Decimal(start + i * step) if numeric else int(start + i * step) for i in range(count)]


def _string_pieces(call: SrfCall, s, delimiter, null_string=None):
    if s is None:
        return []
    if delimiter is None:
        pieces = list(s)
    elif s == "":
        pieces = []
    elif delimiter == "":
        pieces = [s]
    else:
        pieces = s.split(delimiter)
    return [None if null_string is not None and p == null_string else p for p in pieces]


_PER_ROW = {
    "json_array_elements": _elements, "jsonb_array_elements": _elements,
    "json_array_elements_text": _elements, "jsonb_array_elements_text": _elements,
    "json_each": _members, "jsonb_each": _members, "json_each_text": _members, "jsonb_each_text": _members,
    "json_object_keys": _keys, "jsonb_object_keys": _keys,
    "generate_series": _series, "string_to_table": _string_pieces,
}


def zipped(calls: list[tuple[np.ndarray, list[pa.Array]]], n: int, outer: bool
           ) -> tuple[np.ndarray, list[pa.Array], pa.Array]:
    """Several functions' rows zipped per input row (NULLs for the shorter; with ``outer`` an input row
    no function returns a row for keeps one, all NULL): the input row of each output row, the functions'
    columns, and each output row's position (from 1; NULL on a padded row)."""
    returned = np.zeros(n, dtype=np.int64)
    for counts, _ in calls:
        returned = np.maximum(returned, counts)
    longest = np.maximum(returned, 1) if outer else returned
    parent = np.repeat(np.arange(n, dtype=np.int64), longest)
    starts = np.cumsum(longest) - longest
    position = np.arange(len(parent), dtype=np.int64) - starts[parent]
    columns: list[pa.Array] = []
    for counts, values in calls:
        first = np.cumsum(counts) - counts
        present = position < counts[parent]
        index = pa.array(first[parent] + position, pa.int64(), mask=~present)
        columns += [v.take(index) for v in values]
    ordinality = pa.array(position + 1, pa.int64(), mask=position >= returned[parent])  # NULL on a padded row
    return parent, columns, ordinality


__all__ = ["MAX_SERIES_ROWS", "rows", "zipped"]
