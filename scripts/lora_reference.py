#!/usr/bin/python3
"""Independent PyTorch (fp64 autograd) reference for anelab's LoRA training (tests/train/test_lora.cpp).

The base model is train_reference.py's Llama (the files it reads: DIR/config.json, DIR/weights/<name>.npy,
DIR/batches.npy), here in float64 with every base tensor frozen (requires_grad False). The adapters are
DIR/lora/layers.N.T.lora_A.npy [r, in] and .lora_B.npy [out, r] for T in q k v o gate up down, with
config["optim"]["lora"] = {"rank", "alpha"}. A targeted projection y = x W^T + (alpha/r) * (x A^T) B^T equals
x (W + (alpha/r) B A)^T, so the reference differentiates through the effective weight W + (alpha/r) B·A (no
dropout: the tests run with --lora-dropout 0) and autograd gives dA and dB without any hand-written backward.
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


class LoraLlama(train_reference.Llama):
    def __init__(self, cfg, weights, adapters, scale):
        super().__init__(cfg, weights)
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
        if pre is None:
            return base
        return base + self.scale * (self.adapter(pre + ".lora_B") @ self.adapter(pre + ".lora_A"))


def main():
    d, mode = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(d, "config.json")))
    names = cfg["tensors"]
    weights = {n: np.load(os.path.join(d, "weights", n + ".npy")) for n in names}
    lora_dir = os.path.join(d, "lora")
    anames = sorted(f[: -len(".npy")] for f in os.listdir(lora_dir))
    adapters = {n: np.load(os.path.join(lora_dir, n + ".npy")) for n in anames}
    lc = cfg["optim"]["lora"]
    model = LoraLlama(cfg, weights, adapters, lc["alpha"] / lc["rank"])
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
