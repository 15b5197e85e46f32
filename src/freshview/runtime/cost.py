"""Which executor runs a view's step: a cost model fed by the step times it measures.

Pure decisions, no I/O: ``choose`` picks ``local`` or ``spark`` for one view's
step from the execution mode and the model's predictions; the flow then
``observe``s how long the step really took.

Per view and executor, a step's time is modelled as ``fixed + per_row × rows``
(``rows``: the consolidated input changes the view reads in this step).  The
two coefficients are a least-squares fit over the measured steps, recent ones
weighing more (each observation decays the earlier ones by ``DECAY``); before
any step is measured they are priors measured on a 2-core machine
(``PRIORS``), and while the measured steps all have about the same size (no
slope to fit) the prior per-row cost is kept and only the fixed cost fitted.  Spark's fixed cost
(a job, py4j, Arrow transfer: ~0.1-0.5 s) dwarfs the in-process one (~1 ms),
while its per-row cost is lower once many cores share the work; the crossover
is where the fitted lines meet, which the model moves as it measures.

``auto`` runs the cheaper prediction; ``local`` and ``spark`` force one.

A first computation (the whole input, not a step) has its own rule,
``choose_first``: under ``first_computation="auto"`` it runs in-process (the
circuit's step from nothing over Arrow, state written as runs) unless Spark
is asked for (``execution="spark"``), a cluster or Spark Connect session is
configured, or the inputs exceed the in-process memory budget.  In-process
costs about ``FIRST_LOCAL_US`` per input row here; on a local Spark session the
handoff around Spark (state to Parquet, Spark, results back to runs) costs far
more than Spark's own work (``FIRST_SPARK``), so a local session only pays for
inputs that would not fit in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXECUTORS = ("local", "spark")
MODES = ("auto",) + EXECUTORS
FIRST_MODES = MODES  # first_computation: auto | local | spark
# A first computation's cost per input row, measured on the 2-core machine (TPC-H SF 0.1 and 1, a 3-way
# join and aggregate): in-process ~2 µs/row; a local Spark session ~15 s to start its jobs + ~20 µs/row
# (docs/benchmarks.md, "Creating a view").
FIRST_LOCAL_US = 2.0
FIRST_SPARK = (15.0, 20.0)  # (fixed s, µs per row) on a local session
DECAY = 0.9

# (fixed ms, ms per input row) per executor before anything is measured.
PRIORS = {"local": (1.0, 0.004), "spark": (250.0, 0.0004)}


@dataclass
class Fit:
    """Decayed sums of a weighted least-squares line ms = a + b·rows."""

    w: float = 0.0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    xy: float = 0.0
    observed: int = 0

    def add(self, rows: float, ms: float, decay: float = DECAY) -> None:
        self.w, self.x, self.y = self.w * decay + 1, self.x * decay + rows, self.y * decay + ms
        self.xx = self.xx * decay + rows * rows
        self.xy = self.xy * decay + rows * ms
        self.observed += 1

    def line(self, prior: tuple[float, float]) -> tuple[float, float]:
        """(fixed ms, ms per row), both ≥ 0; ``prior`` until something is observed."""
        if self.w <= 0:
            return prior
        mx, my = self.x / self.w, self.y / self.w
        var = self.xx / self.w - mx * mx
        if var <= (0.25 * mx) ** 2 + 1.0:  # sizes too alike to fit a slope: keep the prior's
            b = prior[1]
        else:
            b = max((self.xy / self.w - mx * my) / var, 0.0)
        return max(my - b * mx, 0.0), b


@dataclass
class CostModel:
    """One view's model: a fit per executor."""

    fits: dict[str, Fit] = field(default_factory=lambda: {e: Fit() for e in EXECUTORS})

    def line(self, executor: str) -> tuple[float, float]:
        return self.fits[executor].line(PRIORS[executor])

    def predict(self, executor: str, rows: int) -> float:
        a, b = self.line(executor)
        return a + b * rows

    def observe(self, executor: str, rows: int, ms: float) -> None:
        self.fits[executor].add(rows, ms)

    def describe(self) -> str:
        parts = []
        for e in EXECUTORS:
            a, b = self.line(e)
            n = self.fits[e].observed
            seen = f"{n} steps measured" if n else "prior"
            parts.append(f"{e} ≈ {a:.1f} ms + {b * 1000:.2f} µs/row ({seen})")
        return "; ".join(parts)


@dataclass(frozen=True)
class Choice:
    executor: str
    reason: str


def choose(mode: str, rows: int, model: CostModel) -> Choice:
    """The executor for a step of ``rows`` input changes under ``mode``, and why."""
    if mode not in MODES:
        raise ValueError(f"execution must be one of {', '.join(MODES)}, not {mode!r}")
    if mode != "auto":
        return Choice(mode, f"execution={mode!r}")
    local, spark = model.predict("local", rows), model.predict("spark", rows)
    pick = "local" if local <= spark else "spark"
    return Choice(pick, f"auto: {rows} rows, predicted local {local:.1f} ms vs spark {spark:.1f} ms")


def choose_first(mode: str, execution: str, rows: int, nbytes: int, budget: int, cluster: bool) -> Choice:
    """Where a first computation over ``rows`` input rows (about ``nbytes`` in memory) runs under
    ``first_computation=mode`` and ``execution``: "local" or "spark", and why (module docstring).
    ``budget``: the bytes of input the in-process computation may take; ``cluster``: a cluster or Spark
    Connect session is configured."""
    if mode not in FIRST_MODES:
        raise ValueError(f"first_computation must be one of {', '.join(FIRST_MODES)}, not {mode!r}")
    if mode != "auto":
        return Choice(mode, f"first_computation={mode!r}")
    if execution == "spark":
        return Choice("spark", "execution='spark'")
    if rows == 0:
        return Choice("local", "auto: the inputs are empty")
    mib = nbytes / 2**20
    if cluster:
        return Choice("spark", f"auto: {rows} input rows ({mib:.0f} MiB), a Spark cluster is configured")
    if nbytes > budget:
        return Choice("spark", f"auto: {rows} input rows ({mib:.0f} MiB) exceed the in-process budget "
                               f"({budget / 2**20:.0f} MiB)")
    local = rows * FIRST_LOCAL_US / 1e6
    spark = FIRST_SPARK[0] + rows * FIRST_SPARK[1] / 1e6
    pick = "local" if local <= spark else "spark"
    return Choice(pick, f"auto: {rows} input rows ({mib:.0f} MiB, budget {budget / 2**20:.0f} MiB), "
                        f"predicted local {local:.1f} s vs spark {spark:.1f} s")
