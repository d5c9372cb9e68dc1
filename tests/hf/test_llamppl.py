"""llamppl 0.2.3 on genlm-hf through the import rename: the hf methods it calls work.

llamppl's ``CachedCausalLM`` calls ``reset_async_queries``, ``cache_kv`` and
``clear_kv_cache`` on an hf model; genlm-backend's ``AsyncTransformer`` had them.
"""

from renamed_llamppl import run_with_renamed_llamppl
from session_requires import require

require("genlm_hf.lm", reason="genlm-hf is not installed (nox -s hf installs it)")

CODE = """
import asyncio

import numpy as np
from llamppl import CachedCausalLM

lm = CachedCausalLM.from_pretrained("tiny-gpt2", backend="hf")
print(lm.backend, type(lm.model).__module__)
prompt = lm.tokenizer.encode("Hello, world")
direct = lm.model.next_token_logprobs_sync(prompt).float().numpy()
lm.cache_kv(prompt[:2])
lm.reset_async_queries()
via_llamppl = asyncio.run(lm.next_token_logprobs(prompt))
lm.clear_kv_cache()
again = lm.next_token_logprobs_unbatched(prompt)
print(np.allclose(direct, via_llamppl, atol=1e-5), np.allclose(direct, again, atol=1e-5))
lm.model.cleanup()
"""


def test_llamppl_runs_on_genlm_hf(tmp_path):
    out = run_with_renamed_llamppl(CODE, tmp_path)
    assert out.split("\n")[:2] == ["hf genlm_hf.lm", "True True"]
