"""The hooks a genlm plugin may implement (docs/plugins.md is the manual).

A plugin is a module named by an entry point (group ``genlm.backends``, ``genlm.tries``
or, for the other hooks, ``genlm.plugins``) holding functions decorated with
[`genlm_core.plugins.hookimpl`][]. It is imported whenever a backend is listed or
loaded, so keep it import-light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import argparse

    from genlm_core.plugins.specs import BackendSpec, TrieSpec

PROJECT_NAME = "genlm"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec
def genlm_register_backends(register: Callable[[BackendSpec], None]) -> None:
    """Register the language-model backends this plugin provides.

    Called whenever backends are listed or loaded: register the same specs each time.

    Args:
        register: Call it with one [`BackendSpec`][genlm_core.plugins.BackendSpec] per
            backend. Registering a name twice (here or in another plugin) makes that
            name unusable until one plugin is removed: genlm never picks silently.
    """


@hookspec
def genlm_register_tries(register: Callable[[TrieSpec], None]) -> None:
    """Register this plugin's token tries: one [`TrieSpec`][genlm_core.plugins.TrieSpec] each."""


@hookspec(firstresult=True)
def genlm_select_backend(model_name: str, candidates: list[str]) -> str | None:
    """Override which backend ``load_model_by_name`` picks automatically.

    Called only when the user named no backend (no ``backend=``, no
    ``GENLM_BACKEND``). The first non-None answer wins. ``candidates`` are the
    available automatic backends' names, best first.

    Returns:
        A backend name (it need not be in ``candidates``, but must be registered
        and available), or None to keep the default choice.
    """


@hookspec(firstresult=True)
def genlm_resolve_model_name(name: str) -> str | None:
    """Turn a model name this plugin knows into a local directory a backend can load.

    Asked by [`resolve_model_name`][genlm_core.loading.resolve_model_name] (which every official
    backend's ``from_name`` calls) for a name that is not an existing directory, before
    it is taken for a hub id. genlm-core's embedded models (``genlm_assets``) answer here.

    Returns:
        A local directory holding the model, or None when the name is not this
        plugin's. Raise (with the fix in the message) when it is, but cannot be made.
    """


@hookspec
def genlm_model_names() -> list[str]:
    """The model names this plugin resolves with no model hub, the one to suggest first.

    The core suggests them when a name cannot be loaded, and
    [`embedded_model`][genlm_core.loading.embedded_model] recognizes them (any case).

    Returns:
        Lowercase names, each one [`genlm_resolve_model_name`][] answers.
    """


@hookspec
def genlm_cli_commands(commands: argparse._SubParsersAction) -> None:
    """Add sub-commands to the ``genlm`` command line (``genlm models``, ``genlm fetch``).

    Args:
        commands: The ``genlm`` parser's sub-parsers: call ``commands.add_parser``,
            and ``set_defaults(run=f)`` with ``f(args) -> int`` the exit status.
    """
