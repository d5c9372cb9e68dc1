"""Build steps behind [`genlm_assets`][].

Registry clients, archive readers, and converters from the files found in registry
packages to Hugging Face dirs.

Private: the public entry points are ``tokenizer_dir`` and ``model_dir`` in
[`genlm_assets`][]. Heavy imports (tokenizers, transformers, torch)
happen inside the functions that need them.
"""
