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

``auto`` runs the cheaper prediction; ``local`` and ``spark`` force one.  A
first computation (the whole input) always runs on Spark and is not a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXECUTORS = ("local", "spark")
MODES = ("auto",) + EXECUTORS
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
