"""resolve_model_name: local dirs, embedded models, and hub ids that fail fast with the fix.

Nothing here reaches a real hub: an unreachable one is a closed local port, and a hub
that answers is a local HTTP server.
"""

import http.server
import threading
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

from genlm_core import assets
from genlm_core.errors import InvalidArgumentError, ModelNotFoundError
from genlm_core.model_names import resolve_model_name

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
