"""Run generated views through freshview and PostgreSQL and compare them after every step.

``run_case`` takes a :class:`~tests.fuzz.generate.Case` (schema + queries),
creates the tables and views in PostgreSQL (a view PostgreSQL rejects is a
generator bug, counted in ``Stats.invalid``), registers the sources and every
view on one ``IncrementalFlow`` per executor (some views before the initial
load, some after), applies the same random steps (inserts, updates, deletes,
NULLs, duplicate rows in keyless tables; ``tests.support.streams``) to both
and compares each view's snapshot with PostgreSQL's answer as a multiset
(numbers within a tolerance) after every step.

Outcomes per view:

* freshview refuses it with ``UnsupportedSqlError`` and a message: counted in
  ``Stats.refused`` by the message's first line (aliases blanked), not a failure;
* any other exception (at registration, tick or snapshot), a refusal without
  a message, another ``SqlError`` on SQL PostgreSQL accepts, or a wrong
  result: a :class:`Failure`, printed with seed, query index, schema, SQL,
  step, executor and a minimal diff, and the command that replays it.

A tick that raises cannot be pinned on one view of the flow: each view of
that flow is then run alone (same seed, same streams) to find the culprit(s).
"""

from __future__ import annotations

import random
import re
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import psycopg
from psycopg.types.json import set_json_loads

from freshview.errors import SqlError, UnsupportedSqlError
from freshview.runtime.cost import EXECUTORS
from freshview.schema import schema_from_ddl
from tests.fuzz.generate import NULL_PROB, Case
from tests.support.oracle import PgOracle, diff_rows, table_rows
from tests.support.streams import RandomTable

_SHOWN = 8


@dataclass
class Failure:
    seed: int
    index: int
    sql: str
    schema: str
    kind: str              # crash | wrong | refusal-without-message | rejected
    step: int | None
    execution: str | None
    detail: str

    def render(self) -> str:
        return (f"FUZZ FAILURE ({self.kind}) seed={self.seed} query={self.index} step={self.step} "
                f"execution={self.execution}\n"
                f"  replay: python3 -m tests.fuzz --seed {self.seed} --only {self.index}\n"
                f"  schema:\n{self.schema}\n  sql: {self.sql}\n"
                + "\n".join("  " + line for line in self.detail.splitlines()))


@dataclass
class Stats:
    cases: int = 0
    queries: int = 0          # valid queries run (PostgreSQL accepted them)
    passed: int = 0           # compared after every step, never differed
    empty: int = 0            # of those: views PostgreSQL had no row in at any step (checked little)
    refused: Counter = field(default_factory=Counter)   # refusal message (normalized) -> count
    unlocated: int = 0        # refusals without a line/column
    invalid: list[str] = field(default_factory=list)    # generator bugs: PostgreSQL rejected the SQL
    pg_errors: int = 0        # PostgreSQL failed evaluating a view on some data (skipped)
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"cases={self.cases} queries={self.queries} passed={self.passed} (always empty {self.empty}) "
                 f"refused={sum(self.refused.values())} (unlocated {self.unlocated}) "
                 f"failures={len(self.failures)} invalid={len(self.invalid)} pg_errors={self.pg_errors}"]
        for msg, n in self.refused.most_common():
            lines.append(f"  refused {n:4d}x  {msg}")
        kinds = Counter(f.kind for f in self.failures)
        for kind, n in kinds.most_common():
            lines.append(f"  failure {n:4d}x  {kind}")
        return "\n".join(lines)


