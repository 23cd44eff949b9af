#!/usr/bin/env python3
"""One PyTorch row of tools/bench/gpu_vs_pytorch.sh: trains one workload with one set of settings
for --warmup-steps untimed and --steps timed steps, and prints one JSON line.

  torch_bench.py run --workload lenet|resnet18|resnet50|gpt2 [settings]
  torch_bench.py facts      the device, driver-side and library versions (one JSON line)

Workloads (the data lives on the device; no step reads anything back):
  lenet     tools/bench/lenet_pytorch.py's LeNet, 28x28x1, SGD lr 0.2 (no momentum); a pool of
            Fashion-MNIST's training images (random bytes of its shape without --data-dir),
            each step gathers its batch from a per-pass random permutation on the device.
  resnet18  tools/bench/resnet18_pytorch.py's net (Alloy's CIFAR-style stem), 28x28x1, 10 classes,
            SGD lr 0.01 momentum 0.9; one random uint8 batch kept on the device.
  resnet50  torchvision.models.resnet50() (the same architecture written out here where
            torchvision is missing; the record says which), --image-size (224) x3, 1000
            classes, SGD lr 0.1 momentum 0.9; one random uint8 batch kept on the device.
  gpt2      GPT-2 124M as nanoGPT's model.py writes it (12 layers, 12 heads, 768 wide, context
            --block-size 1024, --vocab 50257 or 50304, biases, tied embeddings, GPT-2's init),
            random tokens on the device, AdamW lr 6e-4 betas 0.9/0.95 weight decay 0.1 on the
            matrices (nanoGPT's configure_optimizers).
The image workloads normalise the uint8 batch to [0, 1] inside the step.

Settings: --precision fp32 | fp16 (autocast + GradScaler) | bf16 (autocast, no scaler);
--tf32 default (leave PyTorch's settings: cuDNN convolutions TF32, matmuls highest) | off | on;
--cudnn-benchmark on|off; --layout nchw|channels-last; --optimizer default (PyTorch's choice:
foreach on CUDA) | fused; --compile none|default|max-autotune|reduce-overhead (torch.compile of
the model: forward and backward; the optimizer step stays eager); --cuda-graph (the whole step,
forward, backward and optimizer step, captured by hand in a torch.cuda.CUDAGraph after warm-up
on a side stream, static input buffers, autocast's cache off as capture requires, AdamW
capturable). A row whose settings this machine cannot run (no CUDA, no torch.compile, no fused
optimizer, no bf16) prints status "skipped" with the reason and exits 0: never a figure.

Timing: the warm-up steps (compilation, cuDNN's benchmark, graph capture) are timed apart
(compile_seconds: the first step; warmup_seconds: all of them) under --compile-cap seconds: past
it the row prints status "compile-cap" and exits 3 (SIGALRM: the cap interrupts compilation).
Then --steps steps from a synchronised device to a synchronised device: images_per_second or
tokens_per_second. final_loss is read after the timed steps (a NaN voids the figure).
"""

import argparse
import contextlib
import inspect
import json
import math
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:
    sys.exit(f"torch_bench.py: error: cannot import torch ({error}); pass --python PATH of a "
             "Python with PyTorch")

import torch_device  # noqa: E402  (beside this file)

# Dense fp16/bf16 tensor-core peak of an H100/H200 SXM, FLOP/s: the denominator of every
# share-of-peak and MFU figure.
PEAK_FLOPS = 989.4e12
# ResNet-50 training FLOPs per 224x224 image: 3 x the forward's 4.1 GFLOP.
RESNET50_TRAIN_FLOPS_PER_IMAGE = 3 * 4.1e9


class CompileCap(Exception):
    pass


# --- models ------------------------------------------------------------------------------------

class Bottleneck(nn.Module):
    """torchvision's ResNet-50 bottleneck (stride on the 3x3 convolution, v1.5)."""

    def __init__(self, in_channels, width, stride):
        super().__init__()
        out_channels = width * 4
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride,
                                                      bias=False), nn.BatchNorm2d(out_channels))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, in_channels = [], 64
        for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
            stride = 1 if stage == 0 else 2
            stage_blocks = []
            for i in range(blocks):
                stage_blocks.append(Bottleneck(in_channels, width, stride if i == 0 else 1))
                in_channels = width * 4
            layers.append(nn.Sequential(*stage_blocks))
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50():
    """torchvision's model where it is installed, else the same architecture from above."""
    try:
        import torchvision
    except ImportError:
        return ResNet50(), "tools/bench/torch_bench.py ResNet50 (no torchvision)"
    return torchvision.models.resnet50(), f"torchvision {torchvision.__version__} resnet50()"


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.sdpa = hasattr(F, "scaled_dot_product_attention")

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch before 2.0: nanoGPT's manual attention
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, block_size, n_layer=12, n_head=12, n_embd=768):
        super().__init__()
        self.n_layer, self.n_embd = n_layer, n_embd
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # tied
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, 0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

    def non_embedding_params(self):
        """nanoGPT's get_num_params(): every parameter but the position embedding (the token
        embedding is the output layer's weight too)."""
        return sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


