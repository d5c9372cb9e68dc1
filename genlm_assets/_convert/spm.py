"""SentencePiece models to Hugging Face fast tokenizers (needs sentencepiece + protobuf)."""

from __future__ import annotations

import sys
from pathlib import Path

from genlm_assets._convert.hfdir import save_tokenizer

__all__ = ["save_llama_spm", "save_unigram_spm"]


def save_llama_spm(directory: Path) -> None:
    """Save ``directory/tokenizer.model`` (Llama/Mistral SentencePiece BPE) as a fast tokenizer.

    Written to the same dir; encodings start with ``<s>``.

    ``LlamaTokenizer(vocab_file=...)`` silently builds a near-empty tokenizer in
    transformers 5, so the model is loaded with ``from_pretrained`` on its dir.
    """
    import transformers

    if transformers.__version__.startswith("4."):
        tokenizer = transformers.LlamaTokenizerFast(
            vocab_file=str(directory / "tokenizer.model"), legacy=False
        )
    else:
        tokenizer = transformers.LlamaTokenizer.from_pretrained(
            str(directory), legacy=False, add_bos_token=True
        )
    save_tokenizer(tokenizer, directory)


def save_unigram_spm(model_file: Path, directory: Path) -> None:
    """Convert a SentencePiece unigram model to a fast tokenizer saved in ``directory``.

    ``T5Tokenizer`` is avoided: transformers 5 assumes T5's pad/eos/unk ids and gives
    wrong ids for other unigram models.
    """
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers.implementations import SentencePieceUnigramTokenizer
    from transformers import PreTrainedTokenizerFast

    # tokenizers' from_spm imports the protobuf module by its top-level name.
    alias = "sentencepiece_model_pb2"
    added = alias not in sys.modules
    if added:
        sys.modules[alias] = sentencepiece_model_pb2
    try:
        unigram = SentencePieceUnigramTokenizer.from_spm(str(model_file))
    finally:
        if added:
            del sys.modules[alias]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=unigram,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        clean_up_tokenization_spaces=False,
    )
    save_tokenizer(tokenizer, directory)
