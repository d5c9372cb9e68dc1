"""Stand-in for sgl_kernel (test environment only; see ``_absent``)."""

import sys

from _absent import install

install(
    sys.modules[__name__],
    "PyPI's sgl-kernel wheels are CUDA builds (\"libnvrtc.so.13: cannot open shared "
    'object file" here); SGLang imports its CPU kernels by name, but with '
    "SGLANG_USE_CPU_ENGINE=1 on a CPU without AMX it runs torch-native code instead",
)
