"""The collation key (``collkey``, the collation its parameter) in both evaluators equals ``freshview.collation.key``.

The key's table itself is MariaDB's (tests/sql/test_mysql_dialect.py checks
facts; tests/differential/test_mysql_dialect.py compares whole views with MariaDB).
"""

from __future__ import annotations

import pyarrow as pa

from freshview.collation import fold, key
from freshview.plan.expr import Call, ColumnRef
from freshview.runtime.expressions.arrow import evaluate
from freshview.schema import SqlType
from tests.runtime.test_expressions_arrow import spark_values

TEXT = SqlType("text")
# every BMP character (surrogates aside) once, plus edge cases: PAD SPACE, ß, supplementary characters
VALUES = ["".join(chr(c) for c in range(start, min(start + 512, 0x10000)) if not 0xD800 <= c < 0xE000)
          for start in range(1, 0x10000, 512)]
VALUES += ["Straße  ", "ÁbC", " a ", "a\t", "😀x😺", "", None, "İı"]


def _expr(collation: str, op: str = "collkey") -> Call:
    return Call(TEXT, op, (ColumnRef(TEXT, 0, "s"),), collation)


def test_arrow_key_is_the_collation_key():
    table = pa.table({"c0": pa.array(VALUES, pa.string())})
    for collation in ("utf8mb4_general_ci", "utf8mb4_bin"):
        got = evaluate(_expr(collation), table).to_pylist()
        assert got == [None if v is None else key(v, collation) for v in VALUES]
    assert evaluate(_expr("utf8mb4_general_ci", "collfold"), table).to_pylist() == \
        [None if v is None else fold(v) for v in VALUES]


def test_spark_key_is_the_collation_key(spark):
    table = pa.table({"c0": pa.array(VALUES, pa.string())})
    for collation in ("utf8mb4_general_ci", "utf8mb4_bin"):
        (got,) = spark_values(spark, table, [_expr(collation)], raw=True)
        assert got == [None if v is None else key(v, collation) for v in VALUES]
    (got,) = spark_values(spark, table, [_expr("utf8mb4_general_ci", "collfold")], raw=True)
    assert got == [None if v is None else fold(v) for v in VALUES]
