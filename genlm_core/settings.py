"""The environment variables genlm-core reads, all in one place.

``GENLM_PLUGINS``, ``GENLM_DISABLE_PLUGINS`` (which plugins load) and ``GENLM_BACKEND``
(the backend used when none is named): docs/plugins.md, "Choosing plugins".
``GENLM_TRIM_HEAP``: see [`trim_heap`][]. (``GENLM_ASSETS_DIR`` is [`genlm_assets`][]'.)
"""

from __future__ import annotations

import os

__all__ = ["default_backend", "plugin_allow_list", "plugin_deny_list", "trim_heap"]


def _split(value: str) -> frozenset[str]:
    return frozenset(_normalize(v) for v in value.split(",") if v.strip())


def _normalize(name: str) -> str:
    """Normalize like PEP 503 so ``genlm_hf``, ``genlm-hf`` and ``Genlm.HF`` match."""
    return name.strip().lower().replace("_", "-").replace(".", "-")


def plugin_allow_list() -> frozenset[str] | None:
    """Names allowed by ``GENLM_PLUGINS``, or None when every plugin is allowed."""
    value = os.environ.get("GENLM_PLUGINS")
    return None if value is None else _split(value)


def plugin_deny_list() -> frozenset[str]:
    """Names blocked by ``GENLM_DISABLE_PLUGINS``."""
    return _split(os.environ.get("GENLM_DISABLE_PLUGINS", ""))


def default_backend() -> str | None:
    """The backend named by ``GENLM_BACKEND``, or None."""
    value = os.environ.get("GENLM_BACKEND", "").strip()
    return value or None


def plugin_selected(*names: str | None) -> tuple[bool, str]:
    """Whether a plugin known by any of ``names`` passes the allow and deny lists, and why not.

    ``why_not`` names the variable that excluded it.
    """
    keys = {_normalize(n) for n in names if n}
    allow = plugin_allow_list()
    if allow is not None and not keys & allow:
        return False, "not in GENLM_PLUGINS"
    if keys & plugin_deny_list():
        return False, "listed in GENLM_DISABLE_PLUGINS"
    return True, ""


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def trim_heap() -> bool | None:
    """``GENLM_TRIM_HEAP`` as a bool, or None when unset (or empty).

    Whether models return freed heap memory to the OS after batches, over each
    backend's default (see genlm_core.runtime.HeapTrimmer); a model's ``trim_heap=``
    option wins over it. Spellings: 1/0, true/false, on/off, yes/no.

    Raises:
        ValueError: The value is not one of the spellings of yes or no.
    """
    value = os.environ.get("GENLM_TRIM_HEAP", "").strip().lower()
    if not value:
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"GENLM_TRIM_HEAP={os.environ['GENLM_TRIM_HEAP']!r} is neither on nor off; set it "
        f"to 1 or 0 (or unset it for each backend's default)"
    )
