"""loss.py's chunked loss head against the cross-entropy of whole logits: loss, gradients, fp16."""
import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("chunk", [2**26, 64 * 320])  # one chunk; many (the last one short)
def test_loss_head_equals_cross_entropy_of_the_logits(chunk, monkeypatch):
    # LinearCrossEntropy against F.cross_entropy(x Wᵀ) with ignored targets: the loss and both
    # gradients, fp32 (only float sums reordered) and under CPU bf16 autocast (bf16 products in both);
    # and no (N, V) tensor is kept for backward
    import loss as loss_head
    monkeypatch.setattr(loss_head, "LOSS_CHUNK", chunk)
    torch.manual_seed(0)
    N, C, V = 1000, 32, 320
    x, W = torch.randn(N, C, requires_grad=True), (torch.randn(V, C) / 4).requires_grad_()
    y = torch.randint(0, V, (N,))
    y[::7] = -100  # not answers (recall.py)
    for autocast, tol in ((False, 1e-6), (True, 2e-2)):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            ref = torch.nn.functional.cross_entropy((x @ W.t()).float(), y)
            saved = []
            with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
                loss = loss_head.LinearCrossEntropy.apply(x, W, y)
        assert max(saved) < N * V
        grads, ref_grads = torch.autograd.grad(2 * loss, (x, W)), torch.autograd.grad(2 * ref, (x, W))
        assert abs(loss.item() - ref.item()) < tol * ref.item()
        for g, r in zip(grads, ref_grads):
            assert g.dtype == r.dtype and (g - r).abs().max() < tol * r.abs().max()


def test_fp16_loss_head_keeps_every_rows_gradient():
    # under fp16 autocast with a loss scale (GradScaler's), the head's weight gradient matches fp32's
    # row by row: rounding (softmax - onehot)/n to fp16 zeroed rare tokens' rows before the scale
    import loss as loss_head
    torch.manual_seed(0)
    # confident logits (sd 12), as a trained head's: most tokens are unlikely in every row
    N, C, V = 256, 64, 4096
    x, W = torch.randn(N, C, requires_grad=True), (torch.randn(V, C) * 1.5).requires_grad_()
    y = torch.randint(0, V, (N,))
    grads = {}
    for dtype in (torch.float32, torch.float16):
        with torch.autocast("cpu", dtype=dtype, enabled=dtype == torch.float16):
            loss = loss_head.LinearCrossEntropy.apply(x, W, y)
        scale = 2.0 ** 16 if dtype == torch.float16 else 1.0
        grads[dtype] = [g / scale for g in torch.autograd.grad(loss * scale, (x, W))]
    (dx32, dW32), (dx16, dW16) = grads[torch.float32], grads[torch.float16]
    assert (dW32.abs().amax(1) > 0).all() and (dW16.abs().amax(1) > 0).all()  # no all-zero row
    assert (dW16 - dW32).abs().max() < 1e-2 * dW32.abs().max()
    assert (dx16 - dx32).abs().max() < 1e-2 * dx32.abs().max()
