"""Stand-in for torchvision (test environment only; see ``_absent``)."""

import sys

from _absent import install

install(
    sys.modules[__name__],
    "PyPI's torchvision does not load beside torch 2.13.0+cpu "
    '("operator torchvision::nms does not exist"); SGLang imports it only for '
    "vision-model preprocessing, which text models never run",
)
