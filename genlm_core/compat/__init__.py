"""Compatibility with the libraries genlm-core re-founds: their old import paths.

Migrating stays an import rename (``genlm.backend`` -> ``genlm_core``, ``genlm.bytes``
-> ``genlm_core.bytes``). Where genlm-backend or genlm-bytes had a module genlm-core has
no concept of, the shim code lives here, in one place; the old path is a module of a
few lines that re-exports it, so imports and type checkers keep working:

* ``genlm_core.llm`` (``genlm.backend.llm``): the model classes (each from its
  backend plugin, or a placeholder that raises the install command),
  ``AsyncLM``, ``MockAsyncLM``, ``load_model_by_name``. Code:
  :mod:`genlm_core.compat.genlm_backend`.
* ``genlm_core.cache`` (``genlm.backend.cache``): ``OutputCache``. Code:
  :mod:`genlm_core.compat.genlm_backend`.
* ``genlm_core.bytes.util`` and ``genlm_core.bytes.trie`` (``genlm.bytes.util``,
  ``genlm.bytes.trie``). Code: :mod:`genlm_core.compat.genlm_bytes`.

* genlm-backend's model method names (``reset_async_queries``, ``set_lora``,
  ``clear_lora``): plain functions in :mod:`genlm_core.compat.model_methods` that the
  official kinds' bases (``PrefixCachedLM``, ``EngineLM``) and ``MockAsyncLM`` hold as
  methods.
"""
