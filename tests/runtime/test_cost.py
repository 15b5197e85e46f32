"""The cost model that picks a step's executor: pure decisions, tested without Spark."""

from __future__ import annotations

import pytest

from freshview.runtime.cost import PRIORS, CostModel, Fit, choose


def test_forced_modes_ignore_the_model():
    model = CostModel()
    assert choose("local", 10_000_000, model).executor == "local"
    assert choose("spark", 1, model).executor == "spark"
    assert "execution='spark'" in choose("spark", 1, model).reason


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="auto, local, spark"):
        choose("gpu", 1, CostModel())


def test_priors_send_small_steps_local_and_huge_steps_to_spark():
    model = CostModel()
    small, huge = choose("auto", 500, model), choose("auto", 5_000_000, model)
    assert small.executor == "local" and huge.executor == "spark"
    assert "500 rows" in small.reason and "predicted local" in small.reason


def test_measurements_move_the_crossover():
    model = CostModel()
    assert choose("auto", 20_000, model).executor == "local"
    for _ in range(10):  # local turns out to cost 1 ms per row
        model.observe("local", 100, 100.0)
        model.observe("local", 1000, 1000.0)
    assert choose("auto", 20_000, model).executor == "spark"
    a, b = model.line("local")
    assert a == pytest.approx(0.0, abs=1e-6) and b == pytest.approx(1.0)


def test_steps_of_one_size_fit_the_fixed_cost_and_keep_the_prior_slope():
    model = CostModel()
    for _ in range(5):
        model.observe("spark", 1000, 900.0)
    a, b = model.line("spark")
    assert b == PRIORS["spark"][1]
    assert a + b * 1000 == pytest.approx(900.0)
    assert "5 steps measured" in model.describe() and "prior" in model.describe()


def test_recent_steps_weigh_more():
    fit = Fit()
    for _ in range(30):
        fit.add(100, 10.0)
    for _ in range(30):
        fit.add(100, 50.0)
    a, b = fit.line((0.0, 0.0))
    assert a == pytest.approx(50.0, rel=0.05)


def test_noise_never_gives_negative_costs():
    fit = Fit()
    fit.add(10, 50.0)
    fit.add(10_000, 1.0)
    a, b = fit.line((1.0, 0.01))
    assert a >= 0 and b >= 0


# ---------------------------------------------------------------------- first computations (choose_first)
from freshview.runtime.cost import Choice, choose_first  # noqa: E402

GIB = 2**30


def test_first_computation_forced_modes_and_spark_execution_go_where_told():
    assert choose_first("spark", "local", 10, 100, GIB, False) == Choice("spark", "first_computation='spark'")
    assert choose_first("local", "spark", 10**9, 10**12, GIB, True).executor == "local"
    assert choose_first("auto", "spark", 10, 100, GIB, False) == Choice("spark", "execution='spark'")


def test_first_computation_auto_runs_in_process_within_the_budget():
    small = choose_first("auto", "auto", 7_650_000, 400 * 2**20, GIB, False)
    assert small.executor == "local"
    assert "7650000 input rows (400 MiB, budget 1024 MiB)" in small.reason and "predicted local" in small.reason
    assert choose_first("auto", "local", 0, 0, 0, False) == Choice("local", "auto: the inputs are empty")


def test_first_computation_auto_goes_to_spark_over_the_budget_or_on_a_cluster():
    big = choose_first("auto", "auto", 75_000_000, 4 * GIB, GIB, False)
    assert big.executor == "spark" and "exceed the in-process budget (1024 MiB)" in big.reason
    assert choose_first("auto", "local", 10, 100, GIB, True).executor == "spark"


def test_unknown_first_computation_is_refused():
    with pytest.raises(ValueError, match="first_computation must be one of auto, local, spark"):
        choose_first("gpu", "auto", 1, 1, GIB, False)
