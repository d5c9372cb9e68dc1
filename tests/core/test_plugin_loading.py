"""Entry-point loading isolates failures per plugin (no package is installed for these tests).

Each test describes fake distributions; ``importlib.metadata.entry_points`` is
monkeypatched to return their real ``EntryPoint`` objects (bound to the fake
distribution, so name and version are reported), and the plugin modules are written to
a temporary directory on ``sys.path``.
"""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
from pathlib import Path

import pytest

from genlm_core.errors import UnknownBackendError
from genlm_core.plugins import BackendRegistry, TrieRegistry, make_plugin_manager

GOOD = """
from genlm_core.plugins import BackendSpec, hookimpl

@hookimpl
def genlm_register_backends(register):
    register(BackendSpec(name="{name}", loader="genlm_core.testing.mock:MockAsyncLM.from_name"))
"""

RAISES = """
raise RuntimeError("boom: this plugin cannot be imported")
"""

MISSPELLED = """
from genlm_core.plugins import BackendSpec, hookimpl

@hookimpl
def genlm_register_backend(register):  # missing the final "s"
    register(BackendSpec(name="typo", loader="genlm_core.testing.mock:MockAsyncLM.from_name"))
"""

BOTH_GROUPS = """
from genlm_core.plugins import BackendSpec, TrieSpec, hookimpl

@hookimpl
def genlm_register_backends(register):
    register(BackendSpec(name="both", loader="genlm_core.testing.mock:MockAsyncLM.from_name"))

@hookimpl
def genlm_register_tries(register):
    register(TrieSpec(name="both-trie", loader="genlm_core.testing.mock:MockAsyncLM"))
"""


