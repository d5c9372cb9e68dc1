"""Hook implementations are called the way pluggy calls them, and a faulty one is isolated.

pluggy passes each implementation only the arguments it declares (fewer than the
hookspec's is valid); genlm-core must do the same. A ``genlm_select_backend`` that
raises is reported like a broken register hook, and automatic loading goes on.
"""

import pytest

from genlm_core import load_model_by_name
from genlm_core.loading import resolve_backend
from genlm_core.plugins import Availability, BackendSpec, hookimpl


class FakeLM:
    """Has the AsyncLM surface (the Protocol is structural)."""

    tokenizer = None
    byte_vocab: list = []
    str_vocab: list = []

    def __init__(self, name, **opts):
        self.name = name

    async def next_token_logprobs(self, token_ids, lora_name=None): ...

    def next_token_logprobs_sync(self, token_ids, lora_name=None): ...

    async def batch_next_token_logprobs(self, token_ids_list, lora_name=None): ...


def spec(name, priority=0):
    return BackendSpec(name=name, loader=FakeLM, priority=priority, check=Availability.yes)


class Backends:
    def __init__(self, *specs):
        self.specs = specs

    @hookimpl
    def genlm_register_backends(self, register):
        for s in self.specs:
            register(s)


@pytest.fixture(autouse=True)
def _no_env_backend(monkeypatch):
    monkeypatch.delenv("GENLM_BACKEND", raising=False)


def test_register_hook_declaring_no_argument_is_valid(plugin_manager, register_plugin, registry):
    calls = []

    class Quiet:
        """Declares none of the hookspec's arguments: pluggy calls it with none."""

        @hookimpl
        def genlm_register_backends(self):
            calls.append("backends")

        @hookimpl
        def genlm_register_tries(self):
            calls.append("tries")

    register_plugin(Quiet(), name="quiet")
    register_plugin(Backends(spec("good")))
    plugin_manager.hook.genlm_register_backends(register=lambda s: None)  # pluggy: fine
    assert calls == ["backends"]
    assert "good" in registry.names()
    assert registry.broken() == []
    assert set(calls) == {"backends"} and len(calls) > 1  # the registry called it too


def test_select_hook_declaring_only_model_name(plugin_manager, register_plugin):
    class Site:
        @hookimpl
        def genlm_select_backend(self, model_name):
            return "low" if model_name.startswith("small/") else None

    register_plugin(Backends(spec("low", 10), spec("high", 90)))
    register_plugin(Site(), name="site")
    assert resolve_backend("small/x", plugin_manager=plugin_manager).name == "low"
    assert resolve_backend("big/x", plugin_manager=plugin_manager).name == "high"


def test_select_hook_that_raises_is_isolated_and_reported(
    plugin_manager, register_plugin, registry
):
    class Faulty:
        @hookimpl
        def genlm_select_backend(self, model_name, candidates):
            raise RuntimeError("site hook exploded")

    register_plugin(Backends(spec("low", 10), spec("high", 90)))
    register_plugin(Faulty(), name="faulty-site")
    lm = load_model_by_name("any/model", plugin_manager=plugin_manager)
    assert isinstance(lm, FakeLM)
    assert resolve_backend("any/model", plugin_manager=plugin_manager).name == "high"
    broken = [b for b in registry.broken() if b.plugin == "faulty-site"]
    assert [(b.group, b.error) for b in broken] == [
        ("genlm_select_backend", "RuntimeError: site hook exploded")
    ]  # reported once, however often it ran


def test_a_faulty_select_hook_does_not_silence_a_working_one(plugin_manager, register_plugin):
    class Working:
        @hookimpl
        def genlm_select_backend(self, model_name, candidates):
            return "low"

    class Faulty:
        @hookimpl(tryfirst=True)
        def genlm_select_backend(self, model_name, candidates):
            raise KeyError("nope")

    register_plugin(Backends(spec("low", 10), spec("high", 90)))
    register_plugin(Working(), name="working")
    register_plugin(Faulty(), name="faulty")
    assert resolve_backend("m", plugin_manager=plugin_manager).name == "low"


def test_select_hook_answering_a_non_name_is_reported(plugin_manager, register_plugin, registry):
    class Odd:
        @hookimpl
        def genlm_select_backend(self, model_name, candidates):
            return 42

    register_plugin(Backends(spec("high", 90)))
    register_plugin(Odd(), name="odd")
    assert resolve_backend("m", plugin_manager=plugin_manager).name == "high"
    (entry,) = [b for b in registry.broken() if b.plugin == "odd"]
    assert entry.error == (
        "BackendContractError: genlm_select_backend of plugin 'odd' returned 42; "
        "expected a backend name (str) or None"
    )


def test_select_hooks_run_in_pluggy_order(plugin_manager, register_plugin):
    """The last registered implementation answers first, as under pluggy's firstresult."""

    def site(answer):
        class Site:
            @hookimpl
            def genlm_select_backend(self, model_name, candidates):
                return answer

        return Site()

    register_plugin(Backends(spec("a"), spec("b"), spec("c")))
    register_plugin(site("a"), name="first")
    register_plugin(site("b"), name="second")
    expected = plugin_manager.hook.genlm_select_backend(model_name="m", candidates=[])
    assert expected == "b"
    assert resolve_backend("m", plugin_manager=plugin_manager).name == expected


def test_register_hook_wrapper_is_reported_not_silently_ignored(
    plugin_manager, register_plugin, registry
):
    class Wrapper:
        @hookimpl(wrapper=True)
        def genlm_register_backends(self, register):
            result = yield
            return result

    register_plugin(Wrapper(), name="wrapper")
    (entry,) = [b for b in registry.broken() if b.plugin == "wrapper"]
    assert "is a hook wrapper" in entry.error and "wrapper=True" in entry.error
