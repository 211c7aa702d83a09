"""
nanoKV's GPT as a transformers causal LM, for folders that `eval.py --export` writes. It runs
there, beside copies of model.py, attention.py and what they import, so there is one model:

    AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)

Generation decodes through the design's own cache: a transformers Cache (the DynamicCache that
generate makes, or that a forward with use_cache makes) whose layers are NanoKVLayers, holding
what nanoKV's KVCache holds for the design (MLA's c_kv and k_pe; LRKV's shared head, per-head
latents and key norms; MHA's, GQA's and MQA's K and V). So beam search, past_key_values, assisted
generation and the harness work as with any causal LM. Batches pad on the left, with an attention mask.
"""
import warnings

import torch
import torch.nn.functional as F
import transformers
from packaging.version import Version
from transformers import DynamicCache, GenerationMixin, PreTrainedModel
from transformers.cache_utils import CacheLayerMixin
from transformers.modeling_outputs import CausalLMOutputWithPast

from .attention import KVCache, norm
from .common import TRANSFORMERS  # every file the model imports is named, so transformers copies it
from .configuration_nanokv import NanoKVConfig
from .generate import left_pads
from .loss import LinearCrossEntropy  # noqa: F401
from .model import GPT, GPTConfig, rope_tables

# The releases this code is tested on. Below them a name it relies on may be missing: refused. Above
# them a change could pass unseen (5.24 renamed past_key_values to cache); forward refuses any
# argument it does not know, so a rename fails loudly, and a warning names the tested range.
TESTED = f"tested on transformers {TRANSFORMERS[0]} to {TRANSFORMERS[1]}"
if Version(transformers.__version__) < Version(TRANSFORMERS[0]):
    raise ImportError(f"this nanoKV export needs transformers {TRANSFORMERS[0]} or newer ({TESTED}); "
                      f"{transformers.__version__} is installed: pip install -U transformers")
if Version(transformers.__version__) > Version(TRANSFORMERS[1]):
    warnings.warn(f"this nanoKV export was {TESTED}; {transformers.__version__} is newer")
# the output's name for the cache: past_key_values up to 5.23, cache from 5.24
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class NanoKVLayer(KVCache, CacheLayerMixin):
    """One layer's cache as transformers holds it: a KVCache's head-major buffers (B, heads, tokens,
    d) of what the design keeps per token, written by the attention classes as a KVCache is, but
    grown by each forward's tokens, as transformers' DynamicLayer grows K and V (a KVCache
    allocates the whole context at once); with a window, only the last `window` tokens are kept."""

    def __init__(self, max_len, window):
        KVCache.__init__(self, max_len, window)
        CacheLayerMixin.__init__(self)
        self.slots = max_len  # no ring: a chunk of any length fits, up to the context
        self.length = 0  # the tokens in the buffers write() last returned

    def write(self, pos, mask=None, **new):
        # new (B, heads, T, d) each -> the buffers with them appended, and the mask of what the new tokens see
        whole = {name: torch.cat([self.buf[name], x], dim=2) if name in self.buf else x for name, x in new.items()}
        # a window keeps its last `window` tokens, copied out so that the rest is freed
        self.buf = {name: b[:, :, -self.window:].clone() for name, b in whole.items()} if self.window else whole
        self.length, self.is_initialized = next(iter(whole.values())).size(2), True
        return whole, mask if pos is None else self.visible(pos, mask)

    def held(self, last):
        # (length,): the positions the buffers write() returned hold, the newest `last`
        return last - self.length + 1 + torch.arange(self.length, device=last.device)

    def get_seq_length(self):
        return self.n

    def get_max_length(self):
        return self.max_len

    def get_mask_sizes(self, query_length):
        return self.n + query_length, 0

    def reorder_cache(self, beam_idx):
        # beam search: each row continues the beam beam_idx names
        self.buf = {name: b.index_select(0, beam_idx.to(b.device)) for name, b in self.buf.items()}

    @property
    def is_croppable(self):
        # assisted generation asks before it drafts: a window that dropped tokens cannot crop back
        return not self.window or self.n <= self.window

    def crop(self, tokens_to_remove):
        # assisted generation (prompt lookup, a draft model) drops the drafted tokens it rejects: minus
        # their count (0: none), or in transformers' older form the length to keep
        keep = max(0, self.n + tokens_to_remove if tokens_to_remove <= 0 else tokens_to_remove)
        if keep >= self.n or not self.is_initialized:
            return
        if self.window and self.n > self.window:
            raise ValueError(f"a sliding window's cache keeps its last {self.window} tokens; the earlier ones "
                             "a crop would need are gone (decode without assistant tokens)")
        self.buf = {name: b[:, :, :keep] for name, b in self.buf.items()}
        self.n = keep

    def reset(self):
        self.buf, self.n, self.length, self.is_initialized = {}, 0, 0, False

    def update(self, *args, **kwargs):
        raise NotImplementedError("a nanoKV cache holds what its design keeps, which its attention writes "
                                  "(KVCache.write), not transformers' keys and values")

    lazy_initialization = update


class NanoKVForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = NanoKVConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _supports_sdpa = True  # every design attends through torch's scaled_dot_product_attention or matmuls

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

    def layers(self, cache):
        """cache's layers, a NanoKVLayer each. An empty cache of another kind (generate's
        DynamicCache of K/V layers, or the caller's) is given them."""
        cfg = self.model.cfg
        ours = all(isinstance(layer, NanoKVLayer) for layer in cache.layers)
        if len(cache.layers) != cfg.kv_groups or not ours:  # a layer a K/V group
            if cache.get_seq_length():
                raise ValueError("past_key_values holds another model's keys and values: pass the one this model "
                                 "returned, or none")
            cache.layers = [NanoKVLayer(cfg.block_size, cfg.window) for _ in range(cfg.kv_groups)]
            cache.layer_class_to_replicate = None
        return cache.layers

    def prepare_inputs_for_generation(self, input_ids, next_sequence_length=None, past_key_values=None,
                                      attention_mask=None, inputs_embeds=None, is_first_iteration=False,
                                      cache=None, **kwargs):
        """forward's arguments for a step of generate: the tokens the cache has not seen (a prompt's
        embeddings in the first), the rest as given; the cache under either of its names (cache
        from 5.24). transformers' own version reads forward's signature at every step for remote
        code, a tenth of a cpu-preset decode step."""
        new = slice(-next_sequence_length, None) if next_sequence_length else slice(None)
        if inputs_embeds is not None and is_first_iteration:
            input_ids, inputs_embeds = None, inputs_embeds[:, new]
        else:
            input_ids, inputs_embeds = input_ids[:, new], None
        kwargs.pop("labels", None)
        return dict(input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                    past_key_values=cache if past_key_values is None else past_key_values, **kwargs)

    def generate(self, inputs=None, generation_config=None, **kwargs):
        """transformers' generate, once the request fits the context: more is refused before any
        work, with the count that fits (a window too: positions past block_size have no RoPE
        angles), as nanoKV's own generate does; a request of no length runs up to the context. A
        max_length is passed on as max_new_tokens, which the export's default would override."""
        x = inputs
        for name in ("input_ids", "inputs_embeds"):
            x = kwargs.get(name) if x is None else x
        if x is not None:
            cfg, prompt = self.model.cfg, x.shape[1]
            # a generation_config's max_new_tokens is asked for unless it is the export's default
            given = getattr(generation_config, "max_new_tokens", None)
            given = None if given == self.generation_config.max_new_tokens else given
            n, most = kwargs.get("max_new_tokens", given), kwargs.pop("max_length", None)
            n = most - prompt if n is None and most is not None else n
            room = cfg.block_size - prompt
            if room < 1 or (n or 0) > room:
                raise ValueError(f"a prompt of {prompt} tokens leaves room for {max(room, 0)} new ones "
                                 f"in the context of {cfg.block_size}; {n or 'some'} were asked for")
            kwargs["max_new_tokens"] = room if n is None else n
        return super().generate(inputs, generation_config, **kwargs)

    def forward(self, input_ids=None, attention_mask=None, past_key_values=None, inputs_embeds=None,
                labels=None, use_cache=None, output_hidden_states=None, return_dict=None,
                logits_to_keep=0, cache=None):
        # no **kwargs: an argument this code does not know (as cache was, before 5.24) raises, named
        if cache is not None and past_key_values is not None and cache is not past_key_values:
            raise ValueError("pass the cache once, as cache or as past_key_values")
        x = input_ids if inputs_embeds is None else inputs_embeds  # GPT takes token ids or their embeddings
        cache = past_key_values if cache is None else cache
        if cache is None and (self.config.use_cache if use_cache is None else use_cache):
            cache = DynamicCache()
        caches = self.layers(cache) if cache is not None else None
        pad = None
        if attention_mask is not None:  # over the cached tokens and these: left padding, or none
            seen = cache.get_seq_length() if cache is not None else 0
            if attention_mask.shape != (x.size(0), seen + x.size(1)):
                raise ValueError(f"attention_mask {tuple(attention_mask.shape)} must cover the {seen} cached tokens "
                                 f"and the {x.size(1)} new ones of each of the {x.size(0)} rows")
            pad = left_pads(attention_mask)
        states, hooks = [], []
        if self.config.output_hidden_states if output_hidden_states is None else output_hidden_states:
            # the input of the first block and each block's output, as transformers' models give them
            hooks = [self.model.h[0].register_forward_pre_hook(lambda m, args: states.append(args[0]))]
            hooks += [b.register_forward_hook(lambda m, args, y: states.append(y[0])) for b in self.model.h]
        try:
            logits, _ = self.model(x, caches=caches, pad=pad, last=logits_to_keep == 1 and labels is None)
        finally:
            for h in hooks:
                h.remove()
        if states:  # the last after the final norm: what the head reads
            states[-1] = norm(states[-1])
        loss = None
        if labels is not None:  # transformers' convention: labels are the inputs, shifted here
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        if logits_to_keep > 1:
            logits = logits[:, -logits_to_keep:]
        out = CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE: cache},
                                     hidden_states=tuple(states) if states else None)
        return out if (self.config.return_dict if return_dict is None else return_dict) else out.to_tuple()
