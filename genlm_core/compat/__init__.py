"""Compatibility with the libraries genlm-core re-founds: their old import paths.

Shims for modules genlm-core has no concept of live here; each old path re-exports
them (docs/architecture.md, "Compatibility"). genlm-bytes' ``util`` and ``trie``
re-export core names directly.
"""
