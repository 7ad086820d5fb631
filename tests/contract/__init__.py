"""Contract suites shared by several adapters' test modules."""

import pytest

# The suites live outside test_*.py files; have pytest rewrite their asserts anyway.
pytest.register_assert_rewrite(
    "tests.contract.repository_contract",
    "tests.contract.observed_contract",
    "tests.contract.flow_contract",
)
