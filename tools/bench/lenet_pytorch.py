#!/usr/bin/python3
"""Trains the reference LeNet recipe on Fashion-MNIST with PyTorch, on the CPU or a CUDA GPU.

The same recipe as `alloy train --model lenet --opt-level O0`:
  conv 1->20 3x3, relu, avgpool 2; conv 20->50 5x5, relu, avgpool 2;
  linear 800->128, relu; linear 128->10; weights normal(0, 0.01), biases 0;
  inputs u8/255; softmax cross-entropy (mean over the batch); plain SGD, lr 0.2, batch 256,
  shuffled each epoch, the last partial batch included.

Prints one JSON line per epoch on stdout and a final summary line:
  {"event":"end","framework":"pytorch","images_per_second":...,"test_acc":...,...}
images_per_second counts training images over the time spent in training steps (data
already in memory, test evaluation excluded), the same quantity Alloy's epoch event reports.

With --model ffn it trains `alloy train --model ffn`'s network instead (core/models/ffn.cpp), a
stack of transformer feed-forward blocks on the flattened image:
  linear 784->256; 4 x residual [layernorm 256, linear 256->512, gelu, dropout 0.1,
  linear 512->256]; layernorm 256; linear 256->10; PyTorch's default initialisation (Alloy's
  init_linear_default is the same distribution), the rest of the recipe unchanged.

With --label-smoothing X the loss is F.cross_entropy(..., label_smoothing=X), as `alloy train
--label-smoothing X`.

With --ema-decay D (as `alloy train --ema-decay D`) it also keeps an exponential moving average
of the weights the way timm's ModelEmaV3 does: a copy of the model whose fp32 parameters and
buffers are updated after each optimizer step, under no_grad, by torch._foreach_mul_(averages, D)
and torch._foreach_add_(averages, weights, alpha=1 - D) (two multi-tensor ops, inside the timed
steps). After each epoch's evaluation the copy is evaluated too, outside the timed steps, and
the epoch and end lines carry its accuracy as test_acc_ema after test_acc.

With --device cuda (eager mode, as a user writes it) the whole training and test sets are
uploaded once, as fp32 in [0, 1]; each epoch's shuffle is drawn on the GPU and its batches are
gathered there; the loss and accuracy sums stay on the GPU until the epoch ends, so no step
waits for the device (nor does Alloy's). An epoch's time runs from a synchronised device after
the shuffle to the synchronised end of its last step. The end line then also has
seconds_per_epoch and images_per_second_after_first over the epochs after the first (its cuDNN,
cuBLAS and allocator warm-up; null with one epoch), the GPU's name, the torch, CUDA and cuDNN
versions and the --tf32 and --cudnn-benchmark settings as read back (tools/bench/torch_device.py).

With --amp (CUDA only) each step follows PyTorch's automatic mixed precision recipe: forward and
loss under torch.autocast("cuda", dtype=torch.float16), backward of scaler.scale(loss),
scaler.step(optimizer) and scaler.update() through a GradScaler (torch.amp.GradScaler("cuda")
where it exists, else torch.cuda.amp.GradScaler()); the fp32 weights and the SGD update stay as
they are. With --accumulation-steps each micro-batch's scaled loss is backpropagated and the step
is taken once; with --clip-grad-norm, scaler.unscale_(optimizer) comes before clip_grad_norm_
("Working with unscaled gradients"); the weight averages follow every step, a step the scaler
skips included (as timm's ModelEmaV3 in its training loop). Evaluation runs under the same
autocast. The end line says "amp" and, with --amp, the final "loss_scale" (null without).

Needs PyTorch (Debian: python3-torch; run it with /usr/bin/python3 on the CPU).
"""

import contextlib
import copy
import gzip
import json
import math
import os
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:  # a pyenv python without torch, usually
    sys.exit(f"lenet_pytorch.py: error: cannot import torch ({error}); "
             "install python3-torch and run with /usr/bin/python3")

import torch_device  # noqa: E402  (beside this file; needs torch)


