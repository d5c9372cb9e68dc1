"""The exceptions genlm-core raises.

Each derives from [`GenlmError`][] and from the builtin a caller would naturally
catch (``KeyError`` for an unknown name, ``ValueError`` for bad input, ...).
"""

from __future__ import annotations

__all__ = [
    "BackendContractError",
    "BackendUnavailableError",
    "BatchSizeMismatchError",
    "BatcherClosedError",
    "BatcherLoopError",
    "DuplicateBackendError",
    "GenlmError",
    "InvalidArgumentError",
    "InvalidOptionError",
    "InvalidTokenIdsError",
    "LoraNotSupportedError",
    "ModelClosedError",
    "ModelNotFoundError",
    "NoBackendAvailableError",
    "PluginLoadError",
    "UnknownBackendError",
    "UnknownLoraError",
    "UnsupportedTokenizerError",
    "WorkerInitError",
]


class GenlmError(Exception):
    """Root of every error raised by genlm-core and its plugins."""


class UnknownBackendError(GenlmError, KeyError, ValueError):
    """A backend (or trie implementation) was requested by a name nobody registered.

    Also a ``ValueError``: what genlm-backend raised for an unknown model or trie backend.
    """

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class BackendUnavailableError(GenlmError, RuntimeError):
    """A backend is installed but cannot run here (no GPU, engine not importable, ...)."""


class NoBackendAvailableError(GenlmError, RuntimeError):
    """No automatic backend can run on this machine; the message is the full diagnosis."""


class DuplicateBackendError(GenlmError, ValueError):
    """Two plugins registered the same backend or trie name."""


class BackendContractError(GenlmError, TypeError):
    """A backend or plugin broke the contract (bad spec, wrong return type, ...)."""


class PluginLoadError(GenlmError, ImportError):
    """A plugin's entry point could not be imported or its hooks failed."""


class BatcherClosedError(GenlmError, RuntimeError):
    """A request reached an AutoBatcher after ``aclose()`` (or its event loop ended)."""


class BatcherLoopError(GenlmError, RuntimeError):
    """An AutoBatcher was made outside an event loop, or used from another than its own."""

    @classmethod
    def no_loop(cls, name: str) -> BatcherLoopError:
        """The error for an AutoBatcher made outside a running event loop."""
        return cls(
            f"AutoBatcher {name!r} must be made inside the running event loop it will serve "
            f"(in an async function); for a function used from several loops, LoopBatchers "
            f"makes one batcher per loop"
        )

    @classmethod
    def other_loop(cls, name: str, bound: object, used: object) -> BatcherLoopError:
        """The error for an AutoBatcher used from another loop than its own."""
        return cls(
            f"{name} is bound to event loop {bound!r}, the one it was made in, but was used "
            f"from event loop {used!r}. An AutoBatcher serves one event loop: make one per "
            f"loop (LoopBatchers does)."
        )


class BatchSizeMismatchError(GenlmError, RuntimeError):
    """A batch function returned a different number of results than it was given."""


class WorkerInitError(GenlmError, RuntimeError):
    """An AutoBatcher's worker-thread initializer raised; that thread runs no batch."""


class ModelClosedError(BatcherClosedError):
    """A language model was used after ``cleanup()`` (or ``aclose()``): load it again.

    Calls queued when the model was closed get it too (a [`BatcherClosedError`][],
    what they got before).
    """


class ModelNotFoundError(GenlmError, OSError):
    """A model name leads nowhere: no such directory, or a hub id that cannot load here.

    An ``OSError``, like the one transformers raises for a model it cannot find.
    """


class InvalidArgumentError(GenlmError, ValueError):
    """An argument has a value the function does not accept (the message names it)."""


class InvalidOptionError(GenlmError, TypeError):
    """A model was given a keyword option it does not have (the message lists the valid ones).

    A ``TypeError``, which is what Python raises for an unexpected keyword argument.
    """


class LoraNotSupportedError(GenlmError, NotImplementedError):
    """``add_new_lora`` on a backend that cannot load LoRA adapters."""


class InvalidTokenIdsError(GenlmError, ValueError):
    """Token ids are empty, not integers, or out of the model's vocabulary range."""


class UnknownLoraError(GenlmError, KeyError):
    """A request named a LoRA adapter that was never added with ``add_new_lora``."""

    __str__ = UnknownBackendError.__str__  # the message, not KeyError's repr()


class UnsupportedTokenizerError(GenlmError, ValueError):
    """A tokenizer's vocabulary cannot be decoded to exact byte strings."""
