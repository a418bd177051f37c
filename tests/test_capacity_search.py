"""The measured capacity search's start: one probe read against the simulated curve."""
import math

import pytest

from chunklab.experiments.capacity import rate_factor


def falling(capacity_req_per_s: float):
    """A share within the SLO that falls through 0.9 at capacity_req_per_s (logistic in log-rate)."""
    return lambda rate: 1.0 / (1.0 + math.exp(8.0 * math.log(rate / capacity_req_per_s) - math.log(9.0)))


@pytest.mark.parametrize("true_factor", [0.6, 1.0, 1.4])
def test_one_probe_places_the_measured_curve_on_the_simulated_one(true_factor):
    simulated = falling(10.0)
    measured = lambda rate: simulated(rate * true_factor)  # the machine serves 10 / true_factor req/s
    probe_rate = 9.0
    f = rate_factor(measured(probe_rate), simulated, probe_rate)
    assert f == pytest.approx(true_factor, rel=0.01)
    assert 10.0 / f == pytest.approx(10.0 / true_factor, rel=0.01)  # the corrected start: the measured capacity


def test_a_share_of_zero_or_one_places_nothing_and_the_span_bounds_the_factor():
    simulated = falling(10.0)
    assert rate_factor(1.0, simulated, 9.0) is None and rate_factor(0.0, simulated, 9.0) is None
    assert rate_factor(simulated(9.0 * 10), simulated, 9.0) == 4.0  # beyond the span: its edge


def test_the_first_probe_narrows_the_bracket_only_where_it_falls_inside_it():
    from chunklab.experiments.capacity import Capacity
    from chunklab.stages.capacity import with_probe
    found = Capacity(4.0, 5.0, [{"rate_per_s": 4.0, "slo_attainment": 0.95}])
    assert (with_probe(found, {"rate_per_s": 4.5, "slo_attainment": 0.92}, 0.9).lo_req_per_s, 4.5) == (4.5, 4.5)
    assert with_probe(found, {"rate_per_s": 4.5, "slo_attainment": 0.85}, 0.9).hi_req_per_s == 4.5
    noisy = with_probe(found, {"rate_per_s": 6.0, "slo_attainment": 0.95}, 0.9)  # a pass above a failure: noise
    assert (noisy.lo_req_per_s, noisy.hi_req_per_s, len(noisy.probes)) == (4.0, 5.0, 2)


class Probes:
    """measure(rate) of a machine whose share within the SLO follows `share`; every rate asked for, in order."""

    def __init__(self, share):
        self.share, self.rates = share, []

    def __call__(self, rate: float) -> dict:
        self.rates.append(rate)
        return {"rate_per_s": round(rate, 4), "slo_attainment": self.share(rate)}  # rounded, as the stage's runs


def params(**kw):
    from chunklab.stages.capacity import CapacityParams
    return CapacityParams(**({"workload": "ch10_mixed", "budgets": [512], "slos": ["chapter_scaled"], "reference_budget": 512,
                              "reference_slo": "chapter_scaled", "extra_cells": [], "num_requests": 100, "seeds": [3],
                              "sim_seeds": [3], "steady_requests": 200, "target": 0.9, "rel_tol": 0.08, "near": 0.03,
                              "widen": 1.08, "sim_rel_tol": 0.005, "processes": 1, "overrides": []} | kw))


@pytest.mark.parametrize("measured_capacity", [9.7, 10.4])
def test_a_first_probe_near_the_target_is_a_bracket_end_and_two_probes_decide(measured_capacity):
    """The simulated capacity (10) within rel_tol of the measured one, and the first probe's share within
    `near` of 0.9: the bracket starts at that probe, on the side its share puts the capacity."""
    from chunklab.stages.capacity import measured_search
    measure = Probes(falling(measured_capacity))
    found = measured_search(measure, 10.0, params(), factor=lambda share: pytest.fail("no correction this close"))
    assert len(measure.rates) == len(found.probes) == 2 and measure.rates[0] == 10.0
    assert found.lo_req_per_s <= measured_capacity <= found.hi_req_per_s
    assert found.hi_req_per_s / found.lo_req_per_s == pytest.approx(1.08, rel=1e-3)


def test_a_first_probe_far_from_the_target_moves_the_bracket_by_the_simulated_curve():
    from chunklab.stages.capacity import measured_search
    simulated, measure = falling(10.0), Probes(falling(6.0))  # the machine serves 40% less than simulated
    factors = []

    def factor(share):
        factors.append(rate_factor(share, simulated, 10.0))
        return factors[-1]

    found = measured_search(measure, 10.0, params(), factor)
    assert factors and 10.0 / factors[0] == pytest.approx(6.0, rel=0.01)
    assert found.lo_req_per_s <= 6.0 <= found.hi_req_per_s and len(found.probes) == len(measure.rates) == 3
    assert found.probes[0]["rate_per_s"] == 10.0  # the first probe kept, outside the bracket it moved


def test_start_bracket_sides_and_the_near_threshold():
    from chunklab.stages.capacity import start_bracket
    never = lambda: pytest.fail("not read")
    assert start_bracket({"rate_per_s": 5.0, "slo_attainment": 0.92}, 0.9, 0.03, 0.08, never) == (5.0, 5.4)
    lo, hi = start_bracket({"rate_per_s": 5.0, "slo_attainment": 0.88}, 0.9, 0.03, 0.08, never)
    assert (lo, hi) == (pytest.approx(5.0 / 1.08), 5.0)
    lo, hi = start_bracket({"rate_per_s": 5.0, "slo_attainment": 0.8}, 0.9, 0.03, 0.08, lambda: 1.25)
    assert math.sqrt(lo * hi) == pytest.approx(4.0) and hi / lo == pytest.approx(1.08)
