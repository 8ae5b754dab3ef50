"""storage checks (clustercert.checks.storage) through testinfra."""

import pytest

from clustercert.checks.storage import CHECK_IDS
from clustercert.checks.testinfra import assert_check


@pytest.mark.parametrize("check", CHECK_IDS)
def test_storage(host, clustercert_ctx, check):
    assert_check(host, clustercert_ctx, "storage", check)
