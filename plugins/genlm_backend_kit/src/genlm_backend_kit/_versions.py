"""Whether an installed engine is a version a backend was tested with."""

from __future__ import annotations

import os

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version


def version_supported(installed: str, supported: str, allow_env: str) -> bool:
    """Whether ``installed`` falls in the PEP 440 range ``supported``, or ``allow_env=1``.

    The release part is compared (``0.5.23rc0+cpu`` counts as ``0.5.23``): a pre-release
    or a local build of a tested release has that release's internals. An unparsable
    version is unsupported. ``allow_env`` names the variable that lets a user try any.
    """
    if os.environ.get(allow_env) == "1":
        return True
    try:
        release = Version(Version(installed).base_version)
    except InvalidVersion:
        return False
    return release in SpecifierSet(supported)


def require_version(
    engine: str,
    installed: str,
    supported: str,
    *,
    allow_env: str,
    install: str,
    error: type[Exception],
) -> None:
    """Raise ``error`` unless [`version_supported`][] (naming both versions and the fix).

    ``engine`` names the engine in the message ("SGLang"); ``install`` is what to ``pip
    install`` for a supported version; ``error`` the backend's error class.
    """
    if not version_supported(installed, supported, allow_env):
        raise error(
            f"{engine} {installed} is installed, but only {supported} is supported; "
            f"pip install {install}, or set {allow_env}=1 to try this one"
        )


def require_pieces(what: str, missing: list[str], *, install: str, error: type[Exception]) -> None:
    """Raise ``error`` naming the ``missing`` pieces of ``what`` (an engine's internals)."""
    if missing:
        raise error(f"{what} lacks {', '.join(missing)}; install {install}")
