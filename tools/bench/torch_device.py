"""The device side of the PyTorch references in tools/bench (lenet_pytorch.py, resnet18_pytorch.py,
torch_bench.py): the --device, --tf32 and --cudnn-benchmark flags, their checks and settings,
the GradScaler of their AMP runs, the synchronisation around timed regions, and the facts about
the device and the libraries that go into the JSON.

Runs on PyTorch 1.13 and 2.x, with or without CUDA. Torch is imported by the caller first (each
script says how to install it when the import fails).
"""

import argparse
import ctypes
import ctypes.util
import platform
import sys

import torch


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit status 2), like alloy's."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)


def add_arguments(parser):
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: the data lives on the GPU, timed regions are synchronised")
    parser.add_argument("--tf32", choices=("on", "off"), default="off",
                        help="TF32 for fp32 convolutions and matmuls (CUDA; default off: true "
                             "fp32 like Alloy's O0)")
    parser.add_argument("--cudnn-benchmark", action="store_true",
                        help="let cuDNN time its algorithms (CUDA; default off: its heuristics, "
                             "as Alloy uses)")


def fail(prog, message):
    """One line on stderr, exit status 1: a failure that is not a usage error."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.exit(1)


def _fp32_precision_api():
    """True where PyTorch has the fp32_precision settings (2.9 and later). Mixing them with the
    allow_tf32 flags can raise, so only one of the two is used. PyTorch 1.13 raises
    AssertionError, not AttributeError, for an unknown torch.backends.cuda.matmul attribute."""
    try:
        return (isinstance(torch.backends.cuda.matmul.fp32_precision, str)
                and isinstance(torch.backends.cudnn.conv.fp32_precision, str))
    except (AttributeError, AssertionError):
        return False


def set_tf32(on):
    """TF32 on or off for fp32 matmuls and cuDNN convolutions alike."""
    if _fp32_precision_api():
        torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
        torch.backends.cudnn.conv.fp32_precision = "tf32" if on else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on


def setup(args, prog):
    """Checks the device and applies --tf32 and --cudnn-benchmark; returns the torch.device.
    --device cuda without a usable GPU fails here, before any work."""
    if args.device == "cuda" and not torch.cuda.is_available():
        built = torch.version.cuda or "none: a CPU-only build"
        fail(prog, f"--device cuda: no usable CUDA device (torch.cuda.is_available() is False; "
                   f"torch {torch.__version__}, CUDA {built})")
    set_tf32(args.tf32 == "on")
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    return torch.device(args.device)


def grad_scaler():
    """PyTorch's loss scaler for fp16 on CUDA, by the name of the running version: torch.amp's
    since 2.3 (torch.cuda.amp's then warns that it is deprecated), torch.cuda.amp's before."""
    scaler_class = getattr(getattr(torch, "amp", None), "GradScaler", None)
    return scaler_class("cuda") if scaler_class is not None else torch.cuda.amp.GradScaler()


def synchronize(device):
    """Waits for the device's queued work: call it on both ends of a timed region."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def openblas_core():
    """The kernels of the OpenBLAS that torch runs its CPU matrix products in ("Haswell",
    "SkylakeX", ...), or None for another BLAS. A machine's environment may pin them
    (OPENBLAS_CORETYPE): the benchmarks run PyTorch without such a pin and record what it ran."""
    for name in ("blas", "openblas"):
        path = ctypes.util.find_library(name)
        if not path:
            continue
        try:
            corename = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        corename.restype = ctypes.c_char_p
        return corename().decode()
    return None


def facts(args, device):
    """What the JSON records about the device, the libraries and the settings, as read back."""
    if _fp32_precision_api():
        tf32_read = {"tf32_api": "fp32_precision",
                     "matmul_fp32_precision": torch.backends.cuda.matmul.fp32_precision,
                     "cudnn_conv_fp32_precision": torch.backends.cudnn.conv.fp32_precision}
    else:
        tf32_read = {"tf32_api": "allow_tf32",
                     "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                     "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    return {
        "device": device.type,
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else platform.processor() or platform.machine()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "tf32": args.tf32,
        **tf32_read,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "blas_core": openblas_core(),
    }
