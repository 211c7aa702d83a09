"""
lm-evaluation-harness tasks on any nanoKV model: the harness's model interface (lm_eval.api.model.LM)
over GPT, so a harness task runs on a checkpoint, a sharded checkpoint or an export alike.

    python eval.py out/cpu_lrkv_s0/ckpt.pt --tasks=hellaswag,arc_easy --limit=100

Log-likelihoods score a continuation in one forward pass; rolling log-likelihoods (perplexity
tasks) cut a document into windows of the context, every token scored once with as much context as
fits; generation decodes greedily through the design's KV cache (GPT.generate), batch_size prompts
padded on the left at a time. The harness is an optional extra (pip install lm_eval): eval.py
imports this file only for --tasks.
"""
import torch
from lm_eval.api.model import LM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window


class NanoKV(LM):
    def __init__(self, model, tok, amp, batch_size=8):
        super().__init__()
        self.model, self.tok, self.amp, self.batch_size = model, tok, amp, batch_size
        self._device = model.lm_head.weight.device
        self.T = model.cfg.block_size

    def encode_pair(self, context, continuation):
        # the harness's convention: spaces ending the context belong to the continuation, whose
        # tokens are those the whole string adds to the context's; an empty context is the eot token
        n = len(context) - len(context.rstrip())
        if n:
            context, continuation = context[:-n], context[-n:] + continuation
        if not context:
            return [self.tok.eot], self.tok.encode(continuation)
        ctx = self.tok.encode(context)
        return ctx, self.tok.encode(context + continuation)[len(ctx):]

    @torch.no_grad()
    def score(self, pairs):
        """For (context, continuation) token lists: (sum of log p(continuation | context), whether
        greedy decoding would give it). Longest first, batch_size at a time, right-padded (causal, so
        padding never reaches the tokens before it); an input longer than the context loses its start."""
        order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0]) - len(pairs[i][1]))
        out = [None] * len(pairs)
        for b in range(0, len(order), self.batch_size):
            batch = order[b:b + self.batch_size]
            rows = [(pairs[i][0] + pairs[i][1])[-(self.T + 1):][:-1] for i in batch]  # the inputs
            idx = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)  # (B, L)
            for r, row in enumerate(rows):
                idx[r, :len(row)] = torch.tensor(row)
            with self.amp:
                logits, _ = self.model(idx.to(self._device))  # (B, L, V)
            for r, i in enumerate(batch):
                n = min(len(pairs[i][1]), len(rows[r]))
                logp = logits[r, len(rows[r]) - n:len(rows[r])].float().log_softmax(-1)  # (n, V): predicts the continuation
                y = torch.tensor(pairs[i][1][-n:], device=logp.device)
                out[i] = (logp.gather(1, y[:, None]).sum().item(), bool((logp.argmax(-1) == y).all()))
        return out

    def loglikelihood(self, requests, disable_tqdm=False):
        return self.score([self.encode_pair(*r.args) for r in requests])

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        out = []
        for r in requests:
            windows = get_rolling_token_windows(self.tok.encode(r.args[0]), self.tok.eot, self.T, 1)
            out.append(sum(lp for lp, _ in self.score([make_disjoint_window(w) for w in windows])))
        return out

    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm=False):
        """Continuations batch_size at a time among requests of the same settings, padded on the left
        (greedy, each row decodes as it would alone; sampled, its draws depend on the batch). A row
        ends at the end of a document or a stop string, the batch once every row has; each row's
        text is cut there. Every batch has one size, a short one filled with copies of its last
        prompt, so generate keeps one set of caches (kept_caches), not one a batch size."""
        groups = {}
        for i, r in enumerate(requests):
            context, kw = r.args
            until = kw.get("until") or []
            until = (until,) if isinstance(until, str) else tuple(until)
            n = min(kw.get("max_gen_toks", 256), self.T - 1)
            temperature = kw.get("temperature", 0.0) if kw.get("do_sample") else 0.0
            groups.setdefault((until, n, temperature), []).append(i)
        out, B = [None] * len(requests), min(self.batch_size, len(requests))
        for (until, n, temperature), group in groups.items():
            group.sort(key=lambda i: -len(requests[i].args[0]))  # batches of like lengths: little padding
            ended = lambda new: all(self.tok.eot in row or any(s in self.tok.decode(row) for s in until)  # noqa: E731
                                    for row in new)
            for b in range(0, len(group), self.batch_size):
                batch = group[b:b + self.batch_size]
                # room for n new tokens; an empty context is the eot token
                prompts = [(self.tok.encode(requests[i].args[0]) or [self.tok.eot])[-(self.T - n):] for i in batch]
                prompts += prompts[-1:] * (B - len(prompts))
                L = max(map(len, prompts))
                idx = torch.tensor([[self.tok.eot] * (L - len(p)) + p for p in prompts])  # (B, L), left-padded
                mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompts])
                with self.amp:
                    new = self.model.generate(idx, n, temperature=temperature, stop=ended,
                                              attention_mask=mask)[:, L:].tolist()
                for i, row in zip(batch, new):
                    row = row[:row.index(self.tok.eot)] if self.tok.eot in row else row  # a document ends there
                    text = self.tok.decode(row)
                    for stop in until:
                        text = text.split(stop)[0]
                    out[i] = text
        return out
