"""packages checks (clustercert.checks.packages) through testinfra."""

import pytest

from clustercert.checks.packages import CHECK_IDS
from clustercert.checks.testinfra import assert_check


@pytest.mark.parametrize("check", CHECK_IDS)
def test_packages(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "packages", check)
