"""resolve_model_name: local dirs, embedded models, and hub ids that fail fast with the fix.

Nothing here reaches a real hub: an unreachable one is a closed local port, and a hub
that answers is a local HTTP server.
"""

import http.server
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

import genlm_assets as assets
from genlm_core.errors import InvalidArgumentError, ModelNotFoundError
from genlm_core.loading import resolve_model_name

FAST_S = 5.0  # the hub client's retries took ~54 s before


@pytest.fixture
def online(monkeypatch, tmp_path):
    """Hub mode on, with an empty Hugging Face cache."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def test_existing_directory_is_returned(tmp_path):
    assert resolve_model_name(str(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize("name", ["smollm2-135m-instruct", "SmolLM2-135M-Instruct", "TINY-GPT2"])
def test_embedded_model_by_short_name_any_case(name):
    assert resolve_model_name(name) == str(assets.model_dir(name.lower()))


@pytest.mark.parametrize("name", ["/no/such/model", "./no-such-model", "~/no-such", "a/b/c"])
def test_missing_directory_says_so(name):
    with pytest.raises(ModelNotFoundError, match="does not exist \\(no such directory") as info:
        resolve_model_name(name)
    assert "Repo id" not in str(info.value) and isinstance(info.value, OSError)


def test_a_file_is_not_a_model_directory(tmp_path):
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF")
    with pytest.raises(ModelNotFoundError, match="is a file, not a directory"):
        resolve_model_name(str(weights))


@pytest.mark.parametrize("bad", ["", "  ", None, 3])
def test_not_a_name(bad):
    with pytest.raises(InvalidArgumentError, match="non-empty string"):
        resolve_model_name(bad)


def test_offline_hub_id_fails_at_once_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    start = time.monotonic()
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model_name("gpt2")
    assert time.monotonic() - start < FAST_S
    message = str(info.value)
    assert "HF_HUB_OFFLINE is set" in message and "local model directory" in message
    assert "load_model_by_name('smollm2-135m-instruct')" in message


def test_unreachable_hub_fails_at_once_naming_the_fix(online, monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    start = time.monotonic()
    with pytest.raises(ModelNotFoundError, match="cannot be reached") as info:
        resolve_model_name("openai-community/gpt2")
    assert time.monotonic() - start < FAST_S
    assert "smollm2-135m-instruct" in str(info.value)


def test_cached_hub_id_needs_no_hub(online, monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    repo = "acme/tiny"
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = Path(constants.HF_HUB_CACHE) / "models--acme--tiny"
    (root / "snapshots" / commit).mkdir(parents=True)
    (root / "snapshots" / commit / "config.json").write_text("{}")
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    assert resolve_model_name(repo) == repo


def _cache(repo, files):
    """Put ``files`` ({name: path of the content}) in the Hugging Face cache as ``repo``."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = Path(constants.HF_HUB_CACHE) / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, source in files.items():
        (snapshot / name).write_bytes(Path(source).read_bytes())
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)


def test_cached_tokenizer_only_repository_needs_no_hub(online, monkeypatch):
    """A repository without config.json (only a tokenizer) is cached all the same."""
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    tokenizer = assets.tokenizer_dir("gpt2-npm")
    _cache(
        "acme/tokenizer-only",
        {f: tokenizer / f for f in ("tokenizer.json", "tokenizer_config.json")},
    )
    assert resolve_model_name("acme/tokenizer-only") == "acme/tokenizer-only"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model_name("acme/tokenizer-only") == "acme/tokenizer-only"


def test_mock_backend_loads_a_cached_tokenizer_only_repository_offline(tmp_path):
    """As a user runs it: HF_HUB_CACHE and HF_HUB_OFFLINE in the environment, no hub."""
    tokenizer = assets.tokenizer_dir("gpt2-npm")
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = tmp_path / "models--acme--tokenizer-only"
    (root / "snapshots" / commit).mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):  # no config.json
        (root / "snapshots" / commit / name).write_bytes((tokenizer / name).read_bytes())
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    code = (
        "from genlm_core import load_model_by_name\n"
        "lm = load_model_by_name('acme/tokenizer-only', backend='mock')\n"
        "print(len(lm.byte_vocab), lm.byte_vocab[50256].byte_string)\n"
        "lm.cleanup()\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["50257", "b'<|endoftext|>'"]


class _Hub(http.server.BaseHTTPRequestHandler):
    """Answers like the hub's model API: 404 RepoNotFound, except for acme/exists."""

    def do_GET(self):  # noqa: N802 - the handler's API
        found = self.path.startswith("/api/models/acme/exists")
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        if not found:
            self.send_header("X-Error-Code", "RepoNotFound")
        self.end_headers()
        self.wfile.write(b'{"id": "acme/exists"}' if found else b'{"error": "not found"}')

    def log_message(self, *args):
        pass


@pytest.fixture
def local_hub(online, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    yield
    server.shutdown()


def test_unknown_hub_id_says_it_is_not_on_the_hub(local_hub):
    with pytest.raises(ModelNotFoundError, match="is not on the Hugging Face hub"):
        resolve_model_name("acme/no-such-model")


def test_known_hub_id_is_left_to_the_backend(local_hub):
    assert resolve_model_name("acme/exists") == "acme/exists"


def test_mock_backend_resolves_names_too(tmp_path):
    from genlm_core import load_model_by_name

    with pytest.raises(ModelNotFoundError, match="no such directory"):
        load_model_by_name(str(tmp_path / "missing"), backend="mock")
    lm = load_model_by_name("tiny-gpt2", backend="mock")  # an embedded model's tokenizer
    assert len(lm.byte_vocab) == 50257
    lm.cleanup()


@pytest.mark.parametrize(
    ("typo", "meant"), [("smollm2-135m", "smollm2-135m-instruct"), ("tiny-gtp2", "tiny-gpt2")]
)
def test_a_misspelt_embedded_name_gets_did_you_mean_without_the_network(typo, meant, monkeypatch):
    from genlm_core.loading import _model_names

    monkeypatch.setattr(_model_names, "_check_hub", lambda name: pytest.fail("asked the hub"))
    with pytest.raises(ModelNotFoundError, match=f"did you mean {meant!r}"):
        resolve_model_name(typo)


def test_a_hub_id_with_an_owner_is_never_taken_for_a_typo(monkeypatch):
    from genlm_core.loading import _model_names

    asked = []
    monkeypatch.setattr(_model_names, "_check_hub", asked.append)
    assert resolve_model_name("someone/smollm2-135m") == "someone/smollm2-135m"
    assert asked == ["someone/smollm2-135m"]
