#!/usr/bin/env bash
# Build .gpu/, what a GPU machine without network needs to run benchmarks/gpu/run.sh:
# wheels (genlm-core, its trie plugins, genlm-hf, genlm-bytelm, the reference genlm-backend 0.3.1,
# pytest-asyncio, hypothesis (the ported trie tests), and
# bitsandbytes cut down to its CUDA 13 and CPU libraries), the test tokenizers and tiny
# models (weights left out: run.sh regenerates them), and the trie benchmark's
# vocabularies. Run it here, in a venv with genlm-core[assets] and genlm-hf installed
# (nox -s hf makes one: PYTHON=.nox/hf/bin/python). docs/gpu.md says how it is used.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
rm -rf .gpu/whl .gpu/assets.tar.xz
mkdir -p .gpu/whl
"$PY" -m pip wheel -q --no-deps -w .gpu/whl . plugins/genlm_trie_numba plugins/genlm_trie_torch plugins/genlm_backend_kit plugins/genlm_hf plugins/genlm_bytelm
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64"
"$PY" -m pip download -q --no-deps $PLAT -d .gpu/whl genlm-backend==0.3.1 pytest-asyncio==1.5.0 \
    hypothesis sortedcontainers regex
"$PY" -m pip download -q --no-deps $PLAT -d .gpu/bnb bitsandbytes==0.50.2
"$PY" benchmarks/gpu/slim_wheel.py .gpu/bnb/bitsandbytes-0.50.2-*.whl .gpu/whl \
    --keep libbitsandbytes_cuda130.so libbitsandbytes_cpu.so
rm -rf .gpu/bnb
"$PY" - <<'PYEOF'
from genlm_assets import model_dir, tokenizer_dir
for name in ("gpt2-npm", "llama3"):
    tokenizer_dir(name)
for name in ("tiny-gpt2", "tiny-llama3"):
    model_dir(name)
PYEOF
root=$("$PY" -c "from genlm_assets import assets_root; print(assets_root())")
tar -C "$root" --exclude=model.safetensors -cJf .gpu/assets.tar.xz \
    tok/gpt2-npm tok/llama3 models/tiny-gpt2 models/tiny-llama3
"$PY" benchmarks/gpu/bench_trie_gpu.py --dump-vocabs .gpu/vocabs
du -sh .gpu/* .gpu
