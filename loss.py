"""The loss head that training uses (model.GPT): cross-entropy of x Wᵀ with the logits never whole."""
import torch

LOSS_CHUNK = 2**26  # logits the loss makes at a time: 256 MB in fp32, about 1,300 rows of a 50,304 vocabulary


class LinearCrossEntropy(torch.autograd.Function):
    """The loss head, cross_entropy(x Wᵀ, y), without the (N, V) logits alive through backward (at
    V = 50,304 an 8K-token sequence has 1.6 GB of them in fp32, and their gradient as much). A chunk
    of rows at a time, the forward makes their fp32 logits, loss and gradient d = (softmax -
    onehot(y)) / n, then the two products backward would make, dx = d W and dW = dᵀ x; backward
    only scales them. The same three products as the plain loss: the same FLOPs, none recomputed."""

    @staticmethod
    def forward(ctx, x, W, y):
        # x (N, C), W (V, C), y (N,) with -100 ignored (F.cross_entropy's default) -> the mean loss over the
        # other rows: recall.py's targets are -100 wherever a position is not an answer
        keep = y != -100
        n = keep.sum().clamp(min=1)
        loss, dx, dW = x.new_zeros((), dtype=torch.float32), torch.empty_like(x), torch.zeros_like(W, dtype=torch.float32)
        amp = x.device.type
        Wc = W.to(torch.get_autocast_dtype(amp)) if torch.is_autocast_enabled(amp) else W  # cast once, not per product
        # the two gradient products: fp16 would round a rare token's (softmax - onehot)/n to zero
        # before the loss scaler could lift it (about a fifth of the vocabulary's rows), so in fp32
        Wd = W.float() if Wc.dtype == torch.float16 else Wc
        rows = max(1, LOSS_CHUNK // W.size(0))
        for i in range(0, x.size(0), rows):
            xc, t, k = x[i:i + rows], y[i:i + rows].clamp(min=0).unsqueeze(1), keep[i:i + rows].unsqueeze(1)
            logp = (xc @ Wc.t()).float().log_softmax(dim=-1)  # (rows, V)
            loss -= (logp.gather(1, t) * k).sum()
            d = logp.exp_().scatter_add_(1, t, logp.new_full(t.shape, -1.0)).mul_(k / n)  # (softmax - onehot) / n
            d = d.to(Wd.dtype)  # the products in the weights' dtype (autocast's; fp32 under fp16)
            with torch.autocast(amp, enabled=False):  # fp16's fp32 products stay fp32
                dx[i:i + rows] = d @ Wd  # (rows, C)
                dW += d.t() @ xc.to(Wd.dtype)  # (V, C)
        ctx.save_for_backward(dx, dW.to(W.dtype))
        return loss / n

    @staticmethod
    def backward(ctx, g):
        dx, dW = ctx.saved_tensors
        return dx * g, dW * g, None
