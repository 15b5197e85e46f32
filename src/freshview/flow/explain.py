"""``IncrementalFlow.explain``'s text: a view as the engine runs it, pure (no store, no flow).

The view's columns, the execution mode and the executor its last step and first computation ran on
(with the cost model's reasons), the state TTL's evicting operators, the logical plan and the
incremental circuit with the rows each arrangement holds.
"""

from __future__ import annotations

from typing import Mapping

from freshview.circuit import render
from freshview.plan.explain import render as render_plan
from freshview.runtime.engine import EngineView


def explain_text(name: str, view: EngineView, execution: str, counts: Mapping[str, int],
                 state_ttl: float | None = None, tracked: Mapping[str, int] | None = None) -> str:
    """``counts``: rows per arrangement of the view; ``tracked``: under a TTL, keys per evicting operator."""
    cols = ", ".join(f"{n} {t}" for n, t in view.columns)
    last = f"last step: {view.last.executor} ({view.last.reason})" if view.last else "last step: none yet"
    first = f"{view.first.executor} ({view.first.reason})" if view.first else "before this process (resumed)"
    lines = [f"view {name} ({cols})", f"execution: {execution}; {last}", f"first computation: {first}"]
    if state_ttl is not None:
        evicting = ", ".join(f"{op} {n} keys" for op, n in (tracked or {}).items())
        lines.append(f"state ttl: {state_ttl:g} s; evicting: {evicting or 'nothing (no keyed state)'}")
    return "\n".join(lines + [
        f"cost model: {view.cost.describe()}",
        "logical plan (after pushdown and pruning):",
        _indent(render_plan(view.plan)),
        "incremental circuit:",
        render(view.circuit, counts),
    ])


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
