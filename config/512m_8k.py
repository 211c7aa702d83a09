# 512M-8K, the paper's Figure 4 run: 24 layers, 12 heads, d_model 1536, context 8192, 50B tokens.
# Its global batch is 4 sequences, so at most 4 ranks: on 8 GPUs run two designs at once (CUDA_VISIBLE_DEVICES)
# or pass --total_batch_tokens=65536 (a different experiment).
# torchrun --standalone --nproc_per_node=4 train.py config/512m_8k.py --attn=lrkv    (repeat for mha gqa mqa mla)
# Estimate on 4 of an 8xH200 node's GPUs at an assumed 40% MFU: about 72 h for MHA (training FLOPs from flops.py);
# the paper's small global batch leaves each GPU little work, so expect lower MFU and more time.
preset = "512m-8k"
dataset = "fineweb"
tokenizer = "gpt2"
batch_size = 1  # sequences of 8192 tokens per GPU per micro-step
total_batch_tokens = 32768  # the paper's global batch, the same on any number of GPUs
train_tokens = 50_000_000_000  # 1525879 steps of 32,768
warmup_iters = 2000
eval_interval = 2000
eval_tokens = 4_194_304  # fixed held-out FineWeb-Edu tokens, the same for every design
log_interval = 50
