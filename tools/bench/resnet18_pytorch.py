#!/usr/bin/python3
"""Times resnet18 training steps with PyTorch, on the CPU or a CUDA GPU, in fp32 or with AMP.

The same network and step as `alloy train --model resnet18` and `alloy mem --model resnet18`
(core/models/resnet18.cpp, apps/train/train_step.cpp), for 28x28 single-channel images and 10 classes:
  conv 1->64 3x3 (stride 1, padding 1, no bias), batch norm, relu (no max pooling);
  four stages of two basic blocks, widths 64, 128, 256, 512, the first block of stages 2-4 with
  stride 2 and a 1x1 convolution + batch norm shortcut (28 -> 28 -> 14 -> 7 -> 4);
  global average pooling, linear 512 -> 10; Kaiming normal (fan_out, relu) convolutions.
One synthetic uint8 batch, on the device, normalised to [0, 1] in every step; softmax
cross-entropy (mean over the batch); SGD with momentum 0.9, lr 0.01.

--precision amp (CUDA only) is PyTorch's recipe: forward and loss under
torch.autocast("cuda", dtype=torch.float16), backward, optimizer step and scale update through a
GradScaler (torch.amp.GradScaler("cuda") where it exists, else torch.cuda.amp.GradScaler()).
--channels-last converts the model and the input to NHWC. --clip-grad-norm X clips the gradients'
total L2 norm to X as PyTorch documents it ("Working with unscaled gradients"): with a GradScaler,
scaler.unscale_(optimizer) after backward, then torch.nn.utils.clip_grad_norm_(parameters, X),
then scaler.step(optimizer) and scaler.update(); in fp32, clip_grad_norm_ after backward. No step
reads anything back (the GradScaler itself waits once per step for its inf check, as it always
does).

--recompute blocks runs each of the 8 basic blocks' forward in training through
torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False), as `alloy train --recompute
blocks` does: backward runs the block's forward again instead of keeping its activations (only
the block's input is kept), at the cost of one more forward per block. use_reentrant=False is
PyTorch's recommended variant (1.13 has it; recent versions warn when it is not given). The
recomputed forward also runs batch norm's forward in training mode again, so each checkpointed
batch norm updates its running mean and variance twice per step (and num_batches_tracked by
2), a known PyTorch behaviour left as it is: with 1.13 (Debian's) a checkpointed BatchNorm2d
had, after one forward and backward, exactly the running statistics of two plain forwards on the
same input, with either use_reentrant. Training itself normalises with the batch statistics, so
the loss and the gradients are those without recompute (on the CPU with 1.13, the final loss of
3 steps matched bit for bit).

Prints one JSON line per batch size:
  {"framework":"pytorch","batch_size":64,"timed_steps":4,"images_per_second":...,
   "cpu_seconds":...,"images_per_cpu_second":...,"device":"cpu",...}
images_per_second counts the images of the steps after the --warmup-steps first ones (default
1) over their wall time, from a synchronised device to a synchronised device; cpu_seconds is
this process's user + system CPU time over the same steps (images_per_cpu_second is null if that
reads 0: the process clock ticks are coarse). The line also has the precision, the layout, the
final loss and loss scale (a NaN loss or a collapsed scale means the figure is not to be
trusted), the clipping limit and the last step's total gradient norm (unscaled, before
clipping; read after the timed steps; null without --clip-grad-norm), the --recompute setting,
max_rss_bytes: this process's maximum resident set size so far (getrusage's ru_maxrss: host
memory of the whole process, the Python interpreter and torch's libraries included, and the
largest of all batch sizes measured before in the same process; not an allocator's peak, and
not GPU memory), the device's name, the torch, CUDA and cuDNN versions and the --tf32 and
--cudnn-benchmark settings as read back (tools/bench/torch_device.py).

Needs PyTorch (Debian: python3-torch; run it with /usr/bin/python3 on the CPU).
"""

import json
import os
import resource
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
except ImportError as error:  # a pyenv python without torch, usually
    sys.exit(f"resnet18_pytorch.py: error: cannot import torch ({error}); "
             "install python3-torch and run with /usr/bin/python3")

import torch_device  # noqa: E402  (beside this file; needs torch)


class BasicBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = None
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, 0, bias=False),
                nn.BatchNorm2d(out_channels))

    def forward(self, x):
        hidden = F.relu(self.bn1(self.conv1(x)))
        branch = self.bn2(self.conv2(hidden))
        skip = self.shortcut(x) if self.shortcut is not None else x
        return F.relu(branch + skip)


