"""The Triton kernel of the pool attention equals the reference kernel (issue 42).

Without a GPU it runs in Triton's interpreter, in a child process (``TRITON_INTERPRET``
must be set before Triton is imported), on torch's CPU tensors; and it is compiled for
a Hopper GPU (sm_90, down to its cubin) to catch what the interpreter does not check
(types, loop-carried values). The cuda-marked tests run it natively. Tolerances
(tests/shared/pool_kernels.py): float32 a few ulps (another summation order);
bfloat16 two ulps of the largest output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pool_kernels import CASES, DTYPES, case_id, compare
from session_requires import require

require("genlm_hf.lm", reason="genlm-hf is not installed")
require("triton", reason="Triton is not installed (CUDA builds of torch ship it)")

SHARED = Path(__file__).parents[1] / "shared"


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str]:
    """Every case through the interpreter, in one child process: ``{case: error or ""}``."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SHARED), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(SHARED / "pool_kernels.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=str)
def test_interpreted_kernel_equals_the_reference(
    case: tuple, dtype: str, interpreted: dict[str, str]
) -> None:
    assert interpreted[case_id(case, dtype)] == ""


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("branches", [(False, False), (True, True)], ids=["plain", "window+cap"])
def test_kernel_compiles_for_hopper(dtype: str, branches: tuple[bool, bool]) -> None:
    """Down to sm_90 machine code, no GPU needed: the types the interpreter lets pass."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from genlm_hf._triton_attention import _pool_attention_kernel as kernel

    constants = {
        "GROUPS": 4,
        "HEAD_DIM": 128,
        "BLOCK_D": 128,
        "BLOCK_L": 32,
        "HAS_SOFTCAP": branches[0],
        "HAS_WINDOW": branches[1],
    }
    signature = {}
    for name in kernel.arg_names:
        if name in ("q_ptr", "k_ptr", "v_ptr", "o_ptr"):
            signature[name] = f"*{dtype}"
        elif name in ("slots_ptr", "lens_ptr", "pos_ptr"):
            signature[name] = "*i64"
        elif name in constants:
            signature[name] = "constexpr"
        else:
            signature[name] = "fp32" if name in ("scaling", "softcap") else "i32"
    where = {(kernel.arg_names.index(k),): v for k, v in constants.items()}
    compiled = triton.compile(
        ASTSource(fn=kernel, signature=signature, constexprs=where),
        target=GPUTarget("cuda", 90, 32),
    )
    assert compiled.asm["cubin"]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=str)
def test_kernel_equals_the_reference_on_cuda(case: tuple, dtype: str) -> None:
    from genlm_hf._triton_attention import triton_attention

    compare(triton_attention, "cuda", DTYPES[dtype], case)
