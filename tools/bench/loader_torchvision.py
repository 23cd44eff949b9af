#!/usr/bin/env python3
"""Times torchvision's ImageFolder + DataLoader alone: an image folder's training images decoded
(PIL), RandomResizedCrop(size) and RandomHorizontalFlip, then PILToTensor (u8, as Alloy's loader
gives), batch after batch, no model. The PyTorch side of tools/bench/loader_vs_torchvision.sh.

  loader_torchvision.py DIR [--size N] [--workers N] [--batch-size N] [--epochs N]

Prints one JSON line: images, seconds and images_per_second over the epochs after the first
(which warms the page cache and starts the workers; persistent_workers keeps them).
"""

import argparse
import json
import os
import time

import torch
import torchvision
from torchvision import transforms


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    transform = transforms.Compose([transforms.RandomResizedCrop(args.size),
                                    transforms.RandomHorizontalFlip(),
                                    transforms.PILToTensor()])
    dataset = torchvision.datasets.ImageFolder(os.path.join(args.dir, "train"), transform)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers,
                                         persistent_workers=args.workers > 0)
    images = 0
    start = time.perf_counter()
    for epoch in range(args.epochs + 1):
        if epoch == 1:
            start = time.perf_counter()
            images = 0
        for batch, _ in loader:
            images += batch.shape[0]
    seconds = time.perf_counter() - start
    print(json.dumps({"framework": "torchvision", "images": images, "seconds": round(seconds, 4),
                      "images_per_second": round(images / seconds, 2),
                      "threads": args.workers, "batch_size": args.batch_size, "size": args.size,
                      "epochs": args.epochs, "torch": torch.__version__,
                      "torchvision": torchvision.__version__}))


if __name__ == "__main__":
    main()
