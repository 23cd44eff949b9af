#!/usr/bin/env python3
"""Times fp32 ResNet-50 training steps (torchvision.models.resnet50, 1000 classes) with PyTorch on
the CPU: SGD with momentum 0.9 on one synthetic batch of 3 x SIZE x SIZE u8 images, scaled to
[0, 1] and normalised with ImageNet's mean and std each step, as `alloy mem --model resnet50
--normalize imagenet` steps. The PyTorch side of tools/bench/resnet50_cpu_vs_pytorch.sh.

  resnet50_pytorch.py [--batch-size 16] [--size 224] [--steps 4] [--threads N]

Prints one JSON line; images_per_second counts the steps after the first over their wall time.
"""

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
import torchvision


def cpu_seconds():
    times = os.times()
    return times.user + times.system


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = torchvision.models.resnet50(num_classes=1000)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randint(0, 256, (args.batch_size, 3, args.size, args.size), dtype=torch.uint8)
    labels = torch.randint(0, 1000, (args.batch_size,))
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    for step in range(args.steps):
        if step == 1:  # the first step allocates and warms up; time the rest
            wall_from, cpu_from = time.perf_counter(), cpu_seconds()
        x = (images.float() / 255.0 - mean) / std
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        optimizer.step()
    wall, cpu = time.perf_counter() - wall_from, cpu_seconds() - cpu_from
    timed = args.steps - 1
    print(json.dumps({"framework": "pytorch", "threads": torch.get_num_threads(),
                      "batch_size": args.batch_size, "size": args.size, "timed_steps": timed,
                      "images_per_second": timed * args.batch_size / wall,
                      "images_per_cpu_second": timed * args.batch_size / cpu if cpu > 0 else None,
                      "final_loss": loss.item(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
