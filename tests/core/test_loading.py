"""Backend resolution: named, environment, automatic, select hook, and every error path."""

import re

import pytest

from genlm_core import load_model_by_name
from genlm_core.errors import (
    BackendContractError,
    BackendUnavailableError,
    DuplicateBackendError,
    GenlmError,
    NoBackendAvailableError,
    PluginLoadError,
    UnknownBackendError,
)
from genlm_core.loading import resolve_backend
from genlm_core.plugins import Availability, BackendSpec, hookimpl
from genlm_core.plugins.official import install_command


class FakeLM:
    """Has the AsyncLM surface (the Protocol is structural)."""

    tokenizer = None
    byte_vocab: list = []
    str_vocab: list = []

    def __init__(self, name, **opts):
        self.name, self.opts = name, opts

    async def next_token_logprobs(self, token_ids, lora_name=None): ...

    def next_token_logprobs_sync(self, token_ids, lora_name=None): ...

    async def batch_next_token_logprobs(self, token_ids_list, lora_name=None): ...


def backends_plugin(*specs):
    class Plugin:
        @hookimpl
        def genlm_register_backends(self, register):
            for spec in specs:
                register(spec)

    return Plugin()


def spec(name, priority=0, ok=True, auto=True, loader=FakeLM):
    avail = Availability.yes() if ok else Availability.no(f"{name} needs a flux capacitor")
    return BackendSpec(name=name, loader=loader, priority=priority, check=lambda: avail, auto=auto)


@pytest.fixture(autouse=True)
def _no_env_backend(monkeypatch):
    monkeypatch.delenv("GENLM_BACKEND", raising=False)


def test_highest_priority_available_auto_backend_wins(plugin_manager, register_plugin):
    register_plugin(
        backends_plugin(
            spec("low", 10),
            spec("high", 90),
            spec("broken-high", 95, ok=False),
            spec("manual", 99, auto=False),
        )
    )
    assert resolve_backend("m", plugin_manager=plugin_manager).name == "high"
    lm = load_model_by_name("m", llm_opts={"x": 1}, plugin_manager=plugin_manager)
    assert isinstance(lm, FakeLM) and lm.name == "m" and lm.opts == {"x": 1}


def test_named_backend_is_used_even_if_lower_priority(plugin_manager, register_plugin):
    register_plugin(backends_plugin(spec("low", 10), spec("high", 90)))
    assert resolve_backend("m", "low", plugin_manager).name == "low"


def test_env_backend(plugin_manager, register_plugin, monkeypatch):
    register_plugin(backends_plugin(spec("low", 10), spec("high", 90)))
    monkeypatch.setenv("GENLM_BACKEND", "low")
    assert resolve_backend("m", plugin_manager=plugin_manager).name == "low"
    # an explicit argument beats the environment
    assert resolve_backend("m", "high", plugin_manager).name == "high"


def test_unknown_backend_lists_installed_and_hint(plugin_manager, register_plugin):
    register_plugin(backends_plugin(spec("alpha")))
    with pytest.raises(UnknownBackendError) as info:
        load_model_by_name("m", backend="vllm", plugin_manager=plugin_manager)
    msg = str(info.value)
    assert "'vllm'" in msg and "alpha" in msg and "mock" in msg
    # the command that brings vLLM's engine on this machine, extra included
    assert install_command("vllm") in msg
    assert re.search(r"genlm[-_]vllm\[(cpu|cuda)\]", install_command("vllm"))
    assert isinstance(info.value, KeyError) and isinstance(info.value, GenlmError)


def test_unavailable_named_backend_never_falls_back(plugin_manager, register_plugin):
    register_plugin(backends_plugin(spec("gpu", 90, ok=False), spec("cpu", 10)))
    with pytest.raises(BackendUnavailableError, match="flux capacitor"):
        load_model_by_name("m", backend="gpu", plugin_manager=plugin_manager)


