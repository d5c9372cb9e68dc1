"""llamppl 0.2.3, a genlm-backend client, with its imports renamed to genlm-core's.

Migrating is an import rename: ``genlm.backend`` -> ``genlm_core``. This copies the
installed llamppl (``pip install --no-deps llamppl==0.2.3``: it imports only numpy,
torch and genlm.backend) into a folder with that one rename, and runs code against it
in a subprocess where genlm-backend and MLX cannot be imported, so whatever works there
works on a machine that has only genlm-core (and the plugins the caller lets through).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from session_requires import require

__all__ = ["run_with_renamed_llamppl"]

#: Hidden in the subprocess: the library renamed away, and the backends a CPU machine
#: without MLX (nor vLLM, nor SGLang) lacks; genlm-hf stays where it is installed.
HIDDEN = (
    "genlm.backend",
    "mlx",
    "mlx_lm",
    "genlm_mlx",
    "vllm",
    "genlm_vllm",
    "sglang",
    "genlm_sgl",
)


def _renamed_copy(folder: Path) -> Path:
    require("llamppl", reason="llamppl is not installed (pip install --no-deps llamppl==0.2.3)")
    spec = importlib.util.find_spec("llamppl")
    source = Path(next(iter(spec.submodule_search_locations)))
    target = folder / "llamppl"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    renamed = 0
    for path in target.rglob("*.py"):
        text = path.read_text()
        if "genlm.backend" in text:
            path.write_text(text.replace("genlm.backend", "genlm_core"))
            renamed += 1
    assert renamed, "llamppl no longer imports genlm.backend: nothing was renamed"
    return folder


def run_with_renamed_llamppl(code: str, folder: Path) -> str:
    """Run ``code`` where ``import llamppl`` is the renamed copy; return its stdout."""
    root = _renamed_copy(folder)
    hide = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in HIDDEN)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", hide + code], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
