#!/usr/bin/python3
"""Independent PyTorch (fp64 autograd) reference for anelab's LoRA training (tests/train/test_lora.cpp).

The base model is train_reference.py's Llama (the files it reads: DIR/config.json, DIR/weights/<name>.npy,
DIR/batches.npy), here in float64 with every base tensor frozen (requires_grad False). The adapters are
DIR/lora/layers.N.T.lora_A.npy [r, in] and .lora_B.npy [out, r] for T in q k v o gate up down, with
config["optim"]["lora"] = {"rank", "alpha"}. A targeted projection y = x W^T + (alpha/r) * (x A^T) B^T equals
x (W + (alpha/r) B A)^T, so the reference differentiates through the effective weight W + (alpha/r) B·A (no
dropout: the tests run with --lora-dropout 0) and autograd gives dA and dB without any hand-written backward.
With config["optim"]["lora"]["base_compute"] = "bf16" (`--lora-compute bf16`) the base's products are apart from the
adapters' and take their operands rounded to bf16 (the activation through fp32, as anelab holds it): y = bf16(x)
bf16(W)^T + (alpha/r) (x A^T) B^T forward, dx = bf16(dy) bf16(W) backward (the adapters' products stay fp64); the
embedding rows are read exactly, the classifier (tied: the embedding table) is a base product.
  mode "grads": DIR/out/loss.npy [1] and DIR/out/grad.<adapter name>.npy for the first micro-batch;
  mode "train": DIR/out/losses.npy [steps] after `steps` torch.optim.AdamW steps on the adapters only (weight
                decay on every adapter, as HF Trainer / PEFT do), warmup + cosine schedule, clip_grad_norm_,
                `accum` micro-batches per step; DIR/out/final.<adapter name>.npy.
Usage: lora_reference.py DIR grads|train
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_reference  # noqa: E402  (the base model and the schedule)

torch.set_num_threads(1)

TARGETS = {"q": "wq", "k": "wk", "v": "wv", "o": "wo", "gate": "w1", "up": "w3", "down": "w2"}
BASE_PRODUCTS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")


def to_bf16(t):
    """t rounded to bf16 (nearest even) through fp32, back in t's dtype."""
    return t.to(torch.float32).to(torch.bfloat16).to(t.dtype)


class Bf16Product(torch.autograd.Function):
    """y = bf16(x) bf16(W)^T; dx = bf16(dy) bf16(W); W frozen (no gradient)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return to_bf16(x) @ to_bf16(w).T

    @staticmethod
    def backward(ctx, dy):
        (w,) = ctx.saved_tensors
        return to_bf16(dy) @ to_bf16(w), None


class Bf16Base:
    """A base matrix whose products with it (x @ m.T) are Bf16Product plus the adapter's delta in fp64; rows of it
    (m[tokens], the embedding) are the exact values."""

    def __init__(self, base, delta):
        self.base, self.delta = base, delta

    @property
    def T(self):
        return self

    def __getitem__(self, idx):
        return self.base[idx]

    def __rmatmul__(self, x):
        y = Bf16Product.apply(x, self.base)
        return y if self.delta is None else y + x @ self.delta.T


class LoraLlama(train_reference.Llama):
    def __init__(self, cfg, weights, adapters, scale, bf16=False):
        super().__init__(cfg, weights)
        self.bf16 = bf16
        for p in self.p.values():
            p.data = p.data.double()
            p.requires_grad_(False)
        self.scale = scale
        self.a = torch.nn.ParameterDict()
        self.adapted = {}  # base tensor name -> adapter name prefix
        for name, arr in adapters.items():
            self.a[name.replace(".", "__")] = torch.nn.Parameter(torch.tensor(arr, dtype=torch.float64))
            if name.endswith(".lora_A"):
                layer, target = name.split(".")[1], name.split(".")[2]
                self.adapted["layers.%s.%s" % (layer, TARGETS[target])] = name[: -len(".lora_A")]

    def adapter(self, name):
        return self.a[name.replace(".", "__")]

    def w(self, name):
        base = self.p[name.replace(".", "__")]
        pre = self.adapted.get(name)
        delta = None if pre is None else self.scale * (self.adapter(pre + ".lora_B") @ self.adapter(pre + ".lora_A"))
        if self.bf16 and (name.split(".")[-1] in BASE_PRODUCTS or name in ("output", "tok_embeddings")):
            return Bf16Base(base, delta)
        return base if delta is None else base + delta


def main():
    d, mode = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(d, "config.json")))
    names = cfg["tensors"]
    weights = {n: np.load(os.path.join(d, "weights", n + ".npy")) for n in names}
    lora_dir = os.path.join(d, "lora")
    anames = sorted(f[: -len(".npy")] for f in os.listdir(lora_dir))
    adapters = {n: np.load(os.path.join(lora_dir, n + ".npy")) for n in anames}
    lc = cfg["optim"]["lora"]
    model = LoraLlama(cfg, weights, adapters, lc["alpha"] / lc["rank"], lc.get("base_compute", "fp32") == "bf16")
    batches = torch.tensor(np.load(os.path.join(d, "batches.npy"))).long()
    out = os.path.join(d, "out")
    os.makedirs(out, exist_ok=True)
    params = [model.adapter(n) for n in anames]
    if mode == "grads":
        b = batches[0]
        loss = model(b[:, :-1], b[:, 1:])
        loss.backward()
        np.save(os.path.join(out, "loss.npy"), np.array([loss.item()], dtype=np.float64))
        for n in anames:
            np.save(os.path.join(out, "grad." + n + ".npy"), model.adapter(n).grad.numpy())
        return
    o = cfg["optim"]
    opt = torch.optim.AdamW(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                            weight_decay=o["weight_decay"], foreach=False)
    losses = []
    for step in range(o["steps"]):
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for a in range(o["accum"]):
            b = batches[step * o["accum"] + a]
            loss = model(b[:, :-1], b[:, 1:])
            (loss / o["accum"]).backward()
            total += loss.item()
        if o["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, o["grad_clip"])
        for g in opt.param_groups:
            g["lr"] = train_reference.lr_at(o, step)
        opt.step()
        losses.append(total / o["accum"])
    np.save(os.path.join(out, "losses.npy"), np.array(losses, dtype=np.float64))
    for n in anames:
        np.save(os.path.join(out, "final." + n + ".npy"), model.adapter(n).detach().numpy())


if __name__ == "__main__":
    main()
