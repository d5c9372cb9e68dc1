"""Entry point: registers the ``dummy`` backend and trie. Imports only genlm_core.plugins."""

from genlm_core.plugins import BackendSpec, TrieSpec, hookimpl


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


@hookimpl
def genlm_register_tries(register):
    """Offer genlm-core's reference trie under another name (used only when named)."""
    register(
        TrieSpec(
            name="dummy-trie",
            loader="genlm_core.trie.reference:ReferenceTokenCharacterTrie",
            auto=False,
            kind="character",
            description="genlm-core's reference trie, registered by a plugin",
        )
    )
