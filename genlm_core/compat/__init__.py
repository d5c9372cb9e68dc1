"""Compatibility with the libraries genlm-core re-founds: their old import paths.

Where genlm-backend had a module genlm-core has no concept of, the shim code lives
here, in one place, and the old path (``genlm_core.llm``, ``genlm_core.cache``) is a
module of a few lines that re-exports it; genlm-backend's model method names are
:mod:`.model_methods`. (genlm-bytes' ``util`` and ``trie`` re-export core names
directly.) docs/migrating.md has the whole list.
"""
