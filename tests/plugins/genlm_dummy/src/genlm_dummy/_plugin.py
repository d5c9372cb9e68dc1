"""Entry point: registers the ``dummy`` backend. Imports only genlm_core.plugins."""

from genlm_core.plugins import BackendSpec, hookimpl


@hookimpl
def genlm_register_backends(register):
    """Register the ``dummy`` backend (used only when named)."""
    register(
        BackendSpec(
            name="dummy",
            loader="genlm_dummy.lm:BigramLM.from_name",
            auto=False,
            description="Byte bigram model trained on the model name (a plugin example)",
            install_hint="pip install genlm-dummy",
        )
    )
