#!/usr/bin/python3
"""Times fp32 resnet18 training steps with PyTorch on the CPU.

The same network and step as `alloy mem --model resnet18 --opt-levels O0` (core/models/resnet18.cpp,
apps/memory_report.cpp), for 28x28 single-channel images and 10 classes:
  conv 1->64 3x3 (stride 1, padding 1, no bias), batch norm, relu (no max pooling);
  four stages of two basic blocks, widths 64, 128, 256, 512, the first block of stages 2-4 with
  stride 2 and a 1x1 convolution + batch norm shortcut (28 -> 28 -> 14 -> 7 -> 4);
  global average pooling, linear 512 -> 10; Kaiming normal (fan_out, relu) convolutions.
One synthetic uint8 batch, normalised to [0, 1] in every step; softmax cross-entropy (mean over
the batch); SGD with momentum 0.9.

Prints one JSON line per batch size:
  {"framework":"pytorch","batch_size":64,"timed_steps":4,"images_per_second":...,
   "cpu_seconds":...,"images_per_cpu_second":...}
images_per_second counts the images of the steps after the first over their wall time, as
alloy mem does; cpu_seconds is this process's user + system CPU time over the same steps
(images_per_cpu_second is null if that reads 0: the process clock ticks are coarse).

Needs PyTorch and numpy (Debian: python3-torch python3-numpy; run it with /usr/bin/python3).
"""

import argparse
import json
import os
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:  # a pyenv python without torch, usually
    sys.exit(f"resnet18_pytorch.py: error: cannot import torch ({error}); "
             "install python3-torch and run with /usr/bin/python3")


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
    def __init__(self, classes=10):
        super().__init__()
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
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        x = F.avg_pool2d(x, x.shape[-1])  # 4x4 -> 1x1
        return self.fc(torch.flatten(x, 1))


def cpu_seconds():
    times = os.times()
    return times.user + times.system


def measure(batch_size, steps, seed):
    torch.manual_seed(seed)
    model = ResNet18()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (batch_size, 1, 28, 28), dtype=torch.uint8,
                           generator=generator)
    labels = torch.randint(0, 10, (batch_size,), generator=generator)
    wall_from, cpu_from = time.perf_counter(), cpu_seconds()
    for step in range(steps):
        if step == 1:  # the first step allocates and warms up; time the rest
            wall_from, cpu_from = time.perf_counter(), cpu_seconds()
        logits = model(images.float() / 255.0)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
    wall, cpu = time.perf_counter() - wall_from, cpu_seconds() - cpu_from
    timed = steps - 1
    return {"framework": "pytorch", "torch": torch.__version__,
            "threads": torch.get_num_threads(), "batch_size": batch_size, "timed_steps": timed,
            "images_per_second": timed * batch_size / wall, "cpu_seconds": cpu,
            "images_per_cpu_second": timed * batch_size / cpu if cpu > 0 else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", default="64,128", help="comma-separated")
    parser.add_argument("--steps", type=int, default=5,
                        help="steps per batch size; the first is not timed")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        parser.error(f"--batch-sizes: not a comma-separated list of integers: {args.batch_sizes}")
    if args.steps < 2 or args.threads < 1 or min(batch_sizes) < 1:
        parser.error("--steps must be at least 2, --threads and each batch size at least 1")

    torch.set_num_threads(args.threads)
    for batch_size in batch_sizes:
        print(json.dumps(measure(batch_size, args.steps, args.seed)), flush=True)


if __name__ == "__main__":
    main()
