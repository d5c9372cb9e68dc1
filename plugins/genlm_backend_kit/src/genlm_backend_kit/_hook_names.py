"""The backend-kit hooks' old, underscored names, still honoured in subclasses.

Until genlm-core 0.1 the hooks a ``PrefixCachedLM`` or ``EngineLM`` subclass implements
had private names (``_forward_rows``, ``_engine_lock``, ...). A subclass that still
defines one gets it under the public name, with a DeprecationWarning that says which.
"""

from __future__ import annotations

import warnings

#: Old name -> public name, for each base's hooks.
PREFIX_CACHED = {
    "_forward_input": "forward_input",
    "_forward_rows": "forward_rows",
    "_plain_logprobs": "plain_logprobs",
    "_load_weights": "load_weights",
    "_delete_weights": "delete_weights",
    "_activate": "activate_adapter",
}
ENGINE = {
    "_engine_lock": "engine_lock",
    "_lora_enabled": "engine_has_lora",
    "_load_into_engine": "load_into_engine",
    "_unload_from_engine": "unload_from_engine",
    "_shutdown_engine": "close_engine",
}


def adopt_old_hook_names(cls: type, renames: dict[str, str]) -> None:
    """Give ``cls`` each hook it defines under an old name under the public one too."""
    for old, new in renames.items():
        if old in cls.__dict__ and new not in cls.__dict__:
            warnings.warn(
                f"{cls.__qualname__}.{old} is the old name of the hook {new}: rename it "
                f"(it is used as {new} meanwhile)",
                DeprecationWarning,
                stacklevel=3,
            )
            setattr(cls, new, cls.__dict__[old])
