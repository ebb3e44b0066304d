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
p.add_argument("--model", choices=["mlp", "cnn"], required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch-size", type=int, default=128)
p.add_argument("--device", default="cpu", help="cpu or cuda")
a = p.parse_args()
torch.set_num_threads(os.cpu_count())
torch.manual_seed(1)

x, y = train_set()
dev = torch.device(a.device)
x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1).to(dev)  # NCHW
y = torch.from_numpy(y).to(dev)

if a.model == "mlp":
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
else:
    net = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
net = net.to(dev)
opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.004, eps=1e-7)
loss_fn = nn.CrossEntropyLoss()
times = []
for epoch in range(a.epochs):
    perm = torch.randperm(len(x), device=dev)
    xs, ys = x[perm], y[perm]
    t = time.perf_counter()
    for i in range(0, len(xs), a.batch_size):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(xs[i:i + a.batch_size]), ys[i:i + a.batch_size])
        loss.backward()
        opt.step()
    loss.item()
    times.append(time.perf_counter() - t)
sps = [len(x) / t for t in times[1:]]
print(json.dumps({"framework": "pytorch", "device": a.device, "version": torch.__version__, "model": a.model,
                  "samples_per_second": float(np.mean(sps)), "epochs_timed": len(sps)}))