def test_no_backend_available_is_a_full_diagnosis(plugin_manager, register_plugin):
    register_plugin(backends_plugin(spec("gpu", 90, ok=False)))
    with pytest.raises(NoBackendAvailableError) as info:
        load_model_by_name("m", plugin_manager=plugin_manager)
    msg = str(info.value)
    assert "gpu" in msg and "flux capacitor" in msg and "mock" in msg and "pip install" in msg


def test_select_hook_overrides_automatic_choice(plugin_manager, register_plugin):
    seen = {}

    class Site:
        @hookimpl
        def genlm_select_backend(self, model_name, candidates):
            seen["args"] = (model_name, candidates)
            return "low" if model_name.startswith("small/") else None

    register_plugin(backends_plugin(spec("low", 10), spec("high", 90)))
    register_plugin(Site())
    assert resolve_backend("small/x", plugin_manager=plugin_manager).name == "low"
    assert seen["args"] == ("small/x", ["high", "low"])
    assert resolve_backend("big/x", plugin_manager=plugin_manager).name == "high"


def test_duplicate_names_are_an_error_not_a_rename(plugin_manager, register_plugin, registry):
    register_plugin(backends_plugin(spec("twin")), name="one")
    register_plugin(backends_plugin(spec("twin")), name="two")
    with pytest.raises(DuplicateBackendError, match="one.*two|two.*one"):
        resolve_backend("m", "twin", plugin_manager)
    assert "twin" not in registry.names()
    assert "twin" in registry.conflicts()


def test_register_hook_that_raises_is_isolated(plugin_manager, register_plugin, registry):
    class Bad:
        @hookimpl
        def genlm_register_backends(self, register):
            raise RuntimeError("boom in plugin")

    register_plugin(Bad(), name="bad")
    register_plugin(backends_plugin(spec("good")))
    assert "good" in registry.names()
    assert any(b.plugin == "bad" and "boom in plugin" in b.error for b in registry.broken())


def test_registering_a_non_spec_is_recorded(plugin_manager, register_plugin, registry):
    class Wrong:
        @hookimpl
        def genlm_register_backends(self, register):
            register({"name": "dict-spec"})

    register_plugin(Wrong(), name="wrong")
    assert any("expected a BackendSpec" in b.error for b in registry.broken())


def test_loader_import_failure_is_a_plugin_load_error(plugin_manager, register_plugin):
    register_plugin(backends_plugin(spec("ghost", loader="no_such_module_xyz:Model.from_name")))
    with pytest.raises(PluginLoadError, match="no_such_module_xyz"):
        load_model_by_name("m", backend="ghost", plugin_manager=plugin_manager)


def test_loader_returning_wrong_type_breaks_contract(plugin_manager, register_plugin):
    register_plugin(backends_plugin(spec("liar", loader=lambda name: object())))
    with pytest.raises(BackendContractError, match="liar"):
        load_model_by_name("m", backend="liar", plugin_manager=plugin_manager)


def test_crashing_probe_is_reported_not_raised(plugin_manager, register_plugin, registry):
    def probe():
        raise OSError("driver exploded")

    register_plugin(backends_plugin(BackendSpec(name="crashy", loader=FakeLM, check=probe)))
    avail = registry.get("crashy").availability()
    assert not avail.ok and "driver exploded" in avail.reason


@pytest.mark.parametrize("bad", ["", None, 3])
def test_bad_model_name(bad, plugin_manager):
    with pytest.raises((ValueError, TypeError)):
        load_model_by_name(bad, backend="mock", plugin_manager=plugin_manager)


def test_mock_backend_loads_by_name(plugin_manager):
    lm = load_model_by_name("bytes", backend="mock", plugin_manager=plugin_manager)
    assert len(lm.byte_vocab) == 257
    out = lm.next_token_logprobs_sync([104, 105])
    assert out.shape == (257,)
    lm.cleanup()
