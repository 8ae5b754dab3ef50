"""container checks (clustercert.checks.container) through testinfra."""

import pytest

from clustercert.checks.container import CHECK_IDS
from clustercert.checks.testinfra import assert_check


@pytest.mark.parametrize("check", CHECK_IDS)
def test_container(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "container", check)
