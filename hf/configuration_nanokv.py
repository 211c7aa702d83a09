"""
nanoKV's configuration as transformers reads it, in a folder that `eval.py --export` wrote: the
GPTConfig the weights were trained with, whole, under `nanokv`, and transformers' own names for
its sizes, read from it (the one place they are set), for the tools that look for them. This file
runs there, beside model.py and attention.py, not from the repository.
"""
from transformers import PretrainedConfig


class NanoKVConfig(PretrainedConfig):
    model_type = "nanokv"
    nanokv: dict | None = None  # model.GPTConfig's fields: the design, its shape and settings
    # transformers' names, filled from nanokv in __post_init__
    vocab_size: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None  # MHA, GQA, MQA; MLA and LRKV cache no K/V heads (null)
    head_dim: int | None = None
    max_position_embeddings: int | None = None  # the context (block_size)
    sliding_window: int | None = None  # a window's width; null: every token
    use_cache: bool = True  # generation decodes through the design's own cache (modeling_nanokv.NanoKVLayer)
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs):
        if self.nanokv is not None:
            c = self.nanokv
            kv_heads = {"mha": c["n_head"], "gqa": c["n_kv_head"], "mqa": 1}.get(c["attn"])
            self.vocab_size, self.hidden_size, self.intermediate_size = c["vocab_size"], c["n_embd"], c["mlp_hidden"]
            self.num_hidden_layers, self.num_attention_heads = c["n_layer"], c["n_head"]
            self.num_key_value_heads = kv_heads
            self.head_dim, self.max_position_embeddings = c["n_embd"] // c["n_head"], c["block_size"]
            self.sliding_window = c["window"] or None
        super().__post_init__(**kwargs)
