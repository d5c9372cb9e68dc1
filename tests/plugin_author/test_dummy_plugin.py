"""A real third-party plugin, installed from tests/plugins/genlm_dummy like any other.

``nox -s plugin-author`` installs that distribution (not editable) and runs this file:
discovery through its entry point, the allow and deny lists, and the exact
log-probabilities of its bigram model. The standard AsyncLMConformance suite is the
distribution's own test (tests/plugins/genlm_dummy/tests/test_dummy.py), which
test_plugin_docs.py runs in a fresh venv built from docs/plugin-quickstart.md.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from session_requires import require

require("genlm_dummy", reason="genlm-dummy is not installed (nox -s plugin-author installs it)")

from genlm_core import load_model_by_name  # noqa: E402
from genlm_core.plugins import BackendRegistry, get_plugin_manager  # noqa: E402
from genlm_core.trie import AsyncTokenCharacterTrie  # noqa: E402

SELECTION_VARIABLES = ("GENLM_PLUGINS", "GENLM_DISABLE_PLUGINS", "GENLM_BACKEND")


def clean_env(**env: str) -> dict[str, str]:
    """This process's environment without the plugin-selection variables, plus ``env``."""
    outer = {k: v for k, v in os.environ.items() if k not in SELECTION_VARIABLES}
    return {**outer, **env}


def run_genlm(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the genlm CLI in a fresh process with exactly the given selection variables."""
    return subprocess.run(
        [sys.executable, "-m", "genlm_core", *args],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        check=False,
    )


def backends_json(**env: str) -> dict:
    result = run_genlm("backends", "--json", **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def names(report: dict) -> set[str]:
    return {b["name"] for b in report["backends"]}


def test_listed_with_distribution_and_version():
    report = backends_json()
    (dummy,) = [b for b in report["backends"] if b["name"] == "dummy"]
    assert dummy["distribution"] == "genlm-dummy"
    assert dummy["version"] == "0.1.0"
    assert dummy["plugin"] == "dummy"  # the entry-point name
    assert (dummy["available"], dummy["auto"]) == (True, False)
    assert "dummy" not in {b["plugin"] for b in report["broken_plugins"]}


def test_trie_listed_with_distribution():
    report = backends_json()
    (trie,) = [t for t in report["tries"] if t["name"] == "dummy-trie"]
    assert (trie["distribution"], trie["version"], trie["plugin"]) == (
        "genlm-dummy",
        "0.1.0",
        "dummy-trie",  # the entry-point name in genlm.tries
    )
    assert (trie["kind"], trie["auto"], trie["available"]) == ("character", False, True)


def test_installed_backends_fixture_sees_it(installed_backends):
    assert installed_backends["dummy"].distribution == "genlm-dummy"
    assert "mock" in installed_backends


def test_gone_with_empty_allow_list_while_builtins_stay():
    report = backends_json(GENLM_PLUGINS="")
    assert "dummy" not in names(report)
    assert "mock" in names(report)
    tries = {t["name"] for t in report["tries"]}
    assert "dummy-trie" not in tries and "reference" in tries
    assert {"plugin": "dummy", "why": "not in GENLM_PLUGINS"} in report["disabled_plugins"]


def test_allow_list_naming_it_keeps_it():
    report = backends_json(GENLM_PLUGINS="genlm-dummy")
    assert {"dummy", "mock"} <= names(report)


@pytest.mark.parametrize("value", ["genlm-dummy", "genlm_dummy", "dummy"])
def test_hidden_by_deny_list(value):
    report = backends_json(GENLM_DISABLE_PLUGINS=value)
    assert "dummy" not in names(report)
    assert "mock" in names(report)
    assert {"plugin": "dummy", "why": "listed in GENLM_DISABLE_PLUGINS"} in report[
        "disabled_plugins"
    ]


def test_loading_a_disabled_plugin_says_why():
    code = "from genlm_core import load_model_by_name\nload_model_by_name('abc', backend='dummy')\n"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(GENLM_DISABLE_PLUGINS="genlm-dummy"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "UnknownBackendError: unknown backend 'dummy'" in result.stderr
    assert "Disabled plugins: dummy (listed in GENLM_DISABLE_PLUGINS)" in result.stderr


def test_never_chosen_automatically(installed_backends):
    assert installed_backends["dummy"].spec.auto is False
    registry = BackendRegistry(get_plugin_manager())
    assert "dummy" not in [r.name for r in registry.available_auto()]


def test_exact_log_probabilities():
    lm = load_model_by_name("abab", backend="dummy")
    # After "a": "b" was seen twice; add-one smoothing over 257 tokens gives 259 in all.
    expected = torch.full((257,), math.log(1 / 259), dtype=torch.float32)
    expected[ord("b")] = math.log(3 / 259)
    torch.testing.assert_close(lm.next_token_logprobs_sync(list(b"xa")), expected)
    lm.cleanup()


async def test_trie_plugin_over_the_model_vocabulary():
    lm = load_model_by_name("abab", backend="dummy")
    trie = AsyncTokenCharacterTrie.from_vocab(lm.byte_vocab, backend="dummy-trie")
    probs = (await lm.next_token_logprobs(list(b"a"))).exp()
    root = trie.trie.root
    assert (await trie.weight_sum(probs))[root] == pytest.approx(1.0, abs=1e-5)
    assert (await trie.weight_max(probs))[root] == pytest.approx(3 / 259, rel=1e-5)
    await trie.cleanup()
    lm.cleanup()
