"""Each contender runs with the caller thread it would have in a program of its own.

genlm-hf's ``AsyncTransformer`` leaves the cores to its worker thread: the thread that
builds one with a multi-threaded worker on a CPU gets one torch thread and no idle
OpenMP threads (``caller_threads``, `genlm_hf.leave_cores_to_worker`); its forwards
are 25-35% faster for it. genlm-backend 0.3.1 runs its forwards in that same thread,
with torch's default threads. In one process the setting one library made would
carry over to the other, so every timed run starts from the thread its own program
would have: :func:`as_alone` before each.
"""

from __future__ import annotations

from typing import Any

import torch

#: Torch threads of this thread before any model was built.
TORCH_DEFAULT = torch.get_num_threads()


def as_alone(lm: Any) -> None:
    """Set this thread's torch threads as a program using only ``lm`` would have them."""
    torch.set_num_threads(TORCH_DEFAULT)
    if getattr(lm, "_batch_only_threads", None) is not None:  # genlm-hf, multi-threaded worker
        from genlm_hf import leave_cores_to_worker

        leave_cores_to_worker()
