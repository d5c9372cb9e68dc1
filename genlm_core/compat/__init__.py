"""Compatibility with the libraries genlm-core re-founds: their old import paths.

Migrating stays an import rename (``genlm.backend`` -> ``genlm_core``, ``genlm.bytes``
-> ``genlm_core.bytes``). Where genlm-backend had a module genlm-core has no concept
of, the shim code lives here, in one place; the old path is a module of a few lines
that re-exports it, so imports and type checkers keep working:

* ``genlm_core.llm`` (``genlm.backend.llm``): the model classes (each from its
  backend plugin, or a placeholder that raises the install command),
  ``AsyncLM``, ``MockAsyncLM``, ``load_model_by_name``. Code:
  :mod:`genlm_core.compat.genlm_backend`.
* ``genlm_core.cache`` (``genlm.backend.cache``): ``OutputCache``. Code:
  :mod:`genlm_core.compat.genlm_backend`.

Elsewhere for now: genlm-backend's model method names (``reset_async_queries``,
``set_lora``, ``clear_lora``) are a base of the model classes, in
``genlm_core/lm/_compat.py``; genlm-bytes' ``genlm.bytes.util`` and ``genlm.bytes.trie``
are ``genlm_core/bytes/util.py`` and ``genlm_core/bytes/trie.py``.
"""
