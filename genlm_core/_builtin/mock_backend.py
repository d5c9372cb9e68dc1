"""The built-in ``mock`` backend: deterministic and offline, only used when named."""

from __future__ import annotations

from genlm_core.plugins import BackendSpec, hookimpl


@hookimpl
def genlm_register_backends(register):
    """Register the mock backend."""
    register(
        BackendSpec(
            name="mock",
            loader="genlm_core.testing.mock:MockAsyncLM.from_name",
            priority=-100,
            auto=False,
            description="Deterministic pseudo-random log-probs over a real tokenizer (tests)",
        )
    )
