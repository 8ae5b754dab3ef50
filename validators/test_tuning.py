"""tuning checks (clustercert.checks.tuning) through testinfra."""

import pytest

from clustercert.checks.tuning import CHECK_IDS
from clustercert.testinfra_support import assert_check


@pytest.mark.parametrize("check", CHECK_IDS)
def test_tuning(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "tuning", check)