class ResNet18(nn.Module):
    def __init__(self, classes=10, recompute="none"):
        super().__init__()
        self.recompute = recompute
        self.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, in_channels = [], 64
        for stage, width in enumerate((64, 128, 256, 512)):
            stride = 1 if stage == 0 else 2
            layers.append(nn.Sequential(BasicBlock(in_channels, width, stride),
                                        BasicBlock(width, width, 1)))
            in_channels = width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.recompute == "blocks" and self.training and torch.is_grad_enabled():
            for stage in self.layers:
                for block in stage:
                    x = checkpoint(block, x, use_reentrant=False)
        else:
            x = self.layers(x)
        x = F.avg_pool2d(x, x.shape[-1])  # 4x4 -> 1x1
        return self.fc(torch.flatten(x, 1))


def cpu_seconds():
    times = os.times()
    return times.user + times.system


def max_rss_bytes():
    """This process's maximum resident set size so far; Linux reports ru_maxrss in KiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(args, device, batch_size):
    torch.manual_seed(args.seed)
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    model = ResNet18(recompute=args.recompute).to(device=device, memory_format=layout)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    generator = torch.Generator().manual_seed(args.seed)
    images = torch.randint(0, 256, (batch_size, 1, 28, 28), dtype=torch.uint8,
                           generator=generator).to(device)
    labels = torch.randint(0, 10, (batch_size,), generator=generator).to(device)
    amp = args.precision == "amp"
    scaler = torch_device.grad_scaler() if amp else None
    clip = args.clip_grad_norm > 0
    norm = None
    for step in range(args.steps):
        if step == args.warmup_steps:  # the first steps allocate and warm up; time the rest
            torch_device.synchronize(device)
            wall_from, cpu_from = time.perf_counter(), cpu_seconds()
        x = (images.float() / 255.0).contiguous(memory_format=layout)
        optimizer.zero_grad(set_to_none=True)
        if amp:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.cross_entropy(model(x), labels)
            scaler.scale(loss).backward()
            if clip:  # clip the unscaled gradients; step() then does not unscale them again
                scaler.unscale_(optimizer)
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss = F.cross_entropy(model(x), labels)
            loss.backward()
            if clip:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            optimizer.step()
    torch_device.synchronize(device)
    wall, cpu = time.perf_counter() - wall_from, cpu_seconds() - cpu_from
    timed = args.steps - args.warmup_steps
    return {"framework": "pytorch", "threads": torch.get_num_threads(), "batch_size": batch_size,
            "timed_steps": timed, "warmup_steps": args.warmup_steps,
            "images_per_second": timed * batch_size / wall, "cpu_seconds": cpu,
            "images_per_cpu_second": timed * batch_size / cpu if cpu > 0 else None,
            "precision": args.precision, "channels_last": args.channels_last,
            "final_loss": loss.item(), "loss_scale": scaler.get_scale() if amp else 1.0,
            "clip_grad_norm": args.clip_grad_norm,
            "final_grad_norm": norm.item() if clip else None, "recompute": args.recompute,
            "max_rss_bytes": max_rss_bytes(),
            **torch_device.facts(args, device)}


def main():
    parser = torch_device.Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", default="64,128", help="comma-separated")
    parser.add_argument("--steps", type=int, default=5,
                        help="steps per batch size, the warm-up steps included")
    parser.add_argument("--warmup-steps", type=int, default=1,
                        help="first steps, not timed (default 1)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--precision", choices=("fp32", "amp"), default="fp32",
                        help="amp: autocast to float16 + GradScaler (CUDA only)")
    parser.add_argument("--channels-last", action="store_true",
                        help="model and input in NHWC (torch.channels_last)")
    parser.add_argument("--clip-grad-norm", type=float, default=0.0, metavar="X",
                        help="clip the unscaled gradients' total L2 norm to X (default 0: off)")
    parser.add_argument("--recompute", choices=("none", "blocks"), default="none",
                        help="blocks: checkpoint each basic block (torch.utils.checkpoint), "
                             "recomputing its forward in backward (default none)")
    torch_device.add_arguments(parser)
    args = parser.parse_args()
    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        parser.error(f"--batch-sizes: not a comma-separated list of integers: {args.batch_sizes}")
    if args.warmup_steps < 1 or args.steps <= args.warmup_steps:
        parser.error(f"--warmup-steps must be at least 1 and --steps above it, got "
                     f"{args.warmup_steps} and {args.steps}")
    if args.threads < 1 or min(batch_sizes) < 1:
        parser.error("--threads and each batch size must be at least 1")
    if not args.clip_grad_norm >= 0:  # NaN too
        parser.error(f"--clip-grad-norm must be >= 0, got {args.clip_grad_norm}")
    if args.precision == "amp" and args.device != "cuda":
        parser.error("--precision amp needs --device cuda (autocast to float16 with a "
                     "GradScaler is PyTorch's CUDA recipe)")
    device = torch_device.setup(args, parser.prog)

    torch.set_num_threads(args.threads)
    for batch_size in batch_sizes:
        print(json.dumps(measure(args, device, batch_size)), flush=True)


if __name__ == "__main__":
    main()
