"""The benchmark's models, recipes and data in PyTorch, shared by peers.py and three_workloads.py.
Not part of libtrain. Each mirrors libtrain's definition exactly:

  mnist        the MNIST CNN of PyTorch's examples (reference_mnist.Net), Adadelta lr 1.0, StepLR 0.7 per epoch
               (models/src/mnist_cnn.cpp, the `mnist` recipe)
  resnet18     ResNet-18, CIFAR variant (models/src/resnet18.cpp): SGD 0.1, Nesterov momentum 0.9, weight
               decay 5e-4, linear warm-up over 5% of the steps then cosine to 0, per step (the `resnet18` recipe)
  transformer  the pre-norm causal encoder of scripts/bench/transformer/encoder.h with an LM head, AdamW
               (torch's defaults but lr 5e-4), the same warm-up + cosine per step, on the generated
               "stride" sequences of scripts/bench/transformer/tokens.h
  gru          the GRU classifier of scripts/bench/gru/gru.h (one layer, hidden 32, a linear head on the
               last hidden state, 4 classes), AdamW (torch's defaults but lr 2e-3), the same warm-up +
               cosine per step, on the generated "sign" sequences of scripts/bench/gru/sequences.h
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_mnist import Net as MnistNet  # noqa: E402  (the existing Python MNIST peer's model)

WARMUP_FRACTION = 0.05  # resnet18, transformer and gru: the share of the run's steps that warm up linearly


# ---- ResNet-18, CIFAR variant (kuangliu/pytorch-cifar) ----

class BasicBlock(nn.Module):
    def __init__(self, cin, c, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != c:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for stage, c in enumerate((64, 128, 256, 512)):
            for b in range(2):
                blocks.append(BasicBlock(cin, c, 2 if stage > 0 and b == 0 else 1))
                cin = c
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---- the transformer ----

class Block(nn.Module):
    """Pre-norm: x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x)))); causal attention."""

    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Encoder(nn.Module):
    def __init__(self, layers, d, heads, ffn, seq, vocab):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads, ffn) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos.weight[: tokens.shape[1]]
        return self.head(self.ln_f(self.blocks(x)))


def transformer_params(layers, d, heads, ffn, seq, vocab):
    """(all parameters, parameters that do matmuls: all but the two embedding tables)."""
    del heads
    per_layer = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * ffn + ffn) + (ffn * d + d)
    matmul = layers * per_layer + 2 * d + d * vocab + vocab
    return matmul + vocab * d + seq * d, matmul


def transformer_flops_per_seq(layers, d, heads, ffn, seq, vocab):
    """Training FLOPs of one sequence: 6 * N * S + 12 * L * d * S^2, with N the parameters that do
    matmuls (embedding lookups do none), forward + backward, attention counted whole (as PaLM's
    MFU does, though a causal kernel skips half of it)."""
    _, n = transformer_params(layers, d, heads, ffn, seq, vocab)
    return 6 * n * seq + 12 * layers * d * seq * seq


def stride_sequences(n, seq, vocab, seed, strides=16):
    """n sequences of seq + 1 tokens: x_i = (x_0 + i * d) mod vocab with x_0 uniform and d uniform in
    1..min(strides, vocab - 1) per sequence; the rule is visible from the first two tokens. Returns
    (inputs [n, seq], targets [n, seq]) int64: the next-token task."""
    g = torch.Generator().manual_seed(seed)
    k = max(1, min(strides, vocab - 1))
    x0 = torch.randint(0, vocab, (n, 1), generator=g)
    d = torch.randint(1, k + 1, (n, 1), generator=g)
    s = (x0 + d * torch.arange(seq + 1)) % vocab
    return s[:, :-1].contiguous(), s[:, 1:].contiguous()


# ---- the recurrent model ----

GRU_CLASSES = 4  # the sign patterns of sign_sequences' rule


class GRUClassifier(nn.Module):
    """sequences [b, seq, features] -> class scores [b, 4]: a one-layer GRU (batch first) and a linear
    head on its last hidden state. torch's default initialisation, as gru.h's C++ module has."""

    def __init__(self, features, hidden):
        super().__init__()
        self.gru = nn.GRU(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, GRU_CLASSES)

    def forward(self, x):
        _, h = self.gru(x)
        return self.head(h[-1])


def gru_params(features, hidden):
    """All parameters: the GRU's three gates (input and hidden weights, two biases) and the head."""
    return 3 * hidden * (features + hidden + 2) + hidden * GRU_CLASSES + GRU_CLASSES


