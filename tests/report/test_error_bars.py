import math

import pytest

from coral.report.error_bars import fmt_mean_se, mean_se, rate_se


def test_mean_se_is_the_sample_stdev_over_root_n():
    # values 0.2, 0.4, 0.6: mean 0.4, sample stdev 0.2, SE 0.2 / sqrt(3)
    mean, se = mean_se([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4) and se == pytest.approx(0.2 / math.sqrt(3))
    assert fmt_mean_se([0.2, 0.4, 0.6]) == "0.400 ± 0.115 (SE over 3)"


def test_one_value_has_no_error_bar_rather_than_a_zero_one():
    mean, se = mean_se([0.5])
    assert mean == 0.5 and math.isnan(se)
    with pytest.raises(ValueError, match="no values"):
        mean_se([])


def test_rate_se_is_the_binomial_standard_error():
    assert rate_se(0.5, 100) == pytest.approx(0.05)
    assert rate_se(0.0, 10) == 0.0
    with pytest.raises(ValueError, match="n must be >= 1"):
        rate_se(0.5, 0)
