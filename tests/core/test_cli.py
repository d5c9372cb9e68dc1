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
