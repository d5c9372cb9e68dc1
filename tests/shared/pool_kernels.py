"""Pool-attention kernels against the reference, shared by the tests and their child process.

``python tests/shared/pool_kernels.py`` (with ``TRITON_INTERPRET=1`` set before Triton is
imported, as the interpreter needs) compares the Triton kernel with the reference on
the CPU for every case and prints one JSON line: ``{case id: error or ""}``.
"""

from __future__ import annotations

import json
from typing import Any

import torch

#: (query heads, key heads, head_dim, sliding window, score cap): grouped heads, a
#: head_dim that is not a power of two, Gemma-2's window and capping, one key head.
CASES = [(4, 2, 16, None, None), (4, 2, 16, 5, 0.7), (4, 4, 12, None, None), (8, 1, 64, 40, None)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def case_id(case: tuple, dtype: str) -> str:
    return f"{dtype}-" + "-".join(str(v) for v in case)


def compare(kernel: Any, device: str, dtype: torch.dtype, case: tuple) -> None:
    """Assert ``kernel`` computes what `reference_attention` does on three padded rows."""
    from genlm_hf._pool_attention import pool_batch, reference_attention

    heads, kv_heads, dim, window, cap = case
    torch.manual_seed(0)
    pool_k = torch.randn(kv_heads, 300, dim).to(device=device, dtype=dtype)
    pool_v = torch.randn(kv_heads, 300, dim).to(device=device, dtype=dtype)
    # rows: a past in two runs, none, a long one; 2, 1 and 3 new positions, padded to 4
    batch = pool_batch(
        [[(10, 3), (50, 40)], [], [(100, 70)]],
        [[(200, 2)], [(210, 1)], [(220, 3)]],
        dummy=0,
        device=device,
        new_width=4,
        kv_width=80,
    )
    query = torch.randn(3, heads, 4, dim).to(device=device, dtype=dtype)
    got = kernel(query, pool_k, pool_v, batch, dim**-0.5, window, cap)
    want = reference_attention(query, pool_k, pool_v, batch, dim**-0.5, window, cap)
    assert got.shape == want.shape == (3, 4, heads, dim)
    for i, n in enumerate([2, 1, 3]):  # (padding queries' outputs are ignored)
        real, expected = got[i, :n].float(), want[i, :n].float()
        if dtype == torch.float32:
            atol = 2e-6
        else:  # two bfloat16 ulps of the largest output: each kernel rounds once
            atol = 2 * torch.finfo(torch.bfloat16).eps * max(1.0, expected.abs().max().item())
        torch.testing.assert_close(real, expected, atol=atol, rtol=0)


def main() -> None:
    from genlm_hf._triton_attention import triton_attention

    results = {}
    for name, dtype in DTYPES.items():
        for case in CASES:
            try:
                compare(triton_attention, "cpu", dtype, case)
                results[case_id(case, name)] = ""
            except Exception as exc:  # noqa: BLE001 - reported to the parent test
                results[case_id(case, name)] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(results))


if __name__ == "__main__":
    main()
