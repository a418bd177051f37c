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
