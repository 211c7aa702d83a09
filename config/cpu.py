# The CPU preset on the embedded Shakespeare corpus: what `python train.py` runs with no arguments
# (these are train.py's defaults, written out). 4 layers, 4 heads, d_model 128, context 256,
# byte tokenizer; ~2.5M tokens. Speeds and times are in docs/performance.md.
preset = "cpu"
dataset = "shakespeare"
tokenizer = "byte"
batch_size = 16
total_batch_tokens = 4096
train_tokens = 2_457_600  # 600 steps
warmup_iters = 30
eval_interval = 50
eval_tokens = 65536
