#!/usr/bin/python3
"""PyTorch fp32 training-step time for `anelab train --bench` / `anelab bench train`.

Builds the Llama model of the named preset (same shapes as models/presets.cpp; random init),
then times forward + cross-entropy + backward + AdamW steps on one batch of random tokens.
Prints one JSON line: {"preset", "batch", "seq", "threads", "ms_per_step", "steps"}.
"""
import argparse
import json
import math
import time

import torch

PRESETS = {  # dim, hidden, layers, heads, kv_heads, vocab
    "stories260k": (64, 172, 5, 8, 4, 512),
    "stories15m": (288, 768, 6, 6, 6, 32000),
    "stories110m": (768, 2048, 12, 12, 12, 32000),
}


class Block(torch.nn.Module):
    def __init__(self, d, f, h, kv):
        super().__init__()
        self.h, self.kv, self.hd = h, kv, d // h
        self.wq = torch.nn.Linear(d, d, bias=False)
        self.wk = torch.nn.Linear(d, kv * self.hd, bias=False)
        self.wv = torch.nn.Linear(d, kv * self.hd, bias=False)
        self.wo = torch.nn.Linear(d, d, bias=False)
        self.w1 = torch.nn.Linear(d, f, bias=False)
        self.w2 = torch.nn.Linear(f, d, bias=False)
        self.w3 = torch.nn.Linear(d, f, bias=False)
        self.n1 = torch.nn.Parameter(torch.ones(d))
        self.n2 = torch.nn.Parameter(torch.ones(d))

    @staticmethod
    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def forward(self, x, cos, sin, mask):
        B, T, D = x.shape
        xn = self.norm(x, self.n1)
        q = self.wq(xn).view(B, T, self.h, self.hd)
        k = self.wk(xn).view(B, T, self.kv, self.hd)
        v = self.wv(xn).view(B, T, self.kv, self.hd)
        f = torch.complex(cos, sin)[None, :, None, :]
        q = torch.view_as_real(torch.view_as_complex(q.reshape(B, T, self.h, -1, 2)) * f).flatten(3)
        k = torch.view_as_real(torch.view_as_complex(k.reshape(B, T, self.kv, -1, 2)) * f).flatten(3)
        rep = self.h // self.kv
        k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        a = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(self.hd) + mask, -1) @ v
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, D))
        xn = self.norm(x, self.n2)
        return x + self.w2(torch.nn.functional.silu(self.w1(xn)) * self.w3(xn))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="stories110m")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    d, f, L, h, kv, V = PRESETS[a.preset]
    emb = torch.nn.Embedding(V, d)
    blocks = torch.nn.ModuleList([Block(d, f, h, kv) for _ in range(L)])
    norm = torch.nn.Parameter(torch.ones(d))
    params = list(emb.parameters()) + list(blocks.parameters()) + [norm]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    hd = d // h
    ang = torch.arange(a.seq)[:, None].double() * (10000.0 ** (-2.0 * torch.arange(hd // 2).double() / hd))[None]
    cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
    mask = torch.full((a.seq, a.seq), float("-inf")).triu(1)
    tok = torch.randint(0, V, (a.batch, a.seq + 1))
    times = []
    for i in range(a.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        x = emb(tok[:, :-1])
        for b in blocks:
            x = b(x, cos, sin, mask)
        logits = Block.norm(x, norm) @ emb.weight.T
        loss = torch.nn.functional.cross_entropy(logits.view(-1, V), tok[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        if i > 0:
            times.append((time.perf_counter() - t0) * 1000)
    print(json.dumps({"preset": a.preset, "batch": a.batch, "seq": a.seq, "threads": a.threads,
                      "ms_per_step": sum(times) / len(times), "steps": a.steps}))


if __name__ == "__main__":
    main()