def read_idx(path, expected_magic):
    """Reads a .gz or raw IDX file of unsigned bytes into a uint8 tensor (torch alone: a GPU
    machine's PyTorch may come without numpy)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = bytearray(f.read())  # writable, as torch.frombuffer wants
    if len(data) < 4:
        raise ValueError(f"{path}: truncated header")
    magic = int.from_bytes(data[0:4], "big")
    if magic != expected_magic:
        raise ValueError(f"{path}: bad magic number {magic:#010x}, expected {expected_magic:#010x}")
    rank = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    offset = 4 + 4 * rank
    count = math.prod(dims)
    if len(data) - offset != count:
        raise ValueError(f"{path}: header promises {count} bytes, file has {len(data) - offset}")
    return torch.frombuffer(data, dtype=torch.uint8, offset=offset).reshape(dims)


def find(directory, base):
    for name in (base, base + ".gz"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"{os.path.join(directory, base)}: file not found (nor .gz)")


def load(directory, prefix):
    images = read_idx(find(directory, f"{prefix}-images-idx3-ubyte"), 0x00000803)
    labels = read_idx(find(directory, f"{prefix}-labels-idx1-ubyte"), 0x00000801)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{prefix}: {images.shape[0]} images but {labels.shape[0]} labels")
    x = (images.float() / 255.0).unsqueeze(1).contiguous()
    y = labels.long()
    return x, y


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 3)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.fc1 = nn.Linear(800, 128)
        self.fc2 = nn.Linear(128, 10)
        for module in (self.conv1, self.conv2, self.fc1, self.fc2):
            nn.init.normal_(module.weight, 0.0, 0.01)
            nn.init.zeros_(module.bias)

    def forward(self, x):
        x = F.avg_pool2d(F.relu(self.conv1(x)), 2)  # 28 -> 26 -> 13
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2)  # 13 -> 9 -> 4
        x = torch.flatten(x, 1)                      # 50 * 4 * 4 = 800
        x = F.relu(self.fc1(x))
        return self.fc2(x)


class FeedForwardBlock(nn.Module):
    """x + linear(dropout(gelu(linear(layernorm(x))))): a pre-norm transformer FFN."""

    def __init__(self, width, hidden, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return x + self.down(self.dropout(F.gelu(self.up(self.norm(x)))))


class FFN(nn.Module):
    def __init__(self, width=256, hidden=512, blocks=4, dropout=0.1):
        super().__init__()
        self.embed = nn.Linear(28 * 28, width)
        self.blocks = nn.Sequential(*[FeedForwardBlock(width, hidden, dropout)
                                      for _ in range(blocks)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.embed(torch.flatten(x, 1)))))


def evaluate(model, x, y, batch_size, autocast=contextlib.nullcontext):
    model.eval()
    correct = 0
    with torch.no_grad(), autocast():
        for start in range(0, x.shape[0], batch_size):
            logits = model(x[start:start + batch_size])
            correct += (logits.argmax(1) == y[start:start + batch_size]).sum().item()
    model.train()
    return correct / x.shape[0]


def main():
    parser = torch_device.Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model", choices=["lenet", "ffn"], default="lenet")
    parser.add_argument("--label-smoothing", type=float, default=0.0, metavar="X")
    # The step features of `alloy train`, with its semantics, for tools/bench/lenet_vs_pytorch.sh
    # --variants: clipping after backward (no loss scaler at fp32, so nothing to unscale),
    # accumulation over micro-batches whose losses are summed and divided by the step's rows,
    # and a warm-up + cosine rate set before each step from the count of steps taken.
    parser.add_argument("--clip-grad-norm", type=float, default=0.0)
    parser.add_argument("--accumulation-steps", type=int, default=1)
    parser.add_argument("--lr-schedule", choices=["constant", "cosine"], default="constant")
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--min-lr", type=float, default=0.0)
    parser.add_argument("--ema-decay", type=float, default=0.0, metavar="D",
                        help="also keep and evaluate a moving average of the weights (0: off)")
    parser.add_argument("--amp", action="store_true",
                        help="autocast to float16 + GradScaler, PyTorch's AMP recipe (CUDA only)")
    parser.add_argument("--save-state", metavar="FILE",
                        help="save the final model and optimizer state_dicts (torch.save)")
    torch_device.add_arguments(parser)
    args = parser.parse_args()
    if args.epochs < 1 or args.threads < 1 or args.batch_size < 1:
        parser.error("--epochs, --threads and --batch-size must be at least 1")
    if not args.lr > 0:
        parser.error(f"--lr must be positive, got {args.lr}")
    if args.accumulation_steps < 1 or args.warmup_steps < 0 or not args.clip_grad_norm >= 0:
        parser.error("--accumulation-steps must be >= 1, --warmup-steps and --clip-grad-norm >= 0")
    if not 0 <= args.label_smoothing < 1:
        parser.error(f"--label-smoothing must be in [0, 1), got {args.label_smoothing}")
    if not 0 <= args.ema_decay < 1:
        parser.error(f"--ema-decay must be in [0, 1), got {args.ema_decay}")
    if args.amp and args.device != "cuda":
        parser.error("--amp needs --device cuda (autocast to float16 with a GradScaler is "
                     "PyTorch's CUDA recipe)")
    device = torch_device.setup(args, parser.prog)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    try:
        train_x, train_y = load(args.data_dir, "train")
        test_x, test_y = load(args.data_dir, "t10k")
    except (OSError, ValueError) as error:
        torch_device.fail(parser.prog, str(error))
    train_x, train_y = train_x.to(device), train_y.to(device)
    test_x, test_y = test_x.to(device), test_y.to(device)

    model = (LeNet() if args.model == "lenet" else FFN()).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    if args.ema_decay > 0:
        # The averages start at the initial values, in fp32 like the model (and Alloy's).
        ema_model = copy.deepcopy(model).requires_grad_(False)
        averages = [*ema_model.parameters(), *ema_model.buffers()]  # neither model has buffers
        currents = [*model.parameters(), *model.buffers()]
    generator = torch.Generator(device=device).manual_seed(args.seed)
    scaler = torch_device.grad_scaler() if args.amp else None

    def autocast():
        return (torch.autocast("cuda", dtype=torch.float16) if args.amp
                else contextlib.nullcontext())

    def backward(loss):
        (scaler.scale(loss) if args.amp else loss).backward()

    n = train_x.shape[0]

    steps_per_epoch = (n + args.batch_size - 1) // args.batch_size
    total_steps = args.epochs * steps_per_epoch

    def scheduled_lr(done):
        """alloy's core/ops/lr_schedule.h."""
        if done < args.warmup_steps:
            return args.lr * (done + 1) / args.warmup_steps
        if args.lr_schedule == "constant":
            return args.lr
        p = min(max((done - args.warmup_steps) / max(1, total_steps - args.warmup_steps), 0), 1)
        return args.min_lr + (args.lr - args.min_lr) * 0.5 * (1 + math.cos(math.pi * p))

    scheduled = args.lr_schedule != "constant" or args.warmup_steps > 0
    steps_done = 0
    epoch_seconds = []
    images = 0
    test_acc = 0.0
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(n, generator=generator, device=device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        seen = 0
        torch_device.synchronize(device)
        start = time.perf_counter()
        # Like Alloy: the last, partial batch is a step too (60000 / 256 -> 235 steps).
        for first in range(0, n, args.batch_size):
            index = order[first:first + args.batch_size]
            xb, yb = train_x[index], train_y[index]
            optimizer.zero_grad(set_to_none=True)
            rows = yb.shape[0]
            if args.accumulation_steps == 1:
                with autocast():
                    logits = model(xb)
                    loss = F.cross_entropy(logits, yb, label_smoothing=args.label_smoothing)
                backward(loss)
                loss_sum.add_(loss.detach(), alpha=rows)
                correct.add_((logits.argmax(1) == yb).sum())
            else:
                # The step's rows in micro-batches as even as possible, the first ones larger;
                # each loss divided by the step's rows, so the gradients sum to the step's mean.
                for xm, ym in zip(xb.tensor_split(args.accumulation_steps),
                                  yb.tensor_split(args.accumulation_steps)):
                    if ym.shape[0] == 0:
                        continue
                    with autocast():
                        logits = model(xm)
                        loss = F.cross_entropy(logits, ym, reduction="sum",
                                               label_smoothing=args.label_smoothing)
                    backward(loss / rows)
                    loss_sum.add_(loss.detach())
                    correct.add_((logits.argmax(1) == ym).sum())
            if args.clip_grad_norm > 0:
                if args.amp:  # clip the unscaled gradients; step() then leaves them as they are
                    scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            if scheduled:
                for group in optimizer.param_groups:
                    group["lr"] = scheduled_lr(steps_done)
            if args.amp:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            if args.ema_decay > 0:
                with torch.no_grad():
                    torch._foreach_mul_(averages, args.ema_decay)
                    torch._foreach_add_(averages, currents, alpha=1 - args.ema_decay)
            steps_done += 1
            seen += rows
        torch_device.synchronize(device)
        seconds = time.perf_counter() - start
        epoch_seconds.append(seconds)
        images += seen
        test_acc = evaluate(model, test_x, test_y, 1000, autocast)
        ema = {}
        if args.ema_decay > 0:
            ema = {"test_acc_ema": evaluate(ema_model, test_x, test_y, 1000, autocast)}
        print(json.dumps({"event": "epoch", "framework": "pytorch", "epoch": epoch,
                          "train_loss": loss_sum.item() / seen, "train_acc": correct.item() / seen,
                          "test_acc": test_acc, **ema, "epoch_seconds": seconds,
                          "images_per_second": seen / seconds}), flush=True)

    if args.save_state:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                   args.save_state)
    # Every epoch has n images; the first is the warm-up.
    after_first = epoch_seconds[1:]
    print(json.dumps({"event": "end", "framework": "pytorch", "model": args.model,
                      "amp": args.amp, "loss_scale": scaler.get_scale() if args.amp else None,
                      "threads": args.threads,
                      "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
                      "images_per_second": images / sum(epoch_seconds), "test_acc": test_acc,
                      **ema,
                      "timed_epochs": len(after_first),
                      "seconds_per_epoch": (sum(after_first) / len(after_first)
                                            if after_first else None),
                      "images_per_second_after_first": (n * len(after_first) / sum(after_first)
                                                        if after_first else None),
                      **torch_device.facts(args, device)}),
          flush=True)


if __name__ == "__main__":
    main()
