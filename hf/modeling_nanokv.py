"""
nanoKV's GPT as a transformers causal LM, for folders that `eval.py --export` writes. It runs
there, beside copies of model.py, attention.py and what they import, so there is one model:

    AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)

Generation goes through transformers' GenerationMixin without a cache: each new token runs the
whole prefix again (correct for every design; MLA's and LRKV's small caches are nanoKV's own
generate()). Batches may be padded on the right only: the model attends causally to every token.
"""
import torch
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .attention import KVCache  # noqa: F401  every file the model imports, named so transformers copies it
from .common import DESIGNS  # noqa: F401
from .configuration_nanokv import NanoKVConfig
from .generate import generate  # noqa: F401
from .loss import LinearCrossEntropy  # noqa: F401
from .model import GPT, GPTConfig, rope_tables


class NanoKVForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = NanoKVConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"

    def __init__(self, config):
        super().__init__(config)
        self.model = GPT(GPTConfig(**config.nanokv))
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        # GPT initialises its own weights and from_pretrained loads over them; what it loads into
        # empty tensors and no file holds is the RoPE tables (buffers out of the state dict)
        if isinstance(module, GPT):
            cos, sin = rope_tables(module.cfg)
            module.cos.copy_(cos)
            module.sin.copy_(sin)

    @classmethod
    def from_pretrained(cls, path, *args, **kwargs):
        try:
            return super().from_pretrained(path, *args, **kwargs)
        except RuntimeError as e:  # transformers' report of mismatched shapes, pages long, then this
            raise ValueError(f"{path}: its config.json does not match its weights (a shape differs): export the "
                             "checkpoint again rather than edit the config") from None

    def get_input_embeddings(self):
        return self.model.wte

    def get_output_embeddings(self):
        return self.model.lm_head

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        if attention_mask is not None and (attention_mask[:, 1:] > attention_mask[:, :-1]).any():
            raise ValueError("nanoKV attends causally to every token: pad batches on the right only")
        logits, _ = self.model(input_ids)  # (B, T, V)
        loss = None
        if labels is not None:  # transformers' convention: labels are the inputs, shifted here
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}
