# 6.3B (paper Tables 5-7): 32 layers, 32 heads, d_model 4096, 50B tokens.
# Its weights, gradients and optimiser state (~80 GB in fp32) do not fit one 80 GB GPU beside its activations
# (python flops.py 6.3b: ~108 GiB per GPU under DDP, ~33 GiB with --fsdp): shard it. batch_size 1 x 8 GPUs x GA 2.
# torchrun --standalone --nproc_per_node=8 train.py config/6.3b.py --fsdp --attn=lrkv    (repeat for mha gqa mqa mla)
# Estimate on one 8xH200 node at an assumed 40% MFU: about 189 h for MHA (training FLOPs from flops.py);
# the paper's small global batch leaves each GPU little work, so expect lower MFU and more time.
preset = "6.3b"
dataset = "fineweb"
tokenizer = "gpt2"
batch_size = 1  # sequences of 2048 tokens per GPU per micro-step
total_batch_tokens = 32768  # the paper's global batch, the same on any number of GPUs
train_tokens = 50_000_000_000  # 1525879 steps of 32,768
warmup_iters = 2000
eval_interval = 2000
eval_tokens = 4_194_304  # fixed held-out FineWeb-Edu tokens, the same for every design
log_interval = 50
