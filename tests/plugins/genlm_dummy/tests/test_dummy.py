import pytest

from genlm_core import load_model_by_name
from genlm_core.testing import AsyncLMConformance

TEXT = "The capital of France is Paris. Hello, world!"  # the bigram model's training text


class TestDummyConformance(AsyncLMConformance):
    """The whole standard suite, inherited."""

    @pytest.fixture
    def lm(self):
        model = load_model_by_name(TEXT, backend="dummy")
        yield model
        model.close()


def test_is_discovered(installed_backends):
    """Found through its entry point (``installed_backends`` is a genlm-core fixture)."""
    assert installed_backends["dummy"].distribution == "genlm-dummy"