class FakeDistribution(importlib.metadata.Distribution):
    """An installed distribution that exists only in memory."""

    def __init__(self, name: str, version: str, entry_points: dict[str, dict[str, str]]) -> None:
        sections = "\n".join(
            f"[{group}]\n" + "\n".join(f"{k} = {v}" for k, v in eps.items())
            for group, eps in entry_points.items()
        )
        self._files = {
            "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            "entry_points.txt": sections,
        }

    def read_text(self, filename: str) -> str | None:
        return self._files.get(filename)

    def locate_file(self, path: str) -> Path:
        return Path(path)


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """Write plugin modules importable by name; forgotten from sys.modules afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(module: str, source: str) -> str:
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        written.append(module)
        return module

    yield write
    for module in written:
        sys.modules.pop(module, None)


@pytest.fixture
def installed(monkeypatch):
    """Pretend that the given fake distributions are installed."""
    dists: list[FakeDistribution] = []

    def entry_points(**selection):
        eps = [ep for d in dists for ep in d.entry_points]
        return importlib.metadata.EntryPoints(eps).select(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    for var in ("GENLM_PLUGINS", "GENLM_DISABLE_PLUGINS", "GENLM_BACKEND"):
        monkeypatch.delenv(var, raising=False)

    def install(name: str, version: str, **groups: dict[str, str]) -> None:
        dists.append(
            FakeDistribution(name, version, {g.replace("_", "."): e for g, e in groups.items()})
        )

    return install


@pytest.fixture
def two_plugins(installed, plugin_dir):
    """genlm-good (backend "good") and genlm-other (backend "other")."""
    plugin_dir("fake_good_plugin", GOOD.format(name="good"))
    plugin_dir("fake_other_plugin", GOOD.format(name="other"))
    installed("genlm-good", "1.2.3", genlm_backends={"good": "fake_good_plugin"})
    installed("genlm-other", "0.4.0", genlm_backends={"other": "fake_other_plugin"})


def test_good_plugin_is_registered_with_its_origin(two_plugins):
    pm = make_plugin_manager()
    reg = BackendRegistry(pm).get("good")
    assert (reg.plugin, reg.distribution, reg.version) == ("good", "genlm-good", "1.2.3")
    assert {"good", "other", "mock"} <= set(BackendRegistry(pm).names())
    assert pm.broken == [] and pm.skipped == []


def test_plugin_whose_import_raises_is_recorded_and_others_still_load(
    installed, plugin_dir, two_plugins
):
    plugin_dir("fake_raising_plugin", RAISES)
    installed("genlm-raising", "0.0.1", genlm_backends={"raising": "fake_raising_plugin"})
    pm = make_plugin_manager()
    (broken,) = pm.broken
    assert (broken.plugin, broken.group, broken.distribution, broken.version) == (
        "raising",
        "genlm.backends",
        "genlm-raising",
        "0.0.1",
    )
    assert broken.error == "RuntimeError: boom: this plugin cannot be imported"
    registry = BackendRegistry(pm)
    assert {"good", "other", "mock"} <= set(registry.names())
    assert "plugin raising (genlm-raising) is broken: RuntimeError: boom" in registry.diagnosis()
    with pytest.raises(UnknownBackendError, match="Broken plugins: raising \\(genlm-raising\\)"):
        registry.get("raising")


def test_plugin_whose_module_is_missing_is_recorded(installed, two_plugins):
    installed("genlm-ghost", "1.0", genlm_backends={"ghost": "no_such_module_for_genlm"})
    pm = make_plugin_manager()
    assert [(b.plugin, b.error) for b in pm.broken] == [
        ("ghost", "ModuleNotFoundError: No module named 'no_such_module_for_genlm'")
    ]
    assert {"good", "other"} <= set(BackendRegistry(pm).names())


@pytest.mark.parametrize("value", ["genlm-good", "genlm_good", "GENLM.Good", "good", "x, good"])
def test_blocked_plugin_is_never_imported(two_plugins, monkeypatch, value):
    monkeypatch.setenv("GENLM_DISABLE_PLUGINS", value)
    pm = make_plugin_manager()
    names = BackendRegistry(pm).names()
    assert "good" not in names and "other" in names and "mock" in names
    assert pm.skipped == [("good", "listed in GENLM_DISABLE_PLUGINS")]
    assert "fake_good_plugin" not in sys.modules
    with pytest.raises(UnknownBackendError, match="Disabled plugins: good"):
        BackendRegistry(pm).get("good")


@pytest.mark.parametrize("value", ["genlm-other", "other", " other ,unrelated"])
def test_allow_list_loads_only_the_named_plugins(two_plugins, monkeypatch, value):
    monkeypatch.setenv("GENLM_PLUGINS", value)
    pm = make_plugin_manager()
    names = BackendRegistry(pm).names()
    assert "other" in names and "mock" in names and "good" not in names
    assert pm.skipped == [("good", "not in GENLM_PLUGINS")]
    assert "fake_good_plugin" not in sys.modules


def test_empty_allow_list_keeps_only_builtins(two_plugins, monkeypatch):
    monkeypatch.setenv("GENLM_PLUGINS", "")
    pm = make_plugin_manager()
    assert BackendRegistry(pm).names() == ["mock"]
    assert sorted(name for name, _ in pm.skipped) == ["good", "other"]


def test_deny_list_wins_over_allow_list(two_plugins, monkeypatch):
    monkeypatch.setenv("GENLM_PLUGINS", "good,other")
    monkeypatch.setenv("GENLM_DISABLE_PLUGINS", "genlm-other")
    names = BackendRegistry(make_plugin_manager()).names()
    assert "good" in names and "other" not in names


def test_misspelled_hook_is_recorded_broken(installed, plugin_dir, two_plugins):
    plugin_dir("fake_misspelled_plugin", MISSPELLED)
    installed("genlm-typo", "0.1", genlm_backends={"typo": "fake_misspelled_plugin"})
    pm = make_plugin_manager()
    (broken,) = pm.broken
    assert (broken.plugin, broken.distribution) == ("typo", "genlm-typo")
    assert "genlm_register_backend" in broken.error
    assert not pm.has_plugin("typo")
    assert {"good", "other"} <= set(BackendRegistry(pm).names())


def test_module_in_both_groups_is_registered_once(installed, plugin_dir):
    plugin_dir("fake_both_plugin", BOTH_GROUPS)
    installed(
        "genlm-both",
        "2.0",
        genlm_backends={"both": "fake_both_plugin"},
        genlm_tries={"both": "fake_both_plugin"},
    )
    pm = make_plugin_manager()
    assert pm.broken == []
    assert BackendRegistry(pm).get("both").distribution == "genlm-both"
    assert TrieRegistry(pm).get("both-trie").version == "2.0"


def test_same_entry_point_name_in_two_distributions(installed, plugin_dir):
    plugin_dir("fake_first_plugin", GOOD.format(name="first"))
    plugin_dir("fake_second_plugin", GOOD.format(name="second"))
    installed("genlm-first", "1.0", genlm_backends={"clash": "fake_first_plugin"})
    installed("genlm-second", "1.0", genlm_backends={"clash": "fake_second_plugin"})
    pm = make_plugin_manager()
    names = BackendRegistry(pm).names()
    assert "first" in names and "second" not in names
    assert BackendRegistry(pm).get("first").distribution == "genlm-first"
    (broken,) = pm.broken
    assert (broken.plugin, broken.distribution) == ("clash", "genlm-second")
    assert "already registered" in broken.error


def test_without_entry_points_nothing_is_imported(two_plugins):
    pm = make_plugin_manager(load_entrypoints=False)
    assert BackendRegistry(pm).names() == ["mock"]
    assert "fake_good_plugin" not in sys.modules
