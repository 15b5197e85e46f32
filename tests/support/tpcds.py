"""Small TPC-DS-shaped tables whose value domains make a group of queries' predicates match.

``shaped(queries, seed)`` reads the literals each query compares a column with
(``d_year = 2000``, ``i_category IN ('Music', ...)``, ``ss_list_price BETWEEN
100 AND 110``, ``substr(ca_zip, 1, 5) IN (...)``) and uses them as that
column's domain, so that filters select rows without any per-query tuning.

* Dimensions are fixed rows (loaded once; the random steps change the facts):
  ``date_dim`` is a consistent calendar over the years and months the queries
  name (month/week sequence numbers, day of week and month derived from the
  date, so that ``(SELECT DISTINCT d_month_seq ... WHERE d_year = .. AND
  d_moy = ..)`` is one value as on real data), ``time_dim`` the half hours of
  a day, the others a dozen rows or so drawing each column from its literals
  (or a small default domain) and foreign keys from the referenced table's keys.
* Facts are random tables (``tests.support.streams.RandomTable`` domains):
  foreign keys from the dimensions' keys with a few NULLs, ticket and order
  numbers from a small range so that returns match sales, measures from the
  literals or a few amounts.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any, Callable

from sqlglot import exp, parse_one

from benchmarks.tpcds.schema import FACTS, TABLES
from freshview.schema import SqlType, schema_from_ddl

# Rows per dimension (date_dim and time_dim are derived).
SIZES = {"item": 14, "customer": 12, "customer_address": 10, "customer_demographics": 14,
         "household_demographics": 12, "store": 4, "warehouse": 3, "promotion": 4, "web_site": 3, "web_page": 4,
         "call_center": 3, "catalog_page": 4, "ship_mode": 4, "reason": 4, "income_band": 4}
# Foreign-key columns (by name ending) and the table whose key they reference.
REFERENCES = [("date_sk", "date_dim"), ("time_sk", "time_dim"), ("item_sk", "item"), ("customer_sk", "customer"),
              ("cdemo_sk", "customer_demographics"), ("hdemo_sk", "household_demographics"),
              ("addr_sk", "customer_address"), ("store_sk", "store"), ("promo_sk", "promotion"),
              ("warehouse_sk", "warehouse"), ("ship_mode_sk", "ship_mode"), ("web_page_sk", "web_page"),
              ("site_sk", "web_site"), ("call_center_sk", "call_center"), ("catalog_page_sk", "catalog_page"),
              ("reason_sk", "reason"), ("income_band_sk", "income_band"), ("date_sk", "date_dim")]
NUMBERS = range(1, 9)  # ticket and order numbers: small, so returns find their sales
AMOUNTS = [Decimal(v) for v in ("0.50", "12.25", "55.00", "101.00", "160.75")]
NULL_FK = 0.04
EPOCH = dt.date(1900, 1, 1)
DAY_NAMES = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

SCHEMAS = {name: schema_from_ddl(ddl, pk) for name, (ddl, pk) in TABLES.items()}
OWNER = {c.name: t for t, s in SCHEMAS.items() for c in s.columns}


def tables_of(sql: str) -> set[str]:
    return {t.name.lower() for t in parse_one(sql, read="postgres").find_all(exp.Table)} & set(TABLES)


def _literal(e: exp.Expression) -> Any:
    """The value of a constant expression of the query texts, or None."""
    if isinstance(e, exp.Paren):
        return _literal(e.this)
    if isinstance(e, exp.Literal):
        if e.is_string:
            text = e.this
            try:
                y, m, d = (int(p) for p in text.split("-"))
                return dt.date(y, m, d)
            except ValueError:
                return text
        return Decimal(e.this) if "." in e.this else int(e.this)
    if isinstance(e, exp.Neg):
        v = _literal(e.this)
        return -v if isinstance(v, (int, Decimal)) else None
    if isinstance(e, exp.Cast):
        return _literal(e.this)
    if isinstance(e, exp.Interval):
        v = _literal(e.this)
        unit = (e.args.get("unit").name if e.args.get("unit") else "day").lower()
        if isinstance(v, str):
            v, _, unit = v.partition(" ")
            v = int(v) if v.isdigit() else None
        return dt.timedelta(days=v) if isinstance(v, int) and unit.startswith("day") else None
    if isinstance(e, (exp.Add, exp.Sub, exp.Mul)):
        a, b = _literal(e.this), _literal(e.expression)
        if a is None or b is None:
            return None
        try:
            return a + b if isinstance(e, exp.Add) else a - b if isinstance(e, exp.Sub) else a * b
        except TypeError:
            return None
    return None


def literals(queries: list[str]) -> dict[str, list[Any]]:
    """Column name -> the constants the queries compare it (or a function of it alone) with."""
    found: dict[str, list[Any]] = {}

    def record(side: exp.Expression, values: list[Any]) -> None:
        names = {c.name.lower() for c in side.find_all(exp.Column)}
        if len(names) == 1 and next(iter(names)) in OWNER:
            found.setdefault(names.pop(), []).extend(v for v in values if v is not None)

    for sql in queries:
        for node in parse_one(sql, read="postgres").walk():
            if isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like)):
                for side, other in ((node.this, node.expression), (node.expression, node.this)):
                    value = _literal(other)
                    if value is not None and isinstance(node, exp.Like) and isinstance(value, str):
                        value = value.replace("%", "").replace("_", "x")
                    record(side, [value])
            elif isinstance(node, exp.In) and node.args.get("expressions"):
                record(node.this, [_literal(e) for e in node.expressions])
            elif isinstance(node, exp.Between):
                low, high = _literal(node.args["low"]), _literal(node.args["high"])
                mid = None
                if isinstance(low, int) and isinstance(high, int):
                    mid = (low + high) // 2
                elif isinstance(low, dt.date) and isinstance(high, dt.date):
                    mid = low + (high - low) / 2
                record(node.this, [low, high, mid])
    return found


def _convert(value: Any, t: SqlType) -> Any:
    if value is None:
        return None
    if t.is_integer:
        return int(value) if isinstance(value, (int, Decimal)) and value == int(value) else None
    if t.kind == "numeric":
        if not isinstance(value, (int, Decimal)):
            return None
        _, scale = t.decimal_precision_scale
        return Decimal(value).quantize(Decimal(1).scaleb(-scale))
    if t.kind == "text":
        return value if isinstance(value, str) else str(value) if isinstance(value, int) else None
    if t.kind == "date":
        return value if isinstance(value, dt.date) else None
    return None


def _default(t: SqlType, rng: random.Random) -> Any:
    if t.is_integer:
        return rng.randint(1, 5)
    if t.kind == "numeric":
        return rng.choice(AMOUNTS)
    if t.kind == "text":
        return rng.choice(["a", "b", "N", "Y"])
    if t.kind == "date":
        return dt.date(2000, 1, 1) + dt.timedelta(days=rng.randrange(0, 1500, 30))
    raise ValueError(t)


class Shape:
    """The domains and fixed rows of one group of queries."""

    def __init__(self, queries: list[str], seed: int) -> None:
        self.rng = random.Random(seed)
        self.lits = literals(queries)
        self.tables = sorted(set().union(*(tables_of(q) for q in queries)))
        self.dates = self._calendar()
        self.keys: dict[str, list[int]] = {"date_dim": [self._date_sk(d) for d in self.dates],
                                           "time_dim": [h * 3600 + m * 60 for h in range(24) for m in (0, 30)]}
        for name, n in SIZES.items():
            self.keys[name] = list(range(1, n + 1))

    # ---------------------------------------------------------------- calendar
    def _calendar(self) -> list[dt.date]:
        years = {v for v in self.lits.get("d_year", []) if isinstance(v, int)}
        years |= {1900 + v // 12 for v in self.lits.get("d_month_seq", []) if isinstance(v, int)}
        literal_dates = [v for c, vs in self.lits.items() if OWNER[c] == "date_dim" for v in vs
                         if isinstance(v, dt.date)]
        years |= {d.year for d in literal_dates}
        years = sorted(y for y in years if 1990 <= y <= 2010) or [2000]
        months = sorted({v for v in self.lits.get("d_moy", []) if isinstance(v, int) and 1 <= v <= 12})
        months = months + [m for m in (1, 12) if m not in months] if months else list(range(1, 13))
        days = {dt.date(y, m, d) for y in years for m in months for d in (1, 2, 3, 5, 25, 28)}
        if len(years) <= 2:  # one year's Sundays through Saturdays (q2's weekday columns, q43, q59)
            days |= {dt.date(years[0], 3, d) for d in range(8, 15)}
        for d in literal_dates:
            days |= {d + dt.timedelta(days=k) for k in (-1, 0, 1, 2, 7, 14, 29, 31, 45, 59, 61, 89, 91)}
        return sorted(days)

    @staticmethod
    def _date_sk(d: dt.date) -> int:
        return 2415021 + (d - EPOCH).days

    def _date_row(self, d: dt.date) -> dict[str, Any]:
        month_seq = (d.year - 1900) * 12 + d.month - 1
        week_seq = (d - EPOCH).days // 7 + 1
        qoy = (d.month - 1) // 3 + 1
        dow = d.isoweekday() % 7  # Sunday 0
        return {"d_date_sk": self._date_sk(d), "d_date_id": f"D{self._date_sk(d)}", "d_date": d,
                "d_month_seq": month_seq, "d_week_seq": week_seq, "d_quarter_seq": (d.year - 1900) * 4 + qoy,
                "d_year": d.year, "d_dow": dow, "d_moy": d.month, "d_dom": d.day, "d_qoy": qoy,
                "d_fy_year": d.year, "d_fy_quarter_seq": (d.year - 1900) * 4 + qoy, "d_fy_week_seq": week_seq,
                "d_day_name": DAY_NAMES[d.weekday()], "d_quarter_name": f"{d.year}Q{qoy}",
                "d_holiday": "N", "d_weekend": "Y" if dow in (0, 6) else "N", "d_following_holiday": "N",
                "d_first_dom": self._date_sk(d.replace(day=1)), "d_last_dom": self._date_sk(d.replace(day=28)),
                "d_same_day_ly": self._date_sk(d) - 365, "d_same_day_lq": self._date_sk(d) - 91,
                "d_current_day": "N", "d_current_week": "N", "d_current_month": "N", "d_current_quarter": "N",
                "d_current_year": "N"}

    def _time_row(self, sk: int) -> dict[str, Any]:
        h, m = sk // 3600, sk % 3600 // 60
        meal = "breakfast" if 6 <= h < 9 else "lunch" if 11 <= h < 14 else "dinner" if 17 <= h < 20 else None
        return {"t_time_sk": sk, "t_time_id": f"T{sk}", "t_time": sk, "t_hour": h, "t_minute": m, "t_second": 0,
                "t_am_pm": "AM" if h < 12 else "PM", "t_shift": "first", "t_sub_shift": "morning",
                "t_meal_time": meal}

    # ---------------------------------------------------------------- domains
    def _referenced(self, table: str, column: str) -> str | None:
        if column in SCHEMAS[table].primary_key and table not in FACTS:
            return None
        for ending, target in REFERENCES:
            if column.endswith(ending):
                return target
        return None

    def domain(self, table: str, column: str, t: SqlType) -> list[Any] | None:
        """Candidate values of one column (None: the test harness's default)."""
        target = self._referenced(table, column)
        if target is not None:
            return self.keys[target]
        if column.endswith(("_ticket_number", "_order_number")):
            return list(NUMBERS)
        if column.endswith("_id") and t.kind == "text":
            return [f"ID{k}" for k in range(1, 6)]
        if column.endswith("return_quantity"):
            return [1]  # below every sale's quantity: net quantities stay positive (q75, q78 divide by them)
        # No zero measures: the queries divide by sums and counts of them, and a zero divisor is an error.
        values = [v for v in (_convert(x, t) for x in self.lits.get(column, [])) if v is not None and v != 0]
        if column.endswith("quantity"):
            values += [2, 3, 5]
        if values:
            return sorted(set(values), key=repr) + [_default(t, self.rng)]
        if t.kind == "numeric" or t.is_integer:
            return [_default(t, self.rng) for _ in range(4)]
        return None

    def fixed_rows(self) -> dict[str, list[tuple]]:
        out = {}
        for name in self.tables:
            if name in FACTS:
                continue
            schema = SCHEMAS[name]
            if name == "date_dim":
                rows = [self._date_row(d) for d in self.dates]
            elif name == "time_dim":
                rows = [self._time_row(sk) for sk in self.keys["time_dim"]]
            else:
                rows = []
                for key in self.keys[name]:
                    row = {}
                    for c in schema.columns:
                        if c.name in schema.primary_key:
                            row[c.name] = key
                            continue
                        dom = self.domain(name, c.name, c.type)
                        value = self.rng.choice(dom) if dom else _default(c.type, self.rng)
                        row[c.name] = None if c.nullable and self.rng.random() < 0.03 else value
                    rows.append(row)
            out[name] = [tuple(r[c.name] for c in schema.columns) for r in rows]
        return out

    def sources(self) -> dict[str, tuple]:
        spec = {}
        for name in self.tables:
            ddl, pk = TABLES[name]
            domains: dict[str, Any] = {}
            if name in FACTS:
                for c in SCHEMAS[name].columns:
                    dom = self.domain(name, c.name, c.type)
                    if dom is None:
                        continue
                    nullable = c.nullable and c.name not in pk
                    domains[c.name] = _with_nulls(dom) if nullable else dom
            spec[name] = (ddl, pk, domains)
        return spec


def _with_nulls(values: list[Any]) -> Callable[[random.Random], Any]:
    return lambda rng: None if rng.random() < NULL_FK else rng.choice(values)
