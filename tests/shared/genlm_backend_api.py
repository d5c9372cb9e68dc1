"""genlm-backend 0.3.1's public model-class methods, written out, and the few not kept.

The table is checked against genlm-backend 0.3.1's source in the core session
(``tests/core/test_backend_methods.py``); each backend's session compares its model
class with it (the engine sessions have no genlm-backend installed). Every method not
kept is named, with its reason, in docs/migrating.md.
"""

from __future__ import annotations

import inspect

__all__ = ["BASE", "METHODS", "NOT_KEPT", "missing", "public_methods"]

#: genlm-backend's ``AsyncLM`` (the base every model class inherits).
BASE = frozenset(
    {
        "add_new_lora",
        "batch_next_token_logprobs",
        "batch_next_token_logprobs_sync",
        "batch_sample",
        "clear_cache",
        "clear_lora",
        "next_token_logprobs",
        "next_token_logprobs_sync",
        "remove_lora",
        "sample",
        "set_lora",
    }
)
#: Public methods (and properties) of each class, inherited ones included.
METHODS = {
    "AsyncLM": BASE,
    "MockAsyncLM": BASE | {"from_name"},
    "AsyncTransformer": BASE
    | {
        "add_query",
        "batch_evaluate_queries",
        "cache_kv",
        "clear_kv_cache",
        "from_name",
        "next_token_logprobs_uncached",
        "reset_async_queries",
        "walk_cache",
    },
    "AsyncVirtualLM": BASE | {"cleanup", "from_name", "release_all", "underlying_model"},
    "AsyncMlxLM": BASE | {"from_name"},
    "AsyncSGLTransformer": BASE | {"clear_kv_cache", "from_name", "reset_async_queries"},
}
#: (class, method) -> why it is not kept. docs/migrating.md says the same.
NOT_KEPT = {
    ("AsyncLM", "set_lora"): "only raised 'removed' in 0.3.1; on every official backend",
    ("AsyncLM", "clear_lora"): "only raised 'removed' in 0.3.1; on every official backend",
    ("AsyncTransformer", "add_query"): "genlm-backend's hf batching internals",
    ("AsyncTransformer", "batch_evaluate_queries"): "genlm-backend's hf batching internals",
    ("AsyncTransformer", "walk_cache"): "genlm-backend's hf prefix-cache internals",
    ("AsyncVirtualLM", "underlying_model"): "a path through vLLM's engine internals",
}


def public_methods(cls: type) -> set[str]:
    """Public callables and properties of ``cls``, inherited ones included."""
    names = set()
    for name in dir(cls):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(cls, name)
        if callable(value) or isinstance(value, (property, classmethod, staticmethod)):
            names.add(name)
    return names


def missing(name: str, cls: type) -> set[str]:
    """genlm-backend 0.3.1's methods of class ``name`` that ``cls`` lacks and that are kept."""
    not_kept = {method for (owner, method) in NOT_KEPT if owner == name}
    return set(METHODS[name]) - public_methods(cls) - not_kept
