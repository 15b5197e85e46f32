"""``verify_view``: a view's result table against its SQL computed by the database, at one position.  No I/O.

**The crux.**  The service is the only writer of a result table and knows the
position ``P`` it reflects (``freshview.progress``, committed with it).  One
snapshot of the database shows the result table at some ``P`` and the source
tables at some point ``Y``; comparing the two is only right when the sources
under that snapshot are at ``P`` too.  They are not, in general: a snapshot
taken between two steps sees every source transaction committed by then,
while the result table holds only those the service has streamed and stepped
(the stream trails the commits by milliseconds under load, more during a
burst), and no snapshot can show a result table "as of later".  Locking the
sources would stop the application, and holding the service at a quiet
moment never ends under a steady load.

So the gap is closed with what the service knows, not by waiting:

1. a worker (``verification``) opens a snapshot at an exact stream position
   ``Y`` (``Source.snapshot``: PostgreSQL's temporary slot with an exported
   snapshot, whose consistent point holds exactly the transactions at
   positions <= ``Y``; MariaDB's consistent snapshot at a binlog position);
2. under it, the result tables are at ``P`` (the stored position read in the
   same snapshot; the service commits results and position together, so the
   two agree) and ``P <= Y`` (results at ``P`` committed before ``Y``, and
   after the transaction at ``P``);
3. the loop, from before the snapshot was taken, records every written step's
   changes of the view (``Recorded``: the step's first and last position);
   once it has read the stream past ``Y`` (a transaction after ``Y``, or the
   server saying it sent everything up to ``Y``), the changes of the steps in
   ``(P, Y]`` are ``Δ`` (``window_delta``), exactly the view's change from
   ``P`` to ``Y``.  Once ``Y`` is known the loop ends a step at ``Y``; a step
   that straddled it before (rare: read between the snapshot and the loop
   learning ``Y``) makes the attempt start over with a new snapshot;
4. the database then compares, in the same snapshot, the view's SQL (sources
   at ``Y``) with the result table plus ``Δ`` (the view at ``Y``), as
   multisets, and returns the rows that differ.

Nothing waits on the comparison: the loop never pauses (it records a few
steps' changes and ends one step at ``Y``); the snapshot only holds back
vacuum while the query runs.  A view that reads another freshview view would
read that view's result table at ``P``, not ``Y``: the other view is read
through its definition instead (``verification.job_for``: a WITH query, down
to the tables), so each view's verification is about its own table.
Time-based views are refused (their rows move with the clock, not with
positions).

Values compare exactly, except floating point and numeric columns, which the
engine may compute in another order than the database (sums of floats,
divisions through float64): the database matches them rounded to 12
significant digits and ``settle`` pairs what is left within a relative 1e-9.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

from freshview.connectors.base import ResultSpec, after
from freshview.errors import FreshviewError
from freshview.flow.catalog import parse_interval
from freshview.plan import nodes as pn
from freshview.plan.temporal import TemporalFilter

SHOWN = 5  # differing rows a message shows
REL_TOL = 1e-9
APPROXIMATE = ("real", "double precision", "float", "numeric", "decimal", "double")  # by the type's spelling
EQUAL, DIFFERENT, ERROR = "equal", "different", "error"  # a verification's result (metrics, freshview.views)


@dataclass(frozen=True)
class Job:
    """One view to verify: its SQL and result table, and what its steps' changes are recorded for."""

    name: str  # qualified, as in freshview.views
    sql: str
    spec: ResultSpec
    request: int | None = None  # None: a periodic self-check (``--verify-every``)


@dataclass(frozen=True)
class Recorded:
    """A written step's changes of the views a job looks at (qualified names; the view's columns + _weight)."""

    first: Any  # Position of the step's first transaction
    last: Any  # ... and of its last (the step's position)
    outputs: Mapping[str, pa.Table]


@dataclass(frozen=True)
class Retry:
    """The attempt cannot be exact; a new snapshot is taken (why, for the log)."""

    reason: str


def refusal(name: str, plan: pn.Node) -> str | None:
    """Why the view cannot be verified against its SQL, or None."""
    if any(isinstance(node, TemporalFilter) for node in walk(plan)):
        return (f"freshview: view {name} is time-based (now(), current_date ...): its rows follow the clock, so "
                f"its SQL recomputed later would not give the rows of the position verified")
    return None


def walk(plan: pn.Node) -> Iterable[pn.Node]:
    yield plan
    for child in plan.inputs():
        yield from walk(child)


