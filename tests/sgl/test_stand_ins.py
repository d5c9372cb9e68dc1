"""The test environment's import stand-ins for CUDA-only modules raise when used.

``nox -s sgl`` puts ``tests/sgl/stand_ins`` on ``PYTHONPATH`` on machines without an
NVIDIA GPU (see the plugin README); nothing that runs may come from them.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
from session_requires import require

STAND_INS = Path(__file__).parent / "stand_ins"

pytestmark = pytest.mark.skipif(
    str(STAND_INS) not in os.environ.get("PYTHONPATH", "").split(os.pathsep),
    reason="the stand-ins are not on PYTHONPATH (only nox -s sgl on a CPU puts them there)",
)


@pytest.mark.parametrize(
    "module, name",
    [
        ("sgl_kernel", "copy_all_layer_kv_cache_cpu"),
        ("torchvision.transforms", "Compose"),
        ("torchvision.transforms.functional", "InterpolationMode"),
    ],
)
def test_names_import_but_raise_when_used(module, name):
    from _absent import StandInCalledError

    mod = importlib.import_module(module)
    assert str(STAND_INS) in (sys.modules[module.split(".")[0]].__file__ or "")
    thing = getattr(mod, name)
    with pytest.raises(StandInCalledError, match=f"{module}.{name} was used"):
        thing()
    with pytest.raises(StandInCalledError):
        thing.attribute(1)
    with pytest.raises(StandInCalledError):
        list(thing)
    with pytest.raises(StandInCalledError):
        bool(thing)


def test_subclassing_a_stand_in_gives_an_unusable_class():
    from _absent import StandInCalledError

    transforms = importlib.import_module("torchvision.transforms")

    class Resize(transforms.Resize):
        pass

    with pytest.raises(StandInCalledError, match="Resize was used"):
        Resize()


def test_sglang_runs_no_stand_in_kernel():
    """With the CPU engine, SGLang probes sgl_kernel and finds no AMX kernels."""
    require("sglang", reason="SGLang is not installed")
    from sglang.srt.utils.common import cpu_has_amx_support

    assert cpu_has_amx_support() is False
