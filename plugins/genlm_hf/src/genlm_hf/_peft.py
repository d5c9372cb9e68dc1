"""LoRA adapters on a transformers model, through peft's own functional API.

transformers' adapter methods (``model.load_adapter``, ``set_adapter``, ...) refuse to
run unless peft is at least the version that transformers release names: transformers
5.24 asks for peft 0.22, which was not released when 5.24 came out, so with both at
their newest every adapter call raised ``ValueError``. ``peft.functional`` is the API
peft publishes for integrations like this one (it exists from peft 0.19, our floor);
it applies transformers 5's weight conversions itself (``set_peft_model_state_dict``),
so adapters trained on transformers 4 layouts still load. Calling it directly makes
genlm-hf's adapters depend on peft alone.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["activate", "attach", "detach"]

_WRAPPER_PREFIX = "base_model.model."


def attach(model: Any, path: str, name: str) -> None:
    """Inject the adapter saved at ``path`` into ``model`` as ``name``, for inference.

    Raises:
        ValueError: The adapter's weights do not fit ``model`` (its keys name modules the
            model lacks, or are missing); the model is left as it was.
        OSError: ``path`` holds no adapter config or weights.
    """
    from peft import PeftConfig
    from peft.functional import inject_adapter_in_model, set_peft_model_state_dict
    from peft.utils import load_peft_weights

    config = PeftConfig.from_pretrained(path)
    config.inference_mode = True
    device = model.get_input_embeddings().weight.device
    saved = load_peft_weights(path, device=str(device))
    # PeftModel.save_pretrained names keys from its wrapper ("base_model.model."); the
    # model here is the bare one (peft 0.21 strips this itself, 0.19 does not).
    weights = {k.removeprefix(_WRAPPER_PREFIX): v for k, v in saved.items()}
    try:
        with warnings.catch_warnings():
            # A second adapter on the same model is what this integration is for.
            warnings.filterwarnings("ignore", message="Already found a `peft_config` attribute")
            inject_adapter_in_model(config, model, adapter_name=name)
        result = set_peft_model_state_dict(model, weights, adapter_name=name)
        unexpected = list(result.unexpected_keys)
        missing = [k for k in result.missing_keys if f".{name}." in k]
        if unexpected or missing:
            raise ValueError(
                f"the adapter's weights do not fit this model: {len(unexpected)} unexpected "
                f"keys (first: {unexpected[:2]}), {len(missing)} missing (first: {missing[:2]})"
            )
    except BaseException:
        detach(model, name)
        raise


def detach(model: Any, name: str) -> None:
    """Remove adapter ``name``'s layers and config from ``model``."""
    from peft.functional import delete_adapter

    configs = getattr(model, "peft_config", {})
    config = configs.get(name)
    if config is None:
        return
    delete_adapter(model, adapter_name=name, prefix=f"{config.peft_type.value.lower()}_")
    configs.pop(name, None)
    if not configs:
        del model.peft_config


def activate(model: Any, name: str | None) -> None:
    """Make ``name`` the one adapter in the forward (None: the base model alone).

    Adapters are frozen: peft's ``set_adapter`` with ``inference_mode`` (forwards run
    under ``no_grad`` anyway).
    """
    from peft.functional import set_adapter
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils import ModulesToSaveWrapper

    if name is not None:
        set_adapter(model, name, inference_mode=True)
    for module in model.modules():
        if isinstance(module, (BaseTunerLayer, ModulesToSaveWrapper)):
            module.enable_adapters(name is not None)