def views_read(plan: pn.Node) -> list[str]:
    """The engine names of the views ``plan`` scans."""
    return [node.relation for node in walk(plan) if isinstance(node, pn.Scan) and node.is_view]


def window_delta(steps: Sequence[Recorded], results_at: Any, snapshot_at: Any, job: Job) -> pa.Table | None | Retry:
    """The job's view's change from the result tables' position ``results_at`` (None: nothing) to the
    snapshot's ``snapshot_at``: the recorded steps in between; None when it did not change; ``Retry`` when
    a step straddles ``snapshot_at`` (module docstring, 3)."""
    parts: list[pa.Table] = []
    for step in steps:
        if not after(step.last, results_at):
            continue  # the result tables hold it under the snapshot
        if after(step.first, snapshot_at):
            break  # after the snapshot (steps are recorded in order)
        if after(step.last, snapshot_at):
            return Retry(f"a step ended past the snapshot's position {snapshot_at.to_text()}")
        change = step.outputs.get(job.name)
        if change is not None and change.num_rows:
            parts.append(change)
    if not parts:
        return None
    return pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]


Row = tuple[Any, ...]  # a row as the database wrote it as text (None: NULL)


def approximate(spec: ResultSpec) -> tuple[bool, ...]:
    """Per column: compared within a tolerance (floating point and numeric)."""
    return tuple(t.pg.split("(")[0].strip() in APPROXIMATE for _, t in spec.columns)


def _close(a: Any, b: Any, loose: bool) -> bool:
    if a == b:
        return True
    if not loose or a is None or b is None:
        return False
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return abs(x - y) <= REL_TOL * max(abs(x), abs(y), 1e-300)


def settle(differences: Iterable[tuple[int, Row]], loose: Sequence[bool]) -> tuple[list[tuple[Row, int]],
                                                                                 list[tuple[Row, int]]]:
    """The database's differing rows (``n`` > 0: the SQL gives the row ``n`` more times than the result
    table holds; < 0: fewer) as (missing from the table, extra in the table), rows that match within the
    tolerance paired off."""
    missing = [[row, n] for n, row in differences if n > 0]
    extra = [[row, -n] for n, row in differences if n < 0]
    for m in missing:
        for x in extra:
            if m[1] and x[1] and len(m[0]) == len(x[0]) and all(
                    _close(a, b, lo) for a, b, lo in zip(m[0], x[0], loose)):
                paired = min(m[1], x[1])
                m[1] -= paired
                x[1] -= paired
    return [(r, n) for r, n in missing if n], [(r, n) for r, n in extra if n]


def _show(row: Row) -> str:
    return "(" + ", ".join("NULL" if v is None else str(v) for v in row) + ")"


def report(name: str, position: str, missing: Sequence[tuple[Row, int]], extra: Sequence[tuple[Row, int]],
           columns: Sequence[str], shown: int = SHOWN) -> str | None:
    """None when equal; else the error naming the first differing rows (a few, readable)."""
    if not missing and not extra:
        return None
    lines = [(f"  missing from the result table: {_show(r)}" + (f" x{n}" if n > 1 else ""))
             for r, n in missing] + [(f"  extra in the result table:     {_show(r)}" + (f" x{n}" if n > 1 else ""))
                                     for r, n in extra]
    count = sum(n for _, n in missing) + sum(n for _, n in extra)
    more = f"\n  ... and {len(lines) - shown} more" if len(lines) > shown else ""
    return (f"freshview: view {name} differs from its SQL at {position} ({count} row"
            f"{'s' if count != 1 else ''}; columns ({', '.join(columns)})):\n" + "\n".join(lines[:shown]) + more)


def equal_text(position: str) -> str:
    return f"equal at {position}"


def next_due(views: Sequence[str], last: Mapping[str, float], started: float, every: float,
             now: float) -> str | None:
    """The view a periodic self-check (``--verify-every``) verifies now, if any: each view every ``every``
    seconds, staggered: view i of n (creation order) is first due ``every * (i + 1) / n`` after ``started``,
    so the checks spread over the period instead of all running at once; the most overdue first."""
    best: tuple[float, str] | None = None
    for i, view in enumerate(views):
        due = last[view] + every if view in last else started + every * (i + 1) / len(views)
        if due <= now and (best is None or due < best[0]):
            best = (due, view)
    return None if best is None else best[1]


def every(text: str) -> float:
    """``--verify-every``'s period in seconds (``1h``, ``30 minutes``, ``90``); a clear error otherwise."""
    seconds = parse_interval(text)
    if not seconds:
        raise FreshviewError(f"--verify-every must be a positive interval, not {text!r}")
    return seconds