def sign_sequences(n, seq, features, seed):
    """n sequences of standard-normal features [n, seq, features] (float32) and their classes [n]
    (int64): 2 * [sum of feature 0 over the first half > 0] + [its sum over the second half > 0].
    The four classes are equally likely; a model must carry the first half's sign to the end."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, seq, features, generator=g)
    half = seq // 2
    first = x[:, :half, 0].sum(1) > 0
    second = x[:, half:, 0].sum(1) > 0
    return x, first.long() * 2 + second.long()


# ---- recipes ----

def warmup_cosine(base, step, total, warmup_fraction=WARMUP_FRACTION):
    """The rate of step `step` (0-based) of `total`: linear warm-up from 0, then cosine to 0."""
    warmup = max(1, int(warmup_fraction * total))
    # libtrain's train::warmup_cosine (transformers' get_cosine_schedule_with_warmup): the rate
    # after `step` steps, so the first step runs at 0.
    if step < warmup:
        return base * (step / warmup)
    t = min(max((step - warmup) / max(1, total - warmup), 0.0), 1.0)
    return base * (0.0 + (1 - 0.0) * 0.5 * (1.0 + math.cos(math.pi * t)))


class Workload:
    """A model, its loss, its optimizer (eager: torch.optim's defaults; graph: fused/capturable with
    a tensor lr) and its per-step rate."""

    def __init__(self, name, args):
        self.name, self.a = name, args
        if name == "transformer":
            self.dims = (args.layers, args.d_model, args.heads, args.ffn, args.seq_len, args.vocab)
        if name == "gru":
            self.dims = (args.features, args.hidden)

    def model(self):
        if self.name == "mnist":
            return MnistNet()
        if self.name == "resnet18":
            return ResNet18()
        if self.name == "gru":
            return GRUClassifier(*self.dims)
        return Encoder(*self.dims)

    def loss(self, out, y):
        if self.name == "mnist":
            return F.nll_loss(out, y)
        if self.name in ("resnet18", "gru"):
            return F.cross_entropy(out, y)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))

    def base_lr(self):
        if self.a.lr:
            return self.a.lr
        return {"mnist": 1.0, "resnet18": 0.1, "transformer": 5e-4, "gru": 2e-3}[self.name]

    def lr_at(self, step, total, steps_per_epoch):
        if self.name == "mnist":
            return self.base_lr() * 0.7 ** (step // max(1, steps_per_epoch))
        return warmup_cosine(self.base_lr(), step, total)

    def optimizer(self, params, graph, dev):
        """graph: the capturable kinds a CUDA graph can replay, with the rate in a device tensor."""
        lr = self.lr_at(0, 1, 1)
        cap = dev.type == "cuda"  # capturable needs CUDA; on the CPU (validation) it runs uncaptured
        if graph:
            lr = torch.tensor(lr, device=dev)
        if self.name == "mnist":
            return torch.optim.Adadelta(params, lr=lr, capturable=graph and cap)
        if self.name == "resnet18":
            return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4,
                                   fused=True if graph else None)
        if graph:
            return torch.optim.AdamW(params, lr=lr, fused=True, capturable=cap)
        return torch.optim.AdamW(params, lr=lr)

    def data(self, n, dev, seed):
        """n resident training samples on dev: random images (throughput doesn't depend on them; pass
        --data for the real files) or the transformer's and the GRU's generated sequences."""
        g = torch.Generator().manual_seed(seed)
        if self.name == "transformer":
            x, y = stride_sequences(n, self.a.seq_len, self.a.vocab, seed)
            return x.to(dev), y.to(dev)
        if self.name == "gru":
            x, y = sign_sequences(n, self.a.seq_len, self.a.features, seed)
            return x.to(dev), y.to(dev)
        shape = (n, 1, 28, 28) if self.name == "mnist" else (n, 3, 32, 32)
        x = torch.randn(shape, generator=g)
        y = torch.randint(0, 10, (n,), generator=g)
        return x.to(dev), y.to(dev)

    def flops_per_sample(self):
        return transformer_flops_per_seq(*self.dims) if self.name == "transformer" else None
