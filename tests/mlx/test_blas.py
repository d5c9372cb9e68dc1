"""The fast BLAS put under mlx-cpu on Linux (genlm_mlx._blas), checked in fresh processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from session_requires import require

require("mlx_lm", reason="mlx and mlx-lm are not installed (nox -s mlx installs them)")
if not sys.platform.startswith("linux"):
    pytest.skip("the BLAS swap concerns mlx's Linux CPU build only", allow_module_level=True)

from genlm_mlx._plugin import fast_blas_installed  # noqa: E402


def status(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    )
    return result.stdout.strip().splitlines()[-1]


def test_loaded_before_mlx_and_used():
    if not fast_blas_installed():
        pytest.skip("the mkl wheel is not installed: pip install 'genlm-mlx[mkl]'")
    code = (
        "import genlm_mlx.lm as m, mlx.core as mx, numpy as np\n"
        "a = mx.random.normal((64, 64)); b = mx.random.normal((64, 64))\n"
        "err = np.abs(np.array(a @ b) - np.array(a) @ np.array(b)).max()\n"
        "assert err < 1e-3, err\n"
        "print(m.blas_status())\n"
    )
    assert status(code, GENLM_MLX_BLAS="").startswith("loaded ")


def test_can_be_switched_off():
    assert status(
        "import genlm_mlx.lm as m; print(m.blas_status())", GENLM_MLX_BLAS="off"
    ).startswith("off (GENLM_MLX_BLAS=off)")


def test_too_late_after_mlx_is_imported_says_so():
    out = status("import mlx.core, genlm_mlx.lm as m; print(m.blas_status())", GENLM_MLX_BLAS="")
    assert out.startswith("mlx.core was imported before genlm_mlx")
    assert "LD_PRELOAD" in out


def test_a_bad_path_is_reported():
    out = status(
        "import genlm_mlx.lm as m; print(m.blas_status())", GENLM_MLX_BLAS="/nonexistent/libblas.so"
    )
    assert "does not exist; mlx keeps its bundled BLAS" in out


def test_this_test_run_uses_it():
    """tests/mlx/conftest.py imports genlm_mlx.lm before any test module imports mlx."""
    from genlm_mlx._blas import BLAS_ENV, blas_status

    if not fast_blas_installed() or os.environ.get(BLAS_ENV):
        pytest.skip(f"no fast BLAS to use here ({BLAS_ENV}={os.environ.get(BLAS_ENV)!r})")
    assert blas_status().startswith("loaded "), blas_status()
