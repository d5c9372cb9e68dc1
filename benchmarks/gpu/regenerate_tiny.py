"""Rebuild the tiny test models' weights on a machine that cannot download them.

The device kit (``benchmarks/gpu/prepare.sh``) carries each tiny model's directory
without its ``model.safetensors`` (random weights do not compress, and tiny-llama3's
are 65 MB); this writes them again with the recipe's own function
(``genlm_assets._convert.lm.save_tiny_lm``: a seeded random init over the
model's tokenizer) and keeps the carried marker, so ``genlm_assets`` serves the
directory as built. Another torch version may draw other weights than the CPU build
did: every test run there compares the GPU with the CPU on these same weights.

    python benchmarks/gpu/regenerate_tiny.py "$GENLM_ASSETS_DIR"
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from genlm_assets._convert.lm import save_tiny_lm

TINY = {"tiny-gpt2": ("gpt2", "gpt2-npm"), "tiny-llama3": ("llama", "llama3")}


def main(root: Path) -> None:
    for name, (arch, tokenizer) in TINY.items():
        target = root / "models" / name
        if (target / "model.safetensors").exists() or not target.exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            save_tiny_lm(arch, root / "tok" / tokenizer, Path(tmp))
            shutil.move(str(Path(tmp) / "model.safetensors"), target / "model.safetensors")
        print(f"regenerated {target / 'model.safetensors'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
