#!/usr/bin/python3
"""Trains `alloy train --model gpt --dataset text` 's recipe with PyTorch on the CPU.

The same model as core/models/gpt.h (nanoGPT's GPT-2): token plus learned position embedding,
dropout, pre-norm blocks x + attn(ln_1(x)), x + mlp(ln_2(x)) with a fused q | k | v projection,
causal scaled-dot-product attention and GELU (tanh approximation), a final layer norm and the
output head tied to the token embedding; --bias false drops the biases of the linear layers and
layer norms (eps 1e-5). Weights start from N(0, 0.02), the two residual projections of each
block from N(0, 0.02 / sqrt(2 n_layer)), biases at 0.

The same training: AdamW (torch.optim.AdamW, betas (--beta1, --beta2), eps 1e-8) with two
parameter groups as nanoGPT's and Alloy's, weight decay on the parameters of two or more
dimensions only; gradients clipped to --clip-grad-norm; the learning rate set before each step
by Alloy's schedule (core/ops/lr_schedule.h): base (done + 1) / warmup during the warm-up, then
cosine decay to --min-lr at --steps. The data: every byte of the text is a token, the vocabulary
the file's distinct bytes in increasing order, the first 90% trains; each step reads
--batch-size windows of --block-size + 1 tokens at random positions (torch's generator, seeded:
the same text and distribution as Alloy's windows, not the same draws). Attention is written
out (softmax of the masked T x T scores; torch 1.13 has no fused scaled_dot_product_attention).

Prints one JSON line at the end:
  {"event":"end","framework":"pytorch","tokens_per_second":...,"train_loss":...,...}
tokens_per_second counts training tokens (batch x block per step) over the wall time of the
training steps after the first (its allocations), data included; train_loss is the mean loss
of the last 10 steps.
"""

import argparse
import json
import math
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:
    sys.exit(f"gpt_pytorch.py: error: cannot import torch ({error}); "
             "install python3-torch and run with /usr/bin/python3")


class LayerNorm(nn.Module):
    def __init__(self, n, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.ln_1 = LayerNorm(c.n_embd, c.bias)
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.attn_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.ln_2 = LayerNorm(c.n_embd, c.bias)
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.mlp_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)
        self.dropout = c.dropout
        mask = torch.tril(torch.ones(c.block_size, c.block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, c.block_size, c.block_size))

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        scores = scores.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        p = F.dropout(F.softmax(scores, dim=-1), self.dropout, self.training)
        y = (p @ v).transpose(1, 2).contiguous().view(B, T, C)
        return F.dropout(self.attn_proj(y), self.dropout, self.training)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + F.dropout(self.mlp_proj(h), self.dropout, self.training)


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.block_size, c.n_embd)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = LayerNorm(c.n_embd, c.bias)
        self.dropout = c.dropout
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c.n_layer))
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        x = F.dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def lr_at(done, a):
    """Alloy's schedule (core/ops/lr_schedule.h) before update number done (from 0)."""
    if done < a.warmup_steps:
        return a.lr * (done + 1) / a.warmup_steps
    p = min(1.0, max(0.0, (done - a.warmup_steps) / max(1, a.steps - a.warmup_steps)))
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_file")
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--bias", choices=("true", "false"), default="false")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--min-lr", type=float, default=1e-4)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--beta1", type=float, default=0.9)
    parser.add_argument("--beta2", type=float, default=0.99)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--clip-grad-norm", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    a = parser.parse_args()
    if a.steps < 2:
        parser.error("--steps must be at least 2 (the first is not timed)")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    text = open(a.data_file, "rb").read()
    vocabulary = sorted(set(text))
    index = torch.zeros(256, dtype=torch.long)
    index[torch.tensor(vocabulary)] = torch.arange(len(vocabulary))
    tokens = index[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]
    train = tokens[:len(tokens) - int(len(tokens) * 0.1)]

    a.vocab_size = len(vocabulary)
    a.bias = a.bias == "true"
    model = Gpt(a)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=a.lr, betas=(a.beta1, a.beta2), eps=1e-8)
    generator = torch.Generator().manual_seed(a.seed)
    offsets = torch.arange(a.block_size + 1)
    losses = []
    model.train()
    start = None
    for step in range(a.steps):
        if step == 1:
            start = time.perf_counter()
        starts = torch.randint(len(train) - a.block_size, (a.batch_size,), generator=generator)
        windows = train[starts.unsqueeze(1) + offsets]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, a)
        loss = model(windows[:, :-1], windows[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip_grad_norm > 0:
            nn.utils.clip_grad_norm_(model.parameters(), a.clip_grad_norm)
        optimizer.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    print(json.dumps({
        "event": "end", "framework": "pytorch", "torch": torch.__version__,
        "threads": a.threads, "steps": a.steps,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokens_per_second": (a.steps - 1) * a.batch_size * a.block_size / seconds,
        "train_loss": sum(losses[-10:]) / len(losses[-10:])}))


if __name__ == "__main__":
    main()
