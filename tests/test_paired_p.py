"""The paired t-test's p-value (glomo_tf.evaluation, on scipy.stats) against closed forms."""

import math

import numpy as np
import pytest
from scipy import stats

from glomo_tf import evaluation


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.5, 12.706, 100.0, -0.7, -4.0])
def test_one_degree_of_freedom_is_the_cauchy_distribution(t):
    """Student's t with 1 dof is the standard Cauchy: ``P(|T| >= |t|) = 1 - 2 atan(|t|) / pi``."""
    assert evaluation.two_sided_p(t, 2) == pytest.approx(1 - 2 * math.atan(abs(t)) / math.pi,
                                                         rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.5, 4.303, 100.0, -0.7, -4.0])
def test_two_degrees_of_freedom_in_closed_form(t):
    """With 2 dof the distribution is elementary: ``P(|T| >= |t|) = 1 - |t| / sqrt(2 + t^2)``."""
    assert evaluation.two_sided_p(t, 3) == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t),
                                                         rel=1e-12, abs=1e-15)


def test_undefined_cases_have_no_p():
    assert evaluation.two_sided_p(None, 5) is None
    assert evaluation.two_sided_p(math.inf, 5) is None
    assert evaluation.two_sided_p(-math.inf, 5) is None
    assert evaluation.two_sided_p(1.0, 1) is None
    assert isinstance(evaluation.two_sided_p(1.0, 5), float)


def test_paired_comparison_uses_n_minus_one_degrees_of_freedom():
    """Two seeds: the p is the Cauchy one of the paired t computed by hand; three seeds: 2 dof."""
    own, reference = {0: 0.80, 1: 0.74}, {0: 0.70, 1: 0.71}
    d = np.array([0.10, 0.03])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(2))
    paired = evaluation.paired_comparison(own, reference)
    assert paired["t"] == pytest.approx(t)
    assert paired["p"] == pytest.approx(1 - 2 * math.atan(abs(t)) / math.pi, rel=1e-12)

    own[2], reference[2] = 0.69, 0.72
    d = np.append(d, -0.03)
    t = d.mean() / (d.std(ddof=1) / math.sqrt(3))
    paired = evaluation.paired_comparison(own, reference)
    assert paired["p"] == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t), rel=1e-12)


def test_paired_comparison_agrees_with_scipy_ttest_rel():
    rng = np.random.default_rng(0)
    own = {s: float(a) for s, a in enumerate(rng.uniform(0.6, 0.9, 10))}
    reference = {s: float(a) for s, a in enumerate(rng.uniform(0.6, 0.9, 10))}
    result = stats.ttest_rel([own[s] for s in range(10)], [reference[s] for s in range(10)])
    paired = evaluation.paired_comparison(own, reference)
    assert paired["t"] == pytest.approx(result.statistic, rel=1e-10)
    assert paired["p"] == pytest.approx(result.pvalue, rel=1e-10)
