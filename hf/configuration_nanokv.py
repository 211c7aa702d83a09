"""
nanoKV's configuration as transformers reads it, in a folder that `eval.py --export` wrote: the
GPTConfig the weights were trained with, whole, under `nanokv`. This file runs there, beside
model.py and attention.py, not from the repository.
"""
from transformers import PretrainedConfig


class NanoKVConfig(PretrainedConfig):
    model_type = "nanokv"
    nanokv: dict | None = None  # model.GPTConfig's fields: the design, its shape and settings
    max_position_embeddings: int | None = None  # the context (block_size), what the harness reads
    use_cache: bool = False  # generation recomputes the prefix each token (transformers' caches
                             # hold K and V; MLA and LRKV cache other things)
    tie_word_embeddings: bool = False
