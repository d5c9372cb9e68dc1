"""llamppl 0.2.3 runs on genlm-core through the import rename, on a machine without MLX.

llamppl imports ``AsyncTransformer``, ``AsyncVirtualLM``, ``MockAsyncLM`` and
``AsyncMlxLM`` from ``genlm.backend.llm`` at module level: through the rename, on a
machine without MLX (nor, in this session, any plugin), that needs placeholder classes.
"""

from renamed_llamppl import run_with_renamed_llamppl

CODE = """
import asyncio

import llamppl
from llamppl import CachedCausalLM, LMContext, Model, smc_standard

lm = CachedCausalLM.from_pretrained("tiny-gpt2", backend="mock")
print(lm.backend, len(lm.str_vocab))
lm.reset_async_queries()  # the mock branch of llamppl
lm.clear_kv_cache()


class Greedy(Model):
    def __init__(self, lm, prompt):
        super().__init__()
        self.context = LMContext(lm, prompt)

    async def step(self):
        token = await self.sample(self.context.next_token())
        if len(self.context.tokens) > 8:
            self.finish()


particles = asyncio.run(smc_standard(Greedy(lm, "Hello"), 3))
print(len(particles), all(p.done_stepping() for p in particles))
lm.model.cleanup()
"""


def test_llamppl_runs_on_the_mock_backend(tmp_path):
    out = run_with_renamed_llamppl(CODE, tmp_path)
    assert out.split("\n")[:2] == ["mock 50257", "3 True"]


def test_llamppls_backend_classes_import_and_refuse_clearly(tmp_path):
    code = (
        "from llamppl.llms import AsyncMlxLM, CachedCausalLM\n"
        "try:\n"
        "    CachedCausalLM.from_pretrained('tiny-gpt2', backend='mlx')\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, str(exc).split(':')[0])\n"
    )
    out = run_with_renamed_llamppl(code, tmp_path)
    assert out.strip() == (
        "PluginLoadError AsyncMlxLM is genlm-mlx's model class, and genlm-mlx is not installed"
    )
