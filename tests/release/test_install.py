"""The built wheels installed as a user would from an index: ``pip install genlm-core genlm-X``.

Run by ``nox -s build`` after building ``dist/``. For each stack, a fresh venv gets
``torch==2.13.0`` first (as the README's install section does), then genlm-core with
the ``assets`` extra (the README's snippet loads the embedded model, which that extra
builds) and one backend, from ``dist/`` (``--find-links``; their other requirements
from the package index), with its engine installed as the plugin's recipe says for
this machine. Then ``genlm backends`` and the README's snippet run in it, the model
built from a fresh asset cache, so the wheel's asset builder is what runs.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from built_dists import DIST, by_name, host, recipe
from fresh_venv import bash, create_venv, readme_block, run_python

#: What a user installs beside genlm-core, per stack: the backend's distribution.
STACKS = ("hf", "vllm")
TORCH = "torch==2.13.0"


def engine_steps(backend: str) -> tuple[str, list[str], list[str]]:
    """The plugin's recipe for this machine: requirement, then pip install / uninstall args."""
    found = recipe(backend)
    extra, note = found.engine_extra(**host())
    project = by_name(found.distribution)
    requirement = f"{project.name}[{extra}]" if extra else project.name
    requirement += f"=={project.version}"
    after, remove = list(found.after_extra(extra)), list(found.remove_after_extra(extra))
    if extra is None and note:
        pytest.skip(f"genlm-{backend}'s engine cannot run here: {note}")
    return requirement, after, remove


@pytest.fixture(scope="session")
def assets(tmp_path_factory) -> Path:
    """An empty asset cache, shared by the stacks: the first builds the model into it."""
    return tmp_path_factory.mktemp("assets")


@pytest.fixture(scope="module", params=STACKS)
def stack(request, tmp_path_factory) -> tuple[str, Path, list[str]]:
    """(backend, venv, distributions removed after the engine) with the stack installed."""
    backend = request.param
    requirement, after, remove = engine_steps(backend)
    core = by_name("genlm-core")
    venv = create_venv(tmp_path_factory.mktemp(f"release-{backend}") / "venv")
    script = [
        f"pip install {TORCH}",
        f"pip install --find-links {shlex.quote(str(DIST))} "
        f"{shlex.quote(f'{core.name}[assets]=={core.version}')} {shlex.quote(requirement)}",
    ]
    if after:
        script.append("pip install " + shlex.join(after))
    if remove:
        script.append("pip uninstall -y " + shlex.join(remove))
    done = bash("\n".join(script), venv, timeout=2400)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return backend, venv, remove


def venv_python(venv: Path, code: str) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, cwd=venv
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_packages_come_from_the_wheels_on_the_cpu_torch(stack):
    backend, venv, _ = stack
    code = (
        "import importlib.metadata as m, sysconfig, genlm_assets, genlm_core, torch\n"
        f"import genlm_{backend} as plugin\n"
        "print(sysconfig.get_paths()['purelib'], genlm_core.__file__, plugin.__file__,"
        " genlm_assets.__file__)\n"
        f"print(torch.__version__, m.version('genlm-core'), m.version('genlm-{backend}'))\n"
        "print(m.distribution('genlm-core').read_text('direct_url.json'))\n"
    )
    paths, versions, direct_url = venv_python(venv, code).splitlines()
    site, *files = (Path(p) for p in paths.split())
    assert all(f.is_relative_to(site) for f in files)  # genlm_core, the plugin, genlm_assets
    core, plugin = by_name("genlm-core"), by_name(f"genlm-{backend}")
    # The CPU torch the README installs first is kept; the versions are the built ones.
    assert versions == f"2.13.0+cpu {core.version} {plugin.version}"
    assert direct_url == "None"  # from an index or --find-links, not a path or a checkout


#: ``pip check``'s line for a requirement that is not installed.
MISSING = re.compile(r"^\S+ \S+ requires (\S+), which is not installed\.$")


def test_requirements_are_consistent_but_for_what_the_recipe_removed(stack):
    _, venv, removed = stack
    done = subprocess.run([str(venv / "bin" / "pip"), "check"], capture_output=True, text=True)
    lines = done.stdout.splitlines()
    if not removed:
        assert (done.returncode, lines) == (0, ["No broken requirements found."]), done.stdout
        return
    missing = [MISSING.match(line) for line in lines]
    assert all(missing), done.stdout  # nothing but missing requirements
    assert {m.group(1) for m in missing} <= set(removed), done.stdout


def test_genlm_backends_lists_the_backend_as_the_automatic_choice(stack):
    backend, venv, _ = stack
    done = bash("genlm backends", venv, timeout=600, cwd=venv)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines if line.startswith(f"  {backend} ")] == [
        [backend, "available"]
    ]
    assert f"Automatic choice here: {backend} (" in done.stdout
    # The backend brings genlm-trie-numba (its dependency): the fast trie, no further step.
    tries = [line.split()[:2] for line in lines if line.startswith(("  numba ", "  numba-byte "))]
    assert tries == [["numba", "available"], ["numba-byte", "available"]], done.stdout


#: A line of vLLM's own log, which its logging handler writes to standard output:
#: ``(EngineCore pid=8149) INFO 11-24 09:44:54 [core.py:133] ...``.
ENGINE_LOG = re.compile(r"^\([\w-]+ pid=\d+\) (DEBUG|INFO|WARNING) ")


def test_the_readme_snippet_prints_paris(stack, assets, tmp_path):
    backend, venv, _ = stack
    done = run_python(readme_block("snippet"), venv, tmp_path, GENLM_ASSETS_DIR=str(assets))
    assert done.returncode == 0, done.stderr[-5000:]
    lines = done.stdout.splitlines(keepends=True)
    if backend == "vllm":  # the snippet's own output, without the engine's log lines
        lines = [line for line in lines if not ENGINE_LOG.match(line)]
    assert "".join(lines) == " Paris\n", done.stdout[-5000:]