# --- settings ----------------------------------------------------------------------------------

def has_parameter(cls, name):
    try:
        return name in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def skip_reason(args):
    """Why this machine cannot run the row as asked, or None."""
    cuda_needs = [what for what, needed in (
        (f"{args.precision} autocast", args.precision != "fp32"),
        ("cudnn.benchmark", args.cudnn_benchmark == "on"),
        ("TF32", args.tf32 == "on"),
        ("a fused optimizer", args.optimizer == "fused"),
        (f"torch.compile mode {args.compile}", args.compile != "none"),
        ("a CUDA graph", args.cuda_graph)) if needed]
    if args.device != "cuda" and cuda_needs:
        return f"needs CUDA ({', '.join(cuda_needs)}); this run is on the CPU"
    if args.device == "cuda" and not torch.cuda.is_available():
        return f"no usable CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda})"
    if args.compile != "none" and not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    optimizer = torch.optim.AdamW if args.workload == "gpt2" else torch.optim.SGD
    if args.optimizer == "fused" and not has_parameter(optimizer, "fused"):
        return f"torch {torch.__version__}'s {optimizer.__name__} has no fused=True"
    if args.precision == "bf16" and args.device == "cuda" and not torch.cuda.is_bf16_supported():
        return f"{torch.cuda.get_device_name(0)} does not support bf16"
    if args.cuda_graph and args.compile != "none":
        return "--cuda-graph and --compile are separate rows"
    return None


def set_tf32(mode):
    """default leaves PyTorch's own setting; off and on set matmuls and convolutions alike."""
    if mode != "default":
        torch_device.set_tf32(mode == "on")


def make_optimizer(args, model):
    extra = {}
    if args.optimizer == "fused":
        extra["fused"] = True
    if args.cuda_graph and args.workload == "gpt2":
        extra["capturable"] = True  # AdamW's step count lives on the device inside a graph
    if args.workload == "gpt2":
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **extra)
    lr, momentum = {"lenet": (0.2, 0.0), "resnet18": (0.01, 0.9), "resnet50": (0.1, 0.9)}[
        args.workload]
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, **extra)


def image_data(args, device, generator):
    """(uint8 pool [N, C, H, W] on the device, labels, source): the batches come from it."""
    if args.workload == "lenet":
        source = "random bytes of Fashion-MNIST's shape"
        try:
            import lenet_pytorch
            images = lenet_pytorch.read_idx(
                lenet_pytorch.find(args.data_dir, "train-images-idx3-ubyte"), 0x803).unsqueeze(1)
            labels = lenet_pytorch.read_idx(
                lenet_pytorch.find(args.data_dir, "train-labels-idx1-ubyte"), 0x801).long()
            source = f"the IDX files in {args.data_dir}"
        except (OSError, ValueError):
            count = args.pool or 60000
            images = torch.randint(0, 256, (count, 1, 28, 28), dtype=torch.uint8,
                                   generator=generator)
            labels = torch.randint(0, 10, (count,), generator=generator)
        if args.pool:
            images, labels = images[:args.pool], labels[:args.pool]
        return images.to(device), labels.to(device), source
    channels, size, classes = ((1, 28, 10) if args.workload == "resnet18"
                               else (3, args.image_size, 1000))
    images = torch.randint(0, 256, (args.batch_size, channels, size, size), dtype=torch.uint8,
                           generator=generator)
    labels = torch.randint(0, classes, (args.batch_size,), generator=generator)
    return images.to(device), labels.to(device), "one random uint8 batch"


