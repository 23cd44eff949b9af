#!/usr/bin/env python3
"""Writes an IDX data set (MNIST, Fashion-MNIST: plain or .gz files) as an image folder tree for
`alloy train --dataset folder`: OUT/train/CLASS/NNNNN.png from train-*, OUT/val/CLASS/NNNNN.png
from t10k-*, CLASS the label as a number (zero-padded, so that sorted names keep numeric order).

  idx_to_folder.py IDX_DIR OUT [--format png|jpeg] [--quality Q] [--limit N] [--rgb]

PNG files are written with the standard library (zlib); --format jpeg needs Pillow and writes
at --quality (default 90). --limit keeps the first N examples of each set; --rgb writes the gray
images as RGB.
"""

import argparse
import gzip
import os
import struct
import sys
import zlib


def read_idx(path):
    for candidate in (path, path + ".gz"):
        if os.path.exists(candidate):
            opener = gzip.open if candidate.endswith(".gz") else open
            with opener(candidate, "rb") as f:
                data = f.read()
            break
    else:
        sys.exit(f"idx_to_folder: {path}[.gz]: no such file")
    magic, = struct.unpack(">I", data[:4])
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    if magic >> 8 != 0x08:
        sys.exit(f"idx_to_folder: {path}: not an unsigned-byte IDX file")
    return shape, data[4 + 4 * dims:]


def png_bytes(width, height, pixels, channels):
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xffffffff))
    color = 2 if channels == 3 else 0
    header = struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0)
    stride = width * channels
    raw = b"".join(b"\x00" + pixels[y * stride:(y + 1) * stride] for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) +
            chunk(b"IEND", b""))


def write_split(idx_dir, prefix, out, split, fmt, quality, limit, rgb):
    (count, rows, cols), pixels = read_idx(os.path.join(idx_dir, prefix + "-images-idx3-ubyte"))
    (label_count,), labels = read_idx(os.path.join(idx_dir, prefix + "-labels-idx1-ubyte"))
    if label_count != count:
        sys.exit(f"idx_to_folder: {prefix}: {count} images but {label_count} labels")
    count = min(count, limit) if limit else count
    size = rows * cols
    for i in range(count):
        folder = os.path.join(out, split, f"{labels[i]:02d}")
        os.makedirs(folder, exist_ok=True)
        gray = pixels[i * size:(i + 1) * size]
        image = bytes(v for v in gray for _ in range(3)) if rgb else gray
        channels = 3 if rgb else 1
        path = os.path.join(folder, f"{i:05d}." + ("png" if fmt == "png" else "jpg"))
        if fmt == "png":
            with open(path, "wb") as f:
                f.write(png_bytes(cols, rows, image, channels))
        else:
            from PIL import Image  # only JPEG needs it
            mode = "RGB" if rgb else "L"
            Image.frombytes(mode, (cols, rows), image).save(path, quality=quality)
    return count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("idx_dir")
    parser.add_argument("out")
    parser.add_argument("--format", choices=["png", "jpeg"], default="png")
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--rgb", action="store_true")
    args = parser.parse_args()
    if args.format == "jpeg":
        try:
            import PIL  # noqa: F401
        except ImportError:
            sys.exit("idx_to_folder: --format jpeg needs Pillow (python3-pil)")
    for prefix, split in (("train", "train"), ("t10k", "val")):
        n = write_split(args.idx_dir, prefix, args.out, split, args.format, args.quality,
                        args.limit, args.rgb)
        print(f"{split}: {n} images", file=sys.stderr)


if __name__ == "__main__":
    main()
