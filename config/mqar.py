# Multi-query associative recall (recall.py): does a design learn the lookup, and does its cache
# hold it (eval.py --recall scores by distance), as E6 and E7 run it (docs/plan.md). 2 layers (one
# cannot do the two-step lookup), 4 heads (with one, MHA and MQA are one model), d_model 64;
# sequences of 128 over a vocabulary of 320, fresh examples every step, a mixture of 4, 8, 16 and
# 32 pairs, each scored apart.
#   python train.py config/mqar.py --attn=gqa
#   python train.py config/mqar.py --attn=mha --window=32      # trained with a window of 32
preset = "mqar"  # 2 layers, 4 heads, d_model 64, sequences of 128, vocabulary 320; each design at
                 # its default for the width: GQA 2 K/V heads, LRKV r = round(0.4 d_h), MLA d_c = d_h
dataset = "mqar"
mqar_pairs = [4, 8, 16, 32]
mqar_alpha = 0.01
batch_size = 32
total_batch_tokens = 32 * 128
train_tokens = 4000 * 32 * 128  # 4,000 steps: learning comes as a late jump
matrix_lr = 0.005  # x0.25 of the paper's: E6 chose it on validation (docs/runs/e6a); at x1 MHA solved nothing
warmup_iters = 100
eval_interval = 100
ckpt_interval = 500
