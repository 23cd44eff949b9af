#!/usr/bin/env python3
"""Writes the seed inputs of the image decoders' fuzz harness (tools/fuzz/image_decode_fuzz.cpp)
to tests/data/image_corpus: small JPEGs (gray, RGB at 4:2:0 and 4:4:4, progressive, CMYK) and
PNGs (gray, RGB, RGBA, palette, 16-bit), plus a truncated file of each kind. Needs Pillow
(python3-pil). Inputs the fuzzer saved from crashes (fuzz-*) are kept.

  tools/fuzz/make_image_corpus.py
"""

import io
import os

from PIL import Image, ImageDraw

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                   "image_corpus")


def picture(mode, size=(24, 16)):
    image = Image.linear_gradient("L").resize(size).convert("RGB")
    ImageDraw.Draw(image).ellipse((4, 2, 16, 12), fill=(200, 30, 90))
    return image.convert(mode)


def encoded(image, fmt, **options):
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if not name.startswith("fuzz-"):
            os.remove(os.path.join(OUT, name))
    files = {
        "gray.jpg": encoded(picture("L"), "JPEG", quality=90),
        "rgb420.jpg": encoded(picture("RGB"), "JPEG", quality=90, subsampling=2),
        "rgb444.jpg": encoded(picture("RGB"), "JPEG", quality=90, subsampling=0),
        "progressive.jpg": encoded(picture("RGB"), "JPEG", quality=75, progressive=True),
        "cmyk.jpg": encoded(picture("CMYK"), "JPEG", quality=90),
        "large.jpg": encoded(picture("RGB", (80, 64)), "JPEG", quality=50),
        "gray.png": encoded(picture("L"), "PNG"),
        "rgb.png": encoded(picture("RGB"), "PNG"),
        "rgba.png": encoded(picture("RGBA"), "PNG"),
        "palette.png": encoded(picture("P"), "PNG"),
        "gray16.png": encoded(picture("L").convert("I").point(lambda v: v * 256), "PNG"),
    }
    files["truncated.jpg"] = files["rgb420.jpg"][: len(files["rgb420.jpg"]) // 2]
    files["truncated.png"] = files["rgb.png"][: len(files["rgb.png"]) // 2]
    for name, data in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"make_image_corpus: {len(files)} files in {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
