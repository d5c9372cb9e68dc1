"""Skip only what the nox session did not mean to install; a broken install fails.

``pytest.importorskip`` turns any ``ImportError`` into a skip, also one raised deep
inside an engine that is installed but broken, so a session could report green having
tested nothing. Each nox session lists in ``GENLM_TEST_INSTALLED`` (comma-separated
top-level module names) what it installed. For those, :func:`require` imports the
module plainly, and an ``ImportError`` fails the run. For anything else (a developer's
partial environment, or an engine the host cannot run) it skips with the reason.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

__all__ = ["ENV", "declared", "require"]

#: The variable the noxfile sets for each session.
ENV = "GENLM_TEST_INSTALLED"


def declared() -> frozenset[str]:
    """The top-level modules this session declares installed (empty outside nox)."""
    return frozenset(m.strip() for m in os.environ.get(ENV, "").split(",") if m.strip())


def require(module: str, reason: str = "not installed") -> ModuleType:
    """Import ``module``; skip with ``reason`` only if the session did not declare it.

    Args:
        module: A module name (``"vllm"``, ``"genlm_hf.lm"``); its top-level package
            is what the session declares.
        reason: Why it may be missing, for the skip message.

    Returns:
        The module.

    Raises:
        ImportError: The session declared it, and it does not import: a broken
            install, which must fail the run.
    """
    if module.partition(".")[0] in declared():
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{reason} ({ENV} does not list it)")
