import json
import os
import subprocess
import sys


def run_cli(*args, env=None):
    proc = subprocess.run(
        [sys.executable, "-m", "genlm_core", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_backends_json_lists_builtins_with_truthful_availability():
    report = json.loads(run_cli("backends", "--json"))
    by_name = {b["name"]: b for b in report["backends"]}
    mock = by_name["mock"]
    assert mock["distribution"] == "genlm-core" and mock["available"] and not mock["auto"]
    for entry in report["backends"]:
        assert set(entry) >= {"name", "distribution", "version", "priority", "available", "reason"}
        assert entry["available"] or entry["reason"], entry  # unavailable always says why
    assert report["tries"], "the built-in trie implementations are listed"
    assert all(t["kind"] in ("character", "byte") for t in report["tries"])


def test_backends_text_output():
    out = run_cli("backends")
    assert "Backends:" in out and "mock" in out and "Tries:" in out


def test_doctor_reports_versions():
    report = json.loads(run_cli("doctor", "--json"))
    assert report["versions"]["torch"] and report["versions"]["genlm-core"]
    assert "backends" in report


def test_no_plugins_keeps_builtins():
    report = json.loads(run_cli("backends", "--json", env={"GENLM_PLUGINS": ""}))
    names = {b["name"] for b in report["backends"]}
    assert names == {"mock"}


def test_help_is_plain_text():
    out = run_cli("--help")
    assert "genlm backends" in out and "genlm fetch NAME" in out
    assert "``" not in out  # no reST markup


def test_reader_going_away_is_not_a_traceback():
    # `genlm backends | head`: the reader closes the pipe before genlm writes.
    proc = subprocess.Popen(
        [sys.executable, "-m", "genlm_core", "backends"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_backends_lists_official_backends_not_installed_with_their_command():
    from genlm_core.plugins.official import install_command

    report = json.loads(run_cli("backends", "--json"))
    # The core session installs no plugin: every official backend is missing.
    missing = {m["name"]: m for m in report["not_installed"]}
    assert set(missing) >= {"vllm", "sgl", "mlx", "hf"} - {b["name"] for b in report["backends"]}
    for name, m in missing.items():
        if m["state"] == "not installed":
            assert m["detail"] == install_command(name)
    text = run_cli("backends")
    assert "Official backends not installed or not loaded:" in text
    assert all(
        install_command(n) in text for n, m in missing.items() if m["state"] == "not installed"
    )


def test_backends_says_which_backend_is_chosen_automatically():
    report = json.loads(run_cli("backends", "--json", env={"GENLM_PLUGINS": ""}))
    assert report["automatic"] is None  # mock is never automatic
    assert "Automatic choice here: none" in run_cli("backends", env={"GENLM_PLUGINS": ""})
    out = run_cli("backends", env={"GENLM_PLUGINS": "", "GENLM_BACKEND": "mock"})
    assert "Used when none is named: mock (set by GENLM_BACKEND)" in out


def test_models_lists_the_embedded_models_and_how_to_use_them():
    from genlm_core import assets

    out = run_cli("models")
    for name in assets.MODEL_NAMES:
        assert name in out
    assert "genlm fetch smollm2-135m-instruct" in out
    assert "load_model_by_name('smollm2-135m-instruct')" in out
    assert "Tokenizers:" not in out and "\n  cl100k " in run_cli("models", "--all")


def test_fetch_prints_the_directory_of_a_cached_model():
    from genlm_core import assets

    out = run_cli("fetch", "tiny-gpt2")
    assert out.split() == ["tiny-gpt2", str(assets.model_dir("tiny-gpt2"))]
    assert run_cli("path", "tiny-gpt2").strip() == str(assets.model_dir("tiny-gpt2"))


def test_fetch_unknown_name_suggests_one():
    proc = subprocess.run(
        [sys.executable, "-m", "genlm_core", "fetch", "smollm2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "did you mean 'smollm2-135m-instruct'" in proc.stderr
