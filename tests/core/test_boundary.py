"""The core's boundary: genlm_core never imports genlm_assets (its plugin), only the reverse.

genlm_assets ships in the same distribution but is found like any third-party plugin,
through its entry point; only the test kit (``genlm_core.testing``) may use it.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import genlm_core

CORE = Path(genlm_core.__file__).parent
#: Every module of the core, run as a script, with genlm_assets unimportable.
IMPORT_ALL = """
import importlib, pkgutil, sys

attempts = []

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "genlm_assets":
            attempts.append(name)
            raise ModuleNotFoundError(f"blocked: {name}", name=name)
        return None

sys.meta_path.insert(0, Block())
import genlm_core

names = [
    m.name
    for m in pkgutil.walk_packages(genlm_core.__path__, "genlm_core.")
    # genlm_core.bytes: the alias of genlm-bytelm, another distribution
    if not m.name.startswith(("genlm_core.testing", "genlm_core.bytes"))
    and m.name != "genlm_core.__main__"
]
for name in names:
    importlib.import_module(name)
print(len(names), attempts, sorted(m for m in sys.modules if m.startswith("genlm_assets")))
"""


def core_sources():
    return [p for p in CORE.rglob("*.py") if "testing" not in p.relative_to(CORE).parts]


def test_every_core_module_imports_with_genlm_assets_blocked():
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    count, rest = proc.stdout.strip().split(" ", 1)
    assert int(count) > 50  # every module, not an empty walk
    assert rest == "[] []"


def test_no_core_source_names_genlm_assets_in_an_import():
    sources = core_sources()
    assert len(sources) > 50
    offenders = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if any(n.split(".")[0] == "genlm_assets" for n in names):
                offenders.append(f"{path.relative_to(CORE)}:{node.lineno}")
    assert offenders == []


def test_with_the_assets_plugin_disabled_names_say_how_to_get_it_back():
    code = (
        "from genlm_core.loading import embedded_model, resolve_model_name\n"
        "print(embedded_model('smollm2-135m-instruct'))\n"
        "resolve_model_name('smollm2-135m-instruct')\n"
    )
    env = {**os.environ, "GENLM_PLUGINS": "", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 1 and proc.stdout == "None\n", proc.stderr
    assert proc.stderr.rstrip().endswith(
        "enable a plugin that names models (genlm-core's embedded models come from its "
        "'assets' plugin: check GENLM_PLUGINS and GENLM_DISABLE_PLUGINS)"
    ), proc.stderr
