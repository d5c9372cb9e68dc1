"""The machine line benchmarks print: the CPU, and the linear-layer rule genlm-hf applies.

Ratios against genlm-backend depend on both: on Intel CPUs torch's BLAS (MKL) is tuned
and the reference's forwards are faster than on the AMD CPU earlier figures came from.
"""

from __future__ import annotations

import os
import platform


def cpu_line() -> str:
    """``CPU <model name>, <n> cores; genlm-hf linear layers: <rule>``."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            named = (line for line in info if line.startswith("model name"))
            name = next((line.split(":", 1)[1].strip() for line in named), name)
    except OSError:
        pass
    try:
        from genlm_hf._linear import mkl_is_tuned_here
    except ImportError:
        return f"CPU {name}, {os.cpu_count()} cores"
    rule = (
        "MKL, oneDNN for 4-12-row vocabulary projections only (an Intel CPU)"
        if mkl_is_tuned_here()
        else "oneDNN where it measured faster than MKL (a non-Intel CPU)"
    )
    return f"CPU {name}, {os.cpu_count()} cores; genlm-hf linear layers: {rule}"