def build(args, device):
    """(model, batches: a function of the step giving the step's inputs, facts about both)."""
    generator = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    facts = {}
    if args.workload == "gpt2":
        model = GPT(args.vocab, args.block_size)
        facts.update(model="GPT-2 124M (nanoGPT's model.py)", vocab=args.vocab,
                     block_size=args.block_size, params=sum(p.numel() for p in model.parameters()),
                     non_embedding_params=model.non_embedding_params(),
                     attention="F.scaled_dot_product_attention(is_causal=True)"
                     if model.h[0].attn.sdpa else f"manual (no SDPA in torch {torch.__version__})")
        pool = torch.randint(0, args.vocab, (4 * args.batch_size, args.block_size + 1),
                             generator=generator).to(device)

        def batches(step):
            first = (step % 4) * args.batch_size
            chunk = pool[first:first + args.batch_size]
            return chunk[:, :-1], chunk[:, 1:]
        return model.to(device), batches, facts
    if args.workload == "lenet":
        import lenet_pytorch
        model, facts["model"] = lenet_pytorch.LeNet(), "tools/bench/lenet_pytorch.py LeNet"
    elif args.workload == "resnet18":
        import resnet18_pytorch
        model, facts["model"] = resnet18_pytorch.ResNet18(), "tools/bench/resnet18_pytorch.py"
    else:
        model, facts["model"] = resnet50()
    layout = torch.channels_last if args.layout == "channels-last" else torch.contiguous_format
    model = model.to(device=device, memory_format=layout)
    images, labels, facts["data"] = image_data(args, device, generator)
    images = images.contiguous(memory_format=layout)
    n = images.shape[0]
    steps_per_pass = max(1, n // args.batch_size)
    state = {"order": None}

    def batches(step):
        if n == args.batch_size:
            return images, labels
        if step % steps_per_pass == 0:
            state["order"] = torch.randperm(n, device=device)
        first = (step % steps_per_pass) * args.batch_size
        index = state["order"][first:first + args.batch_size]
        return images[index], labels[index]
    return model, batches, facts


# --- the step ----------------------------------------------------------------------------------

def make_step(args, model, optimizer, device):
    """The training step as a function of the step's inputs; returns the loss tensor."""
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    scaler = torch_device.grad_scaler() if args.precision == "fp16" else None
    image = args.workload != "gpt2"
    forward = model
    if args.compile != "none":
        forward = torch.compile(model, **({} if args.compile == "default"
                                          else {"mode": args.compile}))
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

    def autocast():
        if half is None:
            return contextlib.nullcontext()
        # A CUDA graph cannot capture autocast's cache of cast weights.
        return torch.autocast("cuda", dtype=half, cache_enabled=not args.cuda_graph)

    def step(x, y):
        if image:
            x = x.float().mul_(1.0 / 255.0)  # keeps the memory format
        if args.compile == "reduce-overhead" and mark_step is not None:
            mark_step()
        with autocast():
            loss = F.cross_entropy(forward(x), y) if image else forward(x, y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return step, scaler


def run_row(args):
    device = torch.device(args.device)
    set_tf32(args.tf32)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark == "on"
    model, batches, facts = build(args, device)
    model.train()
    optimizer = make_optimizer(args, model)
    step, scaler = make_step(args, model, optimizer, device)
    if args.cuda_graph:
        x0, y0 = batches(0)
        static_x, static_y = x0.clone(), y0.clone()
        graph = torch.cuda.CUDAGraph()

        def run(i):
            x, y = batches(i)
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            return static_loss
    else:
        def run(i):
            return step(*batches(i))

    alarm = {"fired": False}

    def on_alarm(signum, frame):
        alarm["fired"] = True
        raise CompileCap()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(args.compile_cap)))
    started = time.perf_counter()
    try:
        if args.cuda_graph:
            # PyTorch's whole-network capture recipe: warm up on a side stream (the optimizer's
            # state is created there), then capture one step into the graph's memory pool.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step(static_x, static_y)
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                static_loss = step(static_x, static_y)
        run(0)
        torch_device.synchronize(device)
        compile_seconds = time.perf_counter() - started
        for i in range(1, args.warmup_steps):
            run(i)
        torch_device.synchronize(device)
    except Exception:  # noqa: BLE001  (torch.compile wraps what the alarm raised)
        if not alarm["fired"]:
            raise
        return {"status": "compile-cap", "reason": f"warm-up (compilation) past the cap of "
                f"{args.compile_cap:g} s", "compile_cap_seconds": args.compile_cap, **facts}
    finally:
        signal.alarm(0)
    warmup_seconds = time.perf_counter() - started
    begin = time.perf_counter()
    for i in range(args.warmup_steps, args.warmup_steps + args.steps):
        loss = run(i)
    torch_device.synchronize(device)
    seconds = time.perf_counter() - begin
    record = {"status": "ok", "compile_seconds": compile_seconds,
              "warmup_seconds": warmup_seconds, "timed_steps": args.steps,
              "step_ms": 1000 * seconds / args.steps, "final_loss": loss.float().item(),
              "loss_scale": scaler.get_scale() if scaler is not None else None, **facts}
    if not math.isfinite(record["final_loss"]):
        record.update(status="failed", reason=f"final loss {record['final_loss']}")
    if args.workload == "gpt2":
        tokens = args.steps * args.batch_size * args.block_size / seconds
        per_token = (6 * facts["non_embedding_params"]
                     + 12 * model.n_layer * model.n_embd * args.block_size)
        record.update(tokens_per_second=tokens, flops_per_token=per_token,
                      mfu=per_token * tokens / PEAK_FLOPS)
    else:
        images = args.steps * args.batch_size / seconds
        record["images_per_second"] = images
        if args.workload == "resnet50" and args.image_size == 224:
            record["share_of_peak"] = images * RESNET50_TRAIN_FLOPS_PER_IMAGE / PEAK_FLOPS
    if device.type == "cuda":
        record["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    return record


def settings(args):
    return {key: getattr(args, key) for key in (
        "workload", "device", "batch_size", "precision", "tf32", "cudnn_benchmark", "layout",
        "optimizer", "compile", "cuda_graph", "warmup_steps", "steps", "image_size", "vocab",
        "block_size", "seed")}


def library_facts(device_type):
    tf32 = {}
    if torch_device._fp32_precision_api():
        tf32 = {"matmul_fp32_precision": torch.backends.cuda.matmul.fp32_precision,
                "cudnn_conv_fp32_precision": torch.backends.cudnn.conv.fp32_precision}
    else:
        tf32 = {"matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    cuda = device_type == "cuda" and torch.cuda.is_available()
    return {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "gpu": torch.cuda.get_device_name(0) if cuda else None,
            "cudnn_benchmark_read": torch.backends.cudnn.benchmark,
            "float32_matmul_precision": float32_matmul_precision(), **tf32}


def float32_matmul_precision():
    """torch.get_float32_matmul_precision(), or None where there is none or it refuses to say
    (PyTorch 2.9 and later raise once the fp32_precision settings have been used)."""
    try:
        return torch.get_float32_matmul_precision()
    except (AttributeError, RuntimeError):
        return None


def facts_command(args):
    driver = None
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    facts = library_facts(args.device)
    try:
        import torchvision
        facts["torchvision"] = torchvision.__version__
    except ImportError:
        facts["torchvision"] = None
    facts.update(driver=driver, cuda_available=torch.cuda.is_available(),
                 has_compile=hasattr(torch, "compile"),
                 sgd_fused=has_parameter(torch.optim.SGD, "fused"),
                 adamw_fused=has_parameter(torch.optim.AdamW, "fused"),
                 sdpa=hasattr(F, "scaled_dot_product_attention"))
    print(json.dumps(facts), flush=True)


def main():
    parser = torch_device.Parser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    facts = commands.add_parser("facts")
    facts.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    run = commands.add_parser("run")
    run.add_argument("--workload", choices=("lenet", "resnet18", "resnet50", "gpt2"),
                     required=True)
    run.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    run.add_argument("--batch-size", type=int, required=True)
    run.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    run.add_argument("--tf32", choices=("default", "off", "on"), default="default")
    run.add_argument("--cudnn-benchmark", choices=("on", "off"), default="off")
    run.add_argument("--layout", choices=("nchw", "channels-last"), default="nchw")
    run.add_argument("--optimizer", choices=("default", "fused"), default="default")
    run.add_argument("--compile", choices=("none", "default", "max-autotune", "reduce-overhead"),
                     default="none")
    run.add_argument("--cuda-graph", action="store_true")
    run.add_argument("--warmup-steps", type=int, default=10)
    run.add_argument("--steps", type=int, default=30)
    run.add_argument("--compile-cap", type=float, default=300.0)
    run.add_argument("--image-size", type=int, default=224, help="resnet50's")
    run.add_argument("--vocab", type=int, default=50257, help="gpt2's")
    run.add_argument("--block-size", type=int, default=1024, help="gpt2's context")
    run.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist", help="lenet's")
    run.add_argument("--pool", type=int, default=0,
                     help="lenet: use only the first N training images (0: all)")
    run.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    run.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.command == "facts":
        facts_command(args)
        return
    if args.batch_size < 1 or args.steps < 1 or args.warmup_steps < 1:
        parser.error("--batch-size, --steps and --warmup-steps must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    reason = skip_reason(args)
    record = {"framework": "pytorch", **settings(args)}
    if reason is not None:
        record.update(status="skipped", reason=reason, **library_facts(args.device))
        print(json.dumps(record), flush=True)
        return
    try:
        record.update(run_row(args))
    except Exception as error:  # noqa: BLE001  (the row's record says what failed)
        record.update(status="failed", reason=f"{type(error).__name__}: {error}"[:2000])
    record.update(library_facts(args.device))
    print(json.dumps(record), flush=True)
    sys.stdout.flush()
    # Compile workers may linger; leave without waiting for them.
    os._exit({"ok": 0, "skipped": 0, "compile-cap": 3}.get(record["status"], 1))


if __name__ == "__main__":
    main()
