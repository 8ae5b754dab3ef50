"""time checks (clustercert.checks.time) through testinfra."""

import pytest

from clustercert.checks.testinfra import assert_check
from clustercert.checks.time import CHECK_IDS


@pytest.mark.parametrize("check", CHECK_IDS)
def test_time(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "time", check)
