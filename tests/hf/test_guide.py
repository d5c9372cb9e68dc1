"""docs/guide.md runs as written: its Python blocks, in order, in one namespace.

The guide's one stand-in, ``path/to/my-adapter``, becomes a LoRA adapter made here
for SmolLM2 with peft (random non-zero weights, so it changes the outputs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from session_requires import require

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def smollm2_adapter(model_dir: str, out_dir: Path) -> str:
    import peft
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    adapted = peft.get_peft_model(model, config)
    with torch.no_grad():
        for name, param in adapted.named_parameters():
            if "lora_B" in name:
                param.mul_(20.0)
    adapted.save_pretrained(str(out_dir))
    return str(out_dir)


def test_every_example_of_the_guide_runs(asset_model_dir, tmp_path, capsys):
    require("peft", reason="the guide's LoRA example needs peft (genlm-hf's [peft] extra)")
    blocks = BLOCK.findall(GUIDE.read_text())
    assert len(blocks) >= 9, "the guide lost examples"
    adapter = smollm2_adapter(asset_model_dir("smollm2-135m-instruct"), tmp_path / "adapter")
    namespace: dict = {"__name__": "guide"}
    for index, code in enumerate(blocks):
        code = code.replace('"path/to/my-adapter"', repr(adapter))
        try:
            exec(compile(code, f"{GUIDE.name} block {index + 1}", "exec"), namespace)
        except Exception as error:  # noqa: BLE001 - say which block
            pytest.fail(f"docs/guide.md, Python block {index + 1}:\n{code}\n{error!r}")
    printed = capsys.readouterr().out
    assert "b' Paris'" in printed  # the comment the guide shows next to that print
