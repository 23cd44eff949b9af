#!/usr/bin/env python3
"""Reads a safetensors file with nothing but json and numpy, checks its layout, and prints
one line per tensor, in file order: name, dtype, shape and values, separated by tabs (shape
and values comma-separated, floats as Python reprs, which read back exactly). The first line
is the metadata as JSON. Exits 1 with a message on stderr when the file breaks the format.

Usage: read_safetensors.py FILE
"""
import json
import sys

import numpy as np

DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": None, "U8": "u1", "I32": "<i4"}


def fail(message):
    sys.stderr.write(f"{sys.argv[1]}: {message}\n")
    sys.exit(1)


def main():
    with open(sys.argv[1], "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail("shorter than the 8-byte header length")
    header_len = int.from_bytes(blob[:8], "little")
    if header_len % 8 != 0 or 8 + header_len > len(blob):
        fail(f"bad header length {header_len}")
    header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    data = blob[8 + header_len :]
    metadata = header.pop("__metadata__", {})
    print(json.dumps(metadata, sort_keys=True))

    entries = sorted(header.items(), key=lambda item: item[1]["data_offsets"][0])
    expected_begin = 0
    for name, info in entries:
        begin, end = info["data_offsets"]
        if begin != expected_begin or end > len(data):
            fail(f"{name}: data_offsets {begin}, {end} leave a hole or overrun")
        expected_begin = end
        if DTYPES.get(info["dtype"]) is None:
            fail(f"{name}: dtype {info['dtype']} is not readable here")
        dtype = np.dtype(DTYPES[info["dtype"]])
        shape = tuple(info["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if count * dtype.itemsize != end - begin:
            fail(f"{name}: {end - begin} bytes for {count} x {info['dtype']}")
        array = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
        if dtype.kind == "f":
            values = ",".join(repr(float(v)) for v in array.ravel())
        else:
            values = ",".join(str(int(v)) for v in array.ravel())
        print("\t".join([name, info["dtype"], ",".join(str(d) for d in shape), values]))
    if expected_begin != len(data):
        fail(f"{len(data) - expected_begin} bytes after the last tensor")


if __name__ == "__main__":
    main()
