"""genlm-core: async, autobatched next-token log-probabilities, and the plugin system.

The public names are loaded lazily, so ``import genlm_core.plugins`` (what a
plugin's entry-point module does) never imports torch or an engine.

Typical use::

    from genlm_core import load_model_by_name

    lm = load_model_by_name("gpt2")                    # best installed backend
    logprobs = await lm.next_token_logprobs([464, 3139])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genlm_core.lazy import lazy_exports

__version__ = "0.1.0"

__all__ = [
    "AsyncLM",
    "AsyncLMBase",
    "AsyncTokenCharacterTrie",
    "AutoBatcher",
    "BackendContractError",
    "BackendUnavailableError",
    "BatchSizeMismatchError",
    "BatchedAsyncLM",
    "BatcherClosedError",
    "DuplicateBackendError",
    "GenlmError",
    "InvalidArgumentError",
    "InvalidTokenIdsError",
    "MockAsyncLM",
    "ModelClosedError",
    "NoBackendAvailableError",
    "OutputCache",
    "PluginLoadError",
    "PrefixRequest",
    "Request",
    "Token",
    "UnknownBackendError",
    "UnknownLoraError",
    "UnsupportedTokenizerError",
    "__version__",
    "decode_vocab",
    "list_backends",
    "load_model_by_name",
    "resolve_backend",
]

__getattr__, __dir__ = lazy_exports(globals())


if TYPE_CHECKING:  # pragma: no cover
    from genlm_core.cache import OutputCache
    from genlm_core.errors import (
        BackendContractError,
        BackendUnavailableError,
        BatcherClosedError,
        BatchSizeMismatchError,
        DuplicateBackendError,
        GenlmError,
        InvalidArgumentError,
        InvalidTokenIdsError,
        ModelClosedError,
        NoBackendAvailableError,
        PluginLoadError,
        UnknownBackendError,
        UnknownLoraError,
        UnsupportedTokenizerError,
    )

    # genlm-backend's top-level model classes (see genlm_core.llm): importable by name,
    # but not in __all__, so `from genlm_core import *` imports no plugin.
    from genlm_core.llm import AsyncTransformer, AsyncVirtualLM  # noqa: F401
    from genlm_core.lm import AsyncLM, AsyncLMBase, BatchedAsyncLM, PrefixRequest, Request
    from genlm_core.loading import list_backends, load_model_by_name, resolve_backend
    from genlm_core.runtime import AutoBatcher
    from genlm_core.testing.mock import MockAsyncLM
    from genlm_core.tokenization import Token, decode_vocab

    # AsyncTokenCharacterTrie is the core's. The fast tries (genlm-trie-numba) are
    # importable by name but not in __all__, so `from genlm_core import *` works with
    # the core alone (genlm_core.trie says what to install when they are missing).
    from genlm_core.trie import (  # noqa: F401
        AsyncTokenCharacterTrie,
        ParallelTokenCharacterTrie,
        TokenByteTrie,
        TokenCharacterTrie,
    )
