"""From the model name a user wrote to what a backend loads, failing fast with the fix.

The order (a local directory, a plugin's name, a hub id checked before any download)
is in docs/plugins.md, "Model names".
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from genlm_core.errors import InvalidArgumentError, ModelNotFoundError

#: Seconds to wait for the hub's answer before calling it unreachable.
HUB_PROBE_TIMEOUT_S = 10.0
_TRUE = {"1", "true", "yes", "on"}


def _plugin_model_names() -> list[str]:
    """The names plugins resolve with no hub (``genlm_model_names``), in their order."""
    from genlm_core.plugins import get_plugin_manager

    names: list[str] = []
    for answer in reversed(get_plugin_manager().hook.genlm_model_names()):  # first registered first
        names.extend(n for n in answer if n not in names)
    return names


def embedded_model(name: str) -> str | None:
    """The model called ``name`` (any case) that a plugin resolves with no hub, or None.

    genlm-core's embedded models (``genlm models``) are the ``genlm_assets`` plugin's.
    """
    folded = name.strip().casefold()
    return folded if folded in _plugin_model_names() else None


def _alternatives() -> str:
    names = _plugin_model_names()
    if not names:
        return (
            "enable a plugin that names models (genlm-core's embedded models come from its "
            "'assets' plugin: check GENLM_PLUGINS and GENLM_DISABLE_PLUGINS)"
        )
    return (
        f"load an embedded model, which needs no hub "
        f"(e.g. load_model_by_name({names[0]!r}); all of them: "
        f"{', '.join(names)}; `genlm models` lists them)"
    )


def _looks_like_path(name: str) -> bool:
    return (
        name.startswith(("/", "./", "../", "~", ".\\", "..\\"))
        or name in (".", "..")
        or name.count("/") > 1
        or "\\" in name
    )


def _hub_offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    return bool(constants.HF_HUB_OFFLINE) or env in _TRUE


def cached_snapshot(name: str) -> str | None:
    """The local Hugging Face cache's snapshot directory of hub id ``name``, or None.

    Any snapshot counts, whatever files it holds (a tokenizer-only repository has no
    ``config.json``). Never touches the network.

    Raises:
        huggingface_hub.errors.HFValidationError: ``name`` is not a valid hub id.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return str(snapshot_download(name, local_files_only=True))
    except LocalEntryNotFoundError:
        return None


def _check_hub(name: str) -> None:
    """Raise unless hub id ``name`` is cached locally or the hub can be asked for it."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        RepositoryNotFoundError,
    )

    try:
        if cached_snapshot(name) is not None:
            return  # in the local Hugging Face cache: loads offline
    except HFValidationError as exc:
        raise ModelNotFoundError(
            f"model {name!r} is neither a local directory nor a valid hub id ({exc}); "
            f"pass a local model directory, or {_alternatives()}"
        ) from None
    if _hub_offline():
        raise ModelNotFoundError(
            f"model {name!r} is a Hugging Face hub id, but HF_HUB_OFFLINE is set and it is "
            f"not in the local Hugging Face cache ({constants.HF_HUB_CACHE}). Unset "
            f"HF_HUB_OFFLINE to download it, pass a local model directory, or {_alternatives()}"
        )
    try:
        HfApi().model_info(name, timeout=HUB_PROBE_TIMEOUT_S)
    except GatedRepoError:
        return  # it exists; the loader explains the access the user needs
    except RepositoryNotFoundError:
        raise ModelNotFoundError(
            f"model {name!r} is not on the Hugging Face hub ({constants.ENDPOINT}) and is "
            f"not a local directory: check the spelling (a private model needs `hf auth "
            f"login`), pass a local model directory, or {_alternatives()}"
        ) from None
    except HfHubHTTPError:
        return  # the hub answered; the backend's loader reports anything else
    except Exception as exc:  # no answer: DNS, refused connection, timeout, proxy
        raise ModelNotFoundError(
            f"model {name!r} is a Hugging Face hub id, not in the local Hugging Face cache "
            f"({constants.HF_HUB_CACHE}), and the hub ({constants.ENDPOINT}) cannot be "
            f"reached: {type(exc).__name__}: {exc}. Connect (or set HTTPS_PROXY / "
            f"HF_ENDPOINT), pass a local model directory, or {_alternatives()}"
        ) from None


def resolve_model_name(name: str) -> str:
    """What a backend should load for ``name``: a local directory, or a hub id that can load.

    ``name`` is a local directory, an embedded model's name (``"smollm2-135m-instruct"``),
    or a hub id (``"openai-community/gpt2"``), returned as is.

    Raises:
        InvalidArgumentError: ``name`` is not a non-empty string.
        ModelNotFoundError: A path-like name with no directory there, a file instead
            of a directory, or a hub id that cannot load here (offline, unreachable,
            unknown); the message says what to do.
        genlm_assets.AssetFetchError: An embedded model could not be downloaded (the
            ``genlm_assets`` plugin answers their names).
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentError(f"model name must be a non-empty string, got {name!r}")
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    from genlm_core.plugins import get_plugin_manager

    known = get_plugin_manager().hook.genlm_resolve_model_name(name=name)
    if known is not None:
        return str(known)
    if path.exists():
        raise ModelNotFoundError(
            f"model {name!r} is a file, not a directory: pass the directory holding "
            f"config.json, the weights and the tokenizer files"
        )
    if _looks_like_path(name):
        raise ModelNotFoundError(
            f"model directory {name!r} does not exist (no such directory: "
            f"{path.absolute()}); check the path, or {_alternatives()}"
        )
    _refuse_a_misspelt_embedded_name(name)
    _check_hub(name)
    return name


def _refuse_a_misspelt_embedded_name(name: str) -> None:
    """Raise at once for a name with no owner that is close to an embedded model's.

    A hub id with no owner (``gpt2``) still goes to the hub; one that reads like a typo
    of an embedded model's name gets its "did you mean" without a network round trip.
    """
    if "/" in name:
        return
    folded, names = name.strip().casefold(), _plugin_model_names()
    close = difflib.get_close_matches(folded, names, n=1, cutoff=0.8) or [
        n for n in names if n.startswith(folded) and 2 * len(folded) >= len(n)
    ]
    if close:
        raise ModelNotFoundError(
            f"model {name!r} is not an embedded model; did you mean {close[0]!r}? (A "
            f"Hugging Face hub id names its owner, 'owner/name'; `genlm models` lists the "
            f"embedded ones.)"
        )
