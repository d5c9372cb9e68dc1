"""examples/demo.py (what ``nox -s demo`` runs) on the mock backend: it shows the batching."""

import re
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def test_demo_prints_particles_and_how_calls_were_batched():
    done = subprocess.run(
        [sys.executable, str(DEMO), "--backend", "mock", "--model", "bytes", "--particles", "6"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    calls = int(re.search(r"6 particles, (\d+) log-prob calls", done.stdout).group(1))
    batched = re.search(
        r"Batched: (\d+) distinct requests in (\d+) batches, mean batch size ([\d.]+)", done.stdout
    )
    assert batched, done.stdout
    requests, batches, mean = int(batched[1]), int(batched[2]), float(batched[3])
    assert requests <= calls and batches < requests  # concurrent calls were coalesced
    assert mean == round(requests / batches, 1)
    assert len(re.findall(r"\(probability: [\d.]+\)", done.stdout)) == 6
    assert "Fetching" not in done.stdout  # the mock needs no model
