"""Shrink a failing query: drop clauses and simplify expressions while the failure persists.

Works on sqlglot's tree of the query (the parser freshview itself uses).
Each candidate is one edit: a WHERE/HAVING/GROUP BY/DISTINCT/ORDER BY/LIMIT
dropped, a SELECT item dropped, a join dropped, a set operation replaced by
one side, a boolean AND/OR by one operand, a CASE/COALESCE/NULLIF/function
call/arithmetic by one of its arguments.  A candidate is kept when
PostgreSQL accepts it and running it in the failing query's place (same seed,
so the same streams) fails the same way (same kind, same executor);
greedy, first improvement, until no edit helps or the budget runs out.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Iterator

import sqlglot
from sqlglot import exp

from tests.fuzz.generate import Case
from tests.fuzz.run import Failure, Stats, run_case


def _candidates(sql: str) -> Iterator[str]:
    tree = sqlglot.parse_one(sql, read="postgres")
    nodes = list(tree.walk())

    def emit(mutate: Callable[[exp.Expression], Any], i: int) -> str | None:
        copy = tree.copy()
        node = list(copy.walk())[i]
        try:
            mutate(node)
            return copy.sql(dialect="postgres")
        except Exception:
            return None

    for i, node in enumerate(nodes):
        # whole branches first: the biggest cuts
        if isinstance(node, (exp.Union, exp.Intersect, exp.Except)):
            for side in ("this", "expression"):
                yield emit(lambda n, side=side: n.replace(n.args[side].copy()), i)
        if isinstance(node, exp.Select):
            if len(node.expressions) > 1:
                for j in range(len(node.expressions)):
                    yield emit(lambda n, j=j: n.expressions.pop(j), i)
            for j in range(len(node.args.get("joins") or [])):
                yield emit(lambda n, j=j: n.args["joins"].pop(j), i)
            # (never ORDER BY alone: with a LIMIT the result would no longer be determined)
            for key in ("where", "having", "group", "distinct", "limit", "offset", "with"):
                if node.args.get(key):
                    yield emit(lambda n, key=key: n.set(key, None), i)
    for i, node in enumerate(nodes):
        if isinstance(node, (exp.And, exp.Or)):
            for side in ("this", "expression"):
                yield emit(lambda n, side=side: n.replace(n.args[side].copy()), i)
        elif isinstance(node, exp.Not):
            yield emit(lambda n: n.replace(n.this.copy()), i)
        elif isinstance(node, exp.Case):
            for branch in node.args.get("ifs") or []:
                yield emit(lambda n, b=branch: n.replace(b.args["true"].copy()), i)
            if node.args.get("default") is not None:
                yield emit(lambda n: n.replace(n.args["default"].copy()), i)
        elif isinstance(node, exp.Window):
            pass
        elif isinstance(node, (exp.Func, exp.Binary, exp.Paren)) and not isinstance(node, exp.AggFunc):
            for child in list(node.iter_expressions()):
                if isinstance(child, (exp.Column, exp.Func, exp.Binary, exp.Paren, exp.Literal, exp.Cast, exp.Case)):
                    yield emit(lambda n, c=child: n.replace(c.copy()), i)


def shrink(case: Case, failure: Failure, make_flow: Callable[..., Any], oracle: Any,
           budget_seconds: float = 300, log: Callable[[str], None] = lambda s: None) -> str:
    """The smallest variant of ``case.queries[failure.index]`` found that still fails like ``failure``."""
    i, deadline = failure.index, time.monotonic() + budget_seconds
    executions = [failure.execution] if failure.execution else None
    steps = failure.step or 0
    best = case.queries[i]
    tried: set[str] = {best}

    def still_fails(sql: str) -> bool:
        queries = list(case.queries)
        queries[i] = sql
        stats = Stats()
        kwargs = {"executions": executions} if executions else {}
        run_case(replace(case, queries=queries), make_flow, oracle, steps=steps, only=[i], stats=stats,
                 isolate=False, **kwargs)
        return any(f.kind == failure.kind for f in stats.failures)

    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for cand in _candidates(best):
            if time.monotonic() > deadline:
                break
            if cand is None or cand in tried or len(cand) >= len(best):
                continue
            tried.add(cand)
            if still_fails(cand):
                log(f"shrunk to {len(cand)} chars: {cand}")
                best, improved = cand, True
                break
    return best
