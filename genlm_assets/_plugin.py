"""genlm_assets as a genlm plugin: its model names, their directories, its commands.

Registered by genlm-core's ``pyproject.toml`` in the ``genlm.plugins`` entry-point
group, as any third-party plugin would be: ``load_model_by_name("smollm2-135m-instruct")``
reaches the builder only through [`genlm_resolve_model_name`][], and ``genlm models``
/ ``genlm fetch`` come from [`genlm_cli_commands`][]. Import-light: the builder
([`genlm_assets`][]) is imported only when a hook is called.
"""

from __future__ import annotations

from genlm_core.plugins import hookimpl


@hookimpl
def genlm_model_names():
    """The embedded models' names, the default model first."""
    from genlm_assets import DEFAULT_MODEL, MODEL_NAMES

    return [DEFAULT_MODEL, *(n for n in MODEL_NAMES if n != DEFAULT_MODEL)]


@hookimpl
def genlm_resolve_model_name(name):
    """The asset directory of the embedded model called ``name`` (any case), or None."""
    from genlm_assets import MODEL_NAMES, model_dir

    folded = name.strip().casefold()
    if folded not in MODEL_NAMES:
        return None
    return str(model_dir(folded))


@hookimpl
def genlm_cli_commands(commands):
    """``genlm models``, ``genlm fetch NAME`` and ``genlm path NAME``."""
    from genlm_assets.cli import add_commands

    add_commands(commands)
