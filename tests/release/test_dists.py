"""What each wheel and sdist in ``dist/`` holds: its package and its metadata, nothing else.

Run by ``nox -s build`` after ``python -m build`` (each wheel is built from its sdist,
so a wheel that passes here is what the sdist builds) and ``twine check --strict``.
"""

from __future__ import annotations

import email.parser
import tarfile
import zipfile

import pytest
from built_dists import BACKENDS, PROJECTS, Project, by_name
from fresh_venv import ROOT
from packaging.requirements import Requirement

#: What a wheel's ``.dist-info`` holds.
DIST_INFO = {"METADATA", "WHEEL", "RECORD", "entry_points.txt", "licenses/LICENSE"}
#: What an sdist holds besides the package. ``.gitignore`` is hatchling's: it puts the
#: ignore file it selected files by into the sdist, so that the wheel built from the
#: sdist selects the same files.
SDIST_EXTRAS = {"PKG-INFO", "pyproject.toml", "README.md", "LICENSE", ".gitignore"}
#: Entry points, written out: the plugins' ``genlm.backends`` names are the backend names.
ENTRY_POINTS = {
    "genlm-core": "[console_scripts]\ngenlm = genlm_core.cli:main\n\n"
    "[genlm.plugins]\nassets = genlm_assets._plugin\n",
    "genlm-hf": "[genlm.backends]\nhf = genlm_hf._plugin\n",
    "genlm-vllm": "[genlm.backends]\nvllm = genlm_vllm._plugin\n",
    "genlm-mlx": "[genlm.backends]\nmlx = genlm_mlx._plugin\n",
    "genlm-sgl": "[genlm.backends]\nsgl = genlm_sgl._plugin\n",
    "genlm-bytelm": None,  # a library on the core, found by import: no entry point
    # The trie plugins: their ``genlm.tries`` entry points register the tries.
    "genlm-trie-numba": "[genlm.tries]\nnumba = genlm_trie_numba._plugin\n",
    "genlm-trie-torch": "[genlm.tries]\ntorch-cuda = genlm_trie_torch._plugin\n",
    "genlm-backend-kit": None,  # a library the backends import: no entry point
}

each = pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)


def wheel_files(project: Project) -> dict[str, bytes]:
    with zipfile.ZipFile(project.wheel()) as wheel:
        return {name: wheel.read(name) for name in wheel.namelist() if not name.endswith("/")}


def metadata(project: Project) -> email.message.Message:
    info = f"{project.package}-{project.version}.dist-info"
    return email.parser.BytesParser().parsebytes(wheel_files(project)[f"{info}/METADATA"])


@each
def test_the_wheel_holds_the_package_as_in_the_sources_and_its_dist_info(project):
    files = set(wheel_files(project))
    info = f"{project.package}-{project.version}.dist-info/"
    expected = DIST_INFO if ENTRY_POINTS[project.name] else DIST_INFO - {"entry_points.txt"}
    assert {f.removeprefix(info) for f in files if f.startswith(info)} == expected
    assert {f for f in files if not f.startswith(info)} == project.source_files()


@each
def test_the_package_is_typed_and_has_no_tests_or_stray_files(project):
    info = f"{project.package}-{project.version}.dist-info/"
    package = {f for f in wheel_files(project) if not f.startswith(info)}
    typed = {f"{p}/py.typed" for p in project.packages}
    assert typed <= package
    # Data files genlm-core reads: a plugin's install recipe (install.toml), and the
    # core's table of the official backends.
    if project.folder == ROOT:
        data = {"genlm_core/plugins/official.toml"}
    elif project.name.removeprefix("genlm-") in BACKENDS:
        data = {f"{project.package}/install.toml"}
    else:
        data = set()
    assert {f for f in package if not f.endswith(".py")} == typed | data
    assert not [f for f in package if "/tests/" in f or f.rpartition("/")[2].startswith("test_")]


@each
def test_metadata_has_the_licence_readme_and_python(project):
    meta = metadata(project)
    assert (meta["Name"], meta["Version"]) == (project.name, project.version)
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload() == (project.folder / "README.md").read_text()
    info = f"{project.package}-{project.version}.dist-info"
    assert wheel_files(project)[f"{info}/licenses/LICENSE"] == (ROOT / "LICENSE").read_bytes()


def test_every_plugin_folder_carries_the_same_licence_text():
    """Each plugin's sdist is built from its own folder, so each holds a copy."""
    assert all(
        (p.folder / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes() for p in PROJECTS
    )


@each
def test_entry_points(project):
    info = f"{project.package}-{project.version}.dist-info"
    points = wheel_files(project).get(f"{info}/entry_points.txt")
    assert (points and points.decode()) == ENTRY_POINTS[project.name]


@pytest.mark.parametrize("project", PROJECTS[1:], ids=lambda p: p.name)
def test_each_plugin_accepts_the_core_built_beside_it(project):
    core = by_name("genlm-core")
    wanted = [Requirement(r) for r in metadata(project).get_all("Requires-Dist")]
    [on_core] = [r for r in wanted if r.name == "genlm-core"]
    assert on_core.specifier.contains(core.version), (str(on_core), core.version)


@each
def test_the_sdist_holds_the_package_sources_and_what_builds_them(project):
    top = f"{project.package}-{project.version}/"
    with tarfile.open(project.sdist()) as sdist:
        members = sdist.getmembers()
    assert all(m.name.startswith(top) and (m.isfile() or m.isdir()) for m in members)
    files = {m.name.removeprefix(top) for m in members if m.isfile()}
    under = project.source.parent.relative_to(project.folder)
    sources = {(under / f).as_posix() for f in project.source_files()}
    assert files == SDIST_EXTRAS | sources
