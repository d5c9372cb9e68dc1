"""The one reader of the official plugins' install recipes (``genlm_X/install.toml``).

The format is in docs/maintainers.md. The noxfile and the release tests load this
module by path, so it imports only the standard library (and uses named tuples: a
dataclass needs its module in ``sys.modules``).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import NamedTuple

#: The recipe's file name in each official plugin's import package.
FILE = "install.toml"
_CONDITIONS = ("gpus", "system", "machine")


class Rule(NamedTuple):
    """One case of a recipe: when it applies, its extra, its note and the steps after."""

    when: dict[str, object]
    extra: str | None
    note: str
    after_extra: tuple[str, ...]
    remove_after_extra: tuple[str, ...]

    def applies(self, *, gpus: int, system: str, machine: str) -> bool:
        """Whether every condition of ``when`` holds on that machine."""
        facts = {"gpus": gpus > 0, "system": system, "machine": machine}
        for key, wanted in self.when.items():
            if key == "gpus":
                wanted = bool(wanted)
            if facts[key] not in (wanted if isinstance(wanted, list) else [wanted]):
                return False
        return True


class Recipe(NamedTuple):
    """An official plugin's install recipe, read from its ``install.toml``."""

    distribution: str
    runs_on: str
    otherwise: str
    rules: tuple[Rule, ...]

    def engine_extra(self, *, gpus: int, system: str, machine: str) -> tuple[str | None, str]:
        """The extra that brings the engine on that machine (or None), and a note on why."""
        facts = {"gpus": gpus, "system": system, "machine": machine}
        rule = next((r for r in self.rules if r.applies(**facts)), None)
        if rule is None:
            return None, self.otherwise.format(**facts)
        return rule.extra, rule.note.format(**facts)

    def _with(self, extra: str | None) -> Rule | None:
        return next((r for r in self.rules if extra is not None and r.extra == extra), None)

    def after_extra(self, extra: str | None) -> tuple[str, ...]:
        """Further ``pip install`` arguments after installing with ``extra``."""
        rule = self._with(extra)
        return rule.after_extra if rule is not None else ()

    def remove_after_extra(self, extra: str | None) -> tuple[str, ...]:
        """Distributions to ``pip uninstall`` after installing with ``extra``."""
        rule = self._with(extra)
        return rule.remove_after_extra if rule is not None else ()


def load(path: Path) -> Recipe:
    """The recipe in the TOML file ``path``.

    Raises:
        ValueError: A rule names a condition other than gpus, system and machine.
    """
    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    rules = []
    for raw in data.get("rule", []):
        when = dict(raw.get("when", {}))
        unknown = set(when) - set(_CONDITIONS)
        if unknown:
            raise ValueError(f"{path}: unknown conditions {sorted(unknown)} in {raw}")
        rules.append(
            Rule(
                when=when,
                extra=raw.get("extra"),
                note=raw.get("note", ""),
                after_extra=tuple(raw.get("after_extra", ())),
                remove_after_extra=tuple(raw.get("remove_after_extra", ())),
            )
        )
    return Recipe(
        distribution=data["distribution"],
        runs_on=data["runs_on"],
        otherwise=data.get("otherwise", ""),
        rules=tuple(rules),
    )
