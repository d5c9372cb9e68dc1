"""The standard AsyncLM test suites every backend inherits.

Subclass [`AsyncLMConformance`][] in your backend's tests and provide an ``lm``
fixture; every invariant of the AsyncLM contract is then checked for your backend::

    class TestMyBackend(AsyncLMConformance):
        @pytest.fixture
        def lm(self):
            model = load_model_by_name("my-model", backend="mine")
            yield model
            model.cleanup()

A backend that loads LoRA adapters also subclasses [`LoraConformance`][], with an
``lm`` fixture of its own model and a ``lora_adapters`` fixture (two adapter paths).

Override a case only to mark it ``@pytest.mark.xfail(reason=...)``: a backend that
cannot meet an invariant says so visibly. Class attributes tune the suite:
``prompts`` (token-id lists, valid for the model), ``atol`` (for comparisons across
batch shapes; raise it for GPU kernels whose results depend on batch size).
"""

from __future__ import annotations

from genlm_core.testing.conformance._concurrency import ConcurrencyCases
from genlm_core.testing.conformance._contract import ContractCases
from genlm_core.testing.conformance._lora import LoraConformance
from genlm_core.testing.conformance._ownership import OwnershipCases
from genlm_core.testing.conformance._shutdown import ShutdownCases

__all__ = ["AsyncLMConformance", "LoraConformance"]


class AsyncLMConformance(ContractCases, OwnershipCases, ConcurrencyCases, ShutdownCases):
    """Invariants of the AsyncLM contract (docs/plugins.md, "Testing your plugin")."""
