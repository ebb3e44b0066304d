"""PyTorch: a plain training loop over pre-shuffled tensors (AdamW with Keras' defaults: lr 1e-3,
weight_decay 0.004, eps 1e-7). Prints one JSON line with training samples/s over epochs 2..."""
import argparse
import json
import os
import time

import numpy as np
import torch
from torch import nn

from fashion_mnist import train_set

p = argparse.ArgumentParser()
p.add_argument("--model", choices=["mlp", "cnn", "resnet-small", "lstm", "transformer"], required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch-size", type=int, default=128)
p.add_argument("--device", default="cpu", help="cpu or cuda")
p.add_argument("--take", type=int, default=None, help="train on the first N images")
p.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16", "mixed_float16"],
               help="float32, mixed_bfloat16 (autocast to bfloat16) or mixed_float16 (autocast to float16 "
                    "with a GradScaler, PyTorch's AMP recipe; CUDA only)")
a = p.parse_args()
torch.set_num_threads(os.cpu_count())
torch.manual_seed(1)

x, y = train_set()
x, y = x[:a.take], y[:a.take]
dev = torch.device(a.device)
x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1).to(dev)  # NCHW
y = torch.from_numpy(y).to(dev)



def conv_bn(cin, cout, k):
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2, bias=False),
                         nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01))


class ResNetSmall(nn.Module):
    """bench/configs/resnet-small.toml: a stem and two residual blocks, GAP, Linear logits."""

    def __init__(self):
        super().__init__()
        self.stem = conv_bn(1, 32, 3)
        self.b1 = nn.Sequential(conv_bn(32, 32, 3), nn.ReLU(), conv_bn(32, 32, 3))
        self.b2 = nn.Sequential(conv_bn(32, 64, 3), nn.ReLU(), conv_bn(64, 64, 3))
        self.proj = nn.Conv2d(32, 64, 1, bias=False)
        self.out = nn.Linear(64, 10)

    def forward(self, t):
        t = torch.relu(self.stem(t))
        t = nn.functional.max_pool2d(torch.relu(t + self.b1(t)), 2)
        t = torch.relu(self.proj(t) + self.b2(t))
        return self.out(t.mean(dim=(2, 3)))


class Lstm(nn.Module):
    """bench/configs/lstm.toml: 28 rows of 28 pixels as a sequence, LSTM(128), Linear logits."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(28, 128, batch_first=True)
        self.out = nn.Linear(128, 10)

    def forward(self, t):
        seq, _ = self.lstm(t.squeeze(1))
        return self.out(seq[:, -1])


class Transformer(nn.Module):
    """bench/configs/transformer.toml: 28 rows as steps, Linear(64), two post-norm encoder
    blocks (4 heads, feed-forward 128, relu, LayerNorm eps 1e-5, no dropout), mean, logits."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(28, 64)
        block = lambda: nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, layer_norm_eps=1e-5, batch_first=True)
        self.blocks = nn.Sequential(block(), block())
        self.out = nn.Linear(64, 10)

    def forward(self, t):
        return self.out(self.blocks(self.proj(t.squeeze(1))).mean(dim=1))


if a.model == "mlp":
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
elif a.model == "resnet-small":
    net = ResNetSmall()
elif a.model == "lstm":
    net = Lstm()
elif a.model == "transformer":
    net = Transformer()
else:
    net = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
net = net.to(dev)
opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.004, eps=1e-7)
loss_fn = nn.CrossEntropyLoss()
half = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}.get(a.precision)
scaler = torch.amp.GradScaler(dev.type, enabled=a.precision == "mixed_float16")
times = []
for epoch in range(a.epochs):
    perm = torch.randperm(len(x), device=dev)
    xs, ys = x[perm], y[perm]
    t = time.perf_counter()
    for i in range(0, len(xs), a.batch_size):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=half or torch.float32, enabled=half is not None):
            logits = net(xs[i:i + a.batch_size])
        loss = loss_fn(logits.float(), ys[i:i + a.batch_size])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    loss.item()
    times.append(time.perf_counter() - t)
sps = [len(x) / t for t in times[1:]]
print(json.dumps({"framework": "pytorch", "device": a.device, "version": torch.__version__, "model": a.model,
                  "precision": a.precision, "samples_per_second": float(np.mean(sps)), "epochs_timed": len(sps),
                  **({"peak_allocated_mib": torch.cuda.max_memory_allocated() / 2**20} if dev.type == "cuda" else {})}))
