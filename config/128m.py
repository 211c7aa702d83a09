# 128M (paper Tables 5-7): 12 layers, 6 heads, d_model 768, context 2048, 100B tokens.
# torchrun --standalone --nproc_per_node=8 train.py config/128m.py --attn=lrkv    (repeat for mha gqa mqa mla)
# Estimate on one 8xH200 node at an assumed 40% MFU: about 8.5 h for MHA (training FLOPs from flops.py);
# the paper's small global batch leaves each GPU little work, so expect lower MFU and more time.
preset = "128m"
dataset = "fineweb"
tokenizer = "gpt2"
batch_size = 2  # sequences of 2048 tokens per GPU per micro-step
total_batch_tokens = 32768  # the paper's global batch, the same on any number of GPUs
train_tokens = 100_000_000_000  # 3051758 steps of 32,768
warmup_iters = 2000
eval_interval = 2000
eval_tokens = 4_194_304  # fixed held-out FineWeb-Edu tokens, the same for every design
log_interval = 50
