# Multi-query associative recall (recall.py): the probe of what a smaller KV cache forgets.
# 2 layers (one cannot do the two-step lookup), 4 heads (with one, MHA and MQA are one model),
# d_model 64; 16 key-value pairs in sequences of 128 over a vocabulary of 256, fresh examples
# every step. Accuracy is argmax at the answers; the plan and results are in docs/.
#   python train.py config/mqar.py --attn=gqa --mqar_pairs=32 --n_embd=128
preset = "cpu"
dataset = "mqar"
n_layer = 2
n_head = 4
n_embd = 64
block_size = 128
vocab_size = 256
mqar_pairs = 16
mqar_alpha = 0.01
batch_size = 32
total_batch_tokens = 32 * 128
train_tokens = 3000 * 32 * 128  # 3,000 steps: learning comes as a late jump
warmup_iters = 100
eval_interval = 100
ckpt_interval = 500
