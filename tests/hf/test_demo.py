"""examples/demo.py with its defaults: the embedded model through hf, batching shown."""

import re
import subprocess
import sys
from pathlib import Path

from session_requires import require

require("genlm_hf.lm", reason="genlm-hf is not installed")

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def test_demo_on_the_default_model_fetches_once_and_shows_batches(asset_model_dir):
    asset_model_dir("smollm2-135m-instruct")  # cached, as after a first run
    done = subprocess.run(
        [sys.executable, str(DEMO), "--particles", "4", "--max-tokens", "3"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "with backend 'hf'" in done.stdout
    assert "Fetching" not in done.stdout  # "(first run only)" means it
    batched = re.search(r"Batched: (\d+) distinct requests in (\d+) batches", done.stdout)
    assert batched and int(batched[2]) < int(batched[1]), done.stdout
