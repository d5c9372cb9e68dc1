"""How to install genlm-hf on a given machine: the plugin's own recipe.

genlm-core reads this module for ``genlm backends`` and for the hint of the ``hf``
backend (imported from the installed package, or loaded by path from a checkout's
``plugins/`` folder when genlm-hf is not installed), and the noxfile can load it by
path: so it imports only the standard library. transformers and torch are plain
dependencies, so no machine needs an extra; ``peft`` (LoRA) and ``bitsandbytes``
(8/4-bit weights) are optional features.
"""

from __future__ import annotations

__all__ = ["AFTER_EXTRA", "BACKEND", "DISTRIBUTION", "RUNS_ON", "engine_extra"]

BACKEND = "hf"
DISTRIBUTION = "genlm-hf"
RUNS_ON = "any machine (Hugging Face transformers)"
#: Further ``pip install`` arguments after installing with an extra (none needed).
AFTER_EXTRA: dict[str, tuple[str, ...]] = {}


def engine_extra(*, gpus: int, system: str, machine: str) -> tuple[str | None, str]:
    """No extra anywhere: transformers comes with genlm-hf itself."""
    return None, ""
