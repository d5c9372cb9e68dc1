"""``load_model_by_name`` and ``list_backends``: from a model name to a running backend.

How the backend is chosen: docs/plugins.md, "How load_model_by_name chooses".
"""

from __future__ import annotations

import logging
from typing import Any

from genlm_core import settings
from genlm_core.errors import BackendContractError, NoBackendAvailableError
from genlm_core.lm._options import check_options
from genlm_core.plugins import official
from genlm_core.plugins.manager import GenlmPluginManager, get_plugin_manager
from genlm_core.plugins.registry import BackendRegistry, Registered
from genlm_core.plugins.specs import BackendSpec

log = logging.getLogger(__name__)


def _registry(plugin_manager: GenlmPluginManager | None) -> BackendRegistry:
    return BackendRegistry(plugin_manager or get_plugin_manager())


def list_backends(
    plugin_manager: GenlmPluginManager | None = None,
) -> list[Registered[BackendSpec]]:
    """Every registered backend, highest priority first (available or not)."""
    return _registry(plugin_manager).all()


def resolve_backend(
    model_name: str,
    backend: str | None = None,
    plugin_manager: GenlmPluginManager | None = None,
) -> Registered[BackendSpec]:
    """Pick the backend ``load_model_by_name`` would use, without loading anything.

    Args:
        model_name: The model to load (passed to ``genlm_select_backend`` hooks).
        backend: A backend name; None means ``GENLM_BACKEND`` or automatic choice.
        plugin_manager: Defaults to the process-wide manager.

    Raises:
        UnknownBackendError: The named backend is not installed.
        BackendUnavailableError: The named backend cannot run here.
        NoBackendAvailableError: Nothing automatic can run here.
    """
    registry = _registry(plugin_manager)
    named = backend if backend is not None else settings.default_backend()
    if named is not None:
        return registry.require_available(named)
    candidates = registry.available_auto()
    choice = registry.select(model_name, [c.name for c in candidates])  # faulty hooks skipped
    if choice is not None:
        return registry.require_available(choice)
    if not candidates:
        registered = {r.name for r in registry.all()}
        missing = official.not_installed(registered, registry.plugin_manager)
        fixes = "".join(f"\n  {m.backend.name}: {m.sentence()}" for m in missing)
        raise NoBackendAvailableError(
            f"no backend can load {model_name!r} on this machine. Registered backends:\n"
            f"{registry.diagnosis()}\n"
            f"Official backends not installed or not loaded:{fixes or ' none'}\n"
            "Install one, or name one with backend=... / GENLM_BACKEND."
        )
    return candidates[0]


def load_model_by_name(
    name: str,
    backend: str | None = None,
    llm_opts: dict[str, Any] | None = None,
    *,
    plugin_manager: GenlmPluginManager | None = None,
) -> Any:
    """Load a language model with the best (or the named) installed backend.

    Args:
        name: A hub model name or a local directory.
        backend: ``"vllm"``, ``"hf"``, ``"mlx"``, ``"sgl"``, ``"mock"`` or a plugin's
            name; None picks automatically (``GENLM_BACKEND`` overrides).
        llm_opts: Keyword arguments for the backend's ``from_name``.
        plugin_manager: Defaults to the process-wide manager (tests pass their own).

    Returns:
        An [`AsyncLM`][genlm_core.lm.AsyncLM].

    Raises:
        UnknownBackendError, BackendUnavailableError, NoBackendAvailableError: See
            [`resolve_backend`][].
        PluginLoadError: The backend's module failed to import.
        InvalidOptionError: ``llm_opts`` holds an option the backend does not take
            (checked before anything is loaded; the message lists the valid ones).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"model name must be a non-empty string, got {name!r}")
    if llm_opts is not None and not isinstance(llm_opts, dict):
        raise TypeError(f"llm_opts must be a dict of keyword arguments, got {llm_opts!r}")
    reg = resolve_backend(name, backend, plugin_manager)
    log.info("loading %r with backend %r (%s %s)", name, reg.name, reg.distribution, reg.version)
    loader = reg.spec.load()
    if llm_opts:
        check_options(loader, llm_opts, f"backend {reg.name!r} ({reg.spec.loader})")
    lm = loader(name, **(llm_opts or {}))
    from genlm_core.lm import AsyncLM

    if not isinstance(lm, AsyncLM):
        raise BackendContractError(
            f"backend {reg.name!r} ({reg.distribution}) loader {reg.spec.loader!r} returned "
            f"{type(lm).__name__}, which lacks the AsyncLM methods (byte_vocab, "
            f"next_token_logprobs, ...)"
        )
    return lm
