# Multi-query associative recall (recall.py): the probe of what a smaller KV cache forgets.
# 2 layers (one cannot do the two-step lookup), 4 heads (with one, MHA and MQA are one model),
# d_model 64; 16 key-value pairs in sequences of 128 over a vocabulary of 320, fresh examples
# every step. Accuracy is argmax at the answers; the plan and results are in docs/.
#   python train.py config/mqar.py --attn=gqa --mqar_pairs=32 --n_embd=128
preset = "mqar"  # 2 layers, 4 heads, d_model 64, sequences of 128, vocabulary 320; each design at
                 # its default for the width: GQA 2 K/V heads, LRKV r = round(0.4 d_h), MLA d_c = d_h
dataset = "mqar"
mqar_pairs = [16]
mqar_alpha = 0.01
batch_size = 32
total_batch_tokens = 32 * 128
train_tokens = 3000 * 32 * 128  # 3,000 steps: learning comes as a late jump
warmup_iters = 100
eval_interval = 100
ckpt_interval = 500
