#!/usr/bin/python3
"""Loads the weights of an `alloy ckpt export --safetensors` file of the LeNet model (or, with
--model ffn, the ffn model: layer norms, GELU, residual sums) into its PyTorch twin of
tools/bench/lenet_pytorch.py and prints its test accuracy as one JSON line:
  {"test_acc": 0.8123, "test_examples": 10000, "tensors": 8}
The safetensors file is read with json and numpy only (not the safetensors package), and
Alloy's parameters are matched to PyTorch's state_dict in order, each shape checked.

Exit status: 0 done, 1 a broken file or a mismatch (message on stderr), 77 PyTorch or numpy is
missing (so ctest reports a skip, with the reason on stderr).

Usage: eval_safetensors_pytorch.py FILE [--model lenet|ffn] [--data-dir DIR] [--threads N]
"""
import argparse
import json
import os
import sys

try:
    import numpy as np
    import torch
except ImportError as error:
    sys.stderr.write(f"skipped: cannot import {error.name} ({sys.executable}); "
                     "install python3-torch and python3-numpy\n")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
import lenet_pytorch  # noqa: E402  (the benchmark's model and data loading)

DTYPES = {"F32": "<f4", "F16": "<f2", "U8": "u1", "I32": "<i4"}


def read_safetensors(path):
    """[(name, array)] in file order."""
    with open(path, "rb") as f:
        blob = f.read()
    header_len = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    header.pop("__metadata__", None)
    data = blob[8 + header_len:]
    tensors = []
    for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=np.dtype(DTYPES[info["dtype"]]))
        tensors.append((name, array.reshape(tuple(info["shape"]))))
    return tensors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", choices=["lenet", "ffn"], default="lenet")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    tensors = read_safetensors(args.file)
    model = lenet_pytorch.LeNet() if args.model == "lenet" else lenet_pytorch.FFN()
    state = model.state_dict()
    if len(tensors) != len(state):
        sys.exit(f"{args.file}: {len(tensors)} tensors, the PyTorch {args.model} has {len(state)}")
    loaded = {}
    for (name, array), (torch_name, target) in zip(tensors, state.items()):
        if tuple(array.shape) != tuple(target.shape):
            sys.exit(f"{args.file}: {name} has shape {array.shape}, "
                     f"PyTorch's {torch_name} needs {tuple(target.shape)}")
        loaded[torch_name] = torch.from_numpy(array.astype(np.float32))
    model.load_state_dict(loaded)

    test_x, test_y = lenet_pytorch.load(args.data_dir, "t10k")
    accuracy = lenet_pytorch.evaluate(model, test_x, test_y, 1000)
    print(json.dumps({"test_acc": accuracy, "test_examples": int(test_y.shape[0]),
                      "tensors": len(tensors)}))


if __name__ == "__main__":
    main()