def refusal_key(exc: SqlError) -> str:
    """A refusal's message, one line, with generated names blanked (so equal refusals group)."""
    text = (exc.message or "").splitlines()[0] if exc.message else ""
    text = re.sub(r"\b[axw]\d+\b", "_", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    return text[:120]


def _exc_text(exc: BaseException) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "".join(tb[-6:]).rstrip()


def _diff_text(actual: Any, expected: Any) -> str | None:
    a_rows, e_rows = table_rows(actual), table_rows(expected)
    if actual.num_columns != expected.num_columns:
        return f"actual has {actual.num_columns} columns, expected {expected.num_columns}"
    only_a, only_e = diff_rows(a_rows, e_rows)
    if not only_a and not only_e:
        return None
    lines = [f"rows differ: actual {len(a_rows)}, expected {len(e_rows)} "
             f"({len(only_a)} only in freshview, {len(only_e)} only in PostgreSQL)"]
    for title, rows in (("only in freshview", only_a), ("only in PostgreSQL", only_e)):
        if rows:
            lines.append(f"{title}:")
            lines += [f"  {r!r}" for r in sorted(rows, key=repr)[:_SHOWN]]
            if len(rows) > _SHOWN:
                lines.append(f"  ... and {len(rows) - _SHOWN} more")
    return "\n".join(lines)


def run_case(case: Case, make_flow: Callable[..., Any], oracle: PgOracle, *, steps: int = 5,
             executions: Sequence[str] = EXECUTORS, only: Sequence[int] | None = None,
             stats: Stats | None = None, isolate: bool = True, initial_rows: int = 12) -> Stats:
    """Run every query of ``case`` (or those in ``only``) for ``steps`` steps; add outcomes to ``stats``."""
    stats = stats if stats is not None else Stats()
    stats.cases += 1
    schema_text = case.schema_text()
    rng = random.Random(f"{case.seed}:steps")
    oracle.reset()
    # jsonb as PostgreSQL prints it (freshview holds that text), not parsed
    set_json_loads(lambda data: data.decode() if isinstance(data, (bytes, memoryview)) else data, oracle.conn)
    tables: dict[str, RandomTable] = {}
    for t in case.tables:
        schema = schema_from_ddl(t.ddl, t.primary_key)
        oracle.create_table(t.name, schema)
        tables[t.name] = RandomTable(t.name, schema, random.Random(f"{case.seed}:{t.name}"), t.domains(),
                                     null_prob=NULL_PROB)
    indices = list(only) if only is not None else list(range(len(case.queries)))
    views: dict[int, str] = {}
    for i in indices:
        try:
            oracle.create_view(f"q{i}", case.queries[i])
        except psycopg.Error as exc:
            stats.invalid.append(f"seed={case.seed} query={i}: {str(exc).splitlines()[0]}\n  {case.queries[i]}")
            continue
        views[i] = f"q{i}"
    # Each query's place (before or after the initial load) has its own draw, so the
    # streams and places do not depend on which or how many queries run (``only``, regressions).
    late_all = [random.Random(f"{case.seed}:late:{i}").random() < 0.5 for i in range(len(case.queries))]
    stats.queries += len(views)

    # The in-process executor also computes a view's first result in-process (the Spark flow does it on Spark).
    flows = {e: make_flow(execution=e, **({"first_computation": "local"} if e == "local" else {}))
             for e in executions}
    for flow in flows.values():
        for t in case.tables:
            flow.register_source(t.name, t.ddl, primary_key=t.primary_key or None)
    active: set[tuple[int, str]] = set()
    failed: set[int] = set()
    had_rows: set[int] = set()
    crashed: dict[str, int] = {}   # executor -> step whose tick raised
    crash_exc: dict[str, BaseException] = {}

    def fail(i: int, kind: str, step: int | None, e: str | None, detail: str) -> None:
        failed.add(i)
        active.difference_update({(i, x) for x in executions} if e is None else {(i, e)})
        stats.failures.append(Failure(case.seed, i, case.queries[i], schema_text, kind, step, e, detail))

    def register(i: int, step: int) -> None:
        for e, flow in flows.items():
            try:
                flow.register_view(views[i], case.queries[i])
            except UnsupportedSqlError as exc:
                if not (exc.message or "").strip():
                    fail(i, "refusal-without-message", step, e, repr(exc))
                else:
                    stats.refused[refusal_key(exc)] += 1
                    stats.unlocated += exc.location is None
                    failed.add(i)
                active.difference_update({(i, x) for x in executions})
                return
            except SqlError as exc:
                fail(i, "rejected", step, e, f"{type(exc).__name__}: {exc}")
                return
            except Exception as exc:
                fail(i, "crash", step, e, f"register_view raised\n{_exc_text(exc)}")
                return
            active.add((i, e))

    def tick(deltas: dict[str, Any], step: int) -> None:
        together = len(deltas) > 1 or rng.random() < 0.5
        for e, flow in flows.items():
            if e in crashed:
                continue
            try:
                if together:
                    flow.tick(deltas)
                else:
                    for name, delta in deltas.items():
                        flow.tick(name, delta)
            except Exception as exc:
                crashed[e] = step
                crash_exc[e] = exc

    def compare(step: int) -> None:
        for name, table in tables.items():
            oracle.load(name, table.current())
        for i in sorted({i for i, _ in active}):
            try:
                expected = oracle.query(views[i])
            except psycopg.Error:
                stats.pg_errors += 1
                failed.add(i)
                active.difference_update({(i, x) for x in executions})
                continue
            if expected.num_rows:
                had_rows.add(i)
            for e, flow in flows.items():
                if (i, e) not in active or e in crashed:
                    continue
                try:
                    actual = flow.snapshot(views[i])
                except Exception as exc:
                    fail(i, "crash", step, e, f"snapshot raised\n{_exc_text(exc)}")
                    continue
                diff = _diff_text(actual, expected)
                if diff is not None:
                    fail(i, "wrong", step, e, diff)

    try:
        for i in views:
            if not late_all[i]:
                register(i, 0)
        tick({n: t.step(initial_rows, inserts_only=True) for n, t in tables.items()}, 0)
        for i in views:
            if late_all[i]:
                register(i, 0)
        compare(0)
        for step in range(1, steps + 1):
            if not active:
                break
            chosen = rng.sample(sorted(tables), rng.randint(1, len(tables)))
            tick({n: tables[n].step(rng.randint(1, 8)) for n in chosen}, step)
            compare(step)
    finally:
        for flow in flows.values():
            try:
                flow.close()
            except Exception:
                pass

    for e, step in crashed.items():
        suspects = sorted(i for i, x in active if x == e)
        if len(suspects) == 1 or not isolate:
            for i in suspects:
                fail(i, "crash", step, e, f"tick raised\n{_exc_text(crash_exc[e])}")
            continue
        before = len(stats.failures)
        for i in suspects:
            alone = Stats()
            run_case(case, make_flow, oracle, steps=step, executions=[e], only=[i], stats=alone, isolate=False)
            stats.failures += alone.failures
            failed.update(f.index for f in alone.failures)
        if len(stats.failures) == before:
            for i in suspects:
                fail(i, "crash", step, e, f"tick raised (not alone: together with queries {suspects})\n"
                                          f"{_exc_text(crash_exc[e])}")
    stats.passed += sum(1 for i in views if i not in failed)
    stats.empty += sum(1 for i in views if i not in failed and i not in had_rows)
    return stats
