"""tuning checks (clustercert.checks.tuning) through testinfra."""

import pytest

from clustercert.checks.testinfra import assert_check
from clustercert.checks.tuning import CHECK_IDS


@pytest.mark.parametrize("check", CHECK_IDS)
def test_tuning(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "tuning", check)
