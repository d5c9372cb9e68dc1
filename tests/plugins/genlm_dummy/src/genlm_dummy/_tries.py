"""Entry point: registers the ``dummy-trie`` trie. Imports only genlm_core.plugins."""

from genlm_core.plugins import TrieSpec, hookimpl


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
