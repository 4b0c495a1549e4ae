#!/usr/bin/python3
"""PyTorch autograd references for the training kernels (tests/kernels/test_kernel_torch.cpp).

For each test shape, builds one Llama layer in float64 with plain PyTorch (Meta-style complex RoPE for
adjacent pairs, HF rotate_half otherwise, repeat_interleave GQA, explicit causal softmax attention), with fp16-exact
random inputs for a fixed seed, runs forward + autograd backward of L = sum(dy * out) and writes .npy
files (float64, channel-first [C, S] for activations, [out, in] for weights) to OUT/<shape>/.

  /usr/bin/python3 scripts/kernel_reference.py --out build/kernels_ref

Without torch it writes OUT/SKIPPED with the reason and exits 0 (the gtest then skips).
"""
import argparse
import math
import os
import sys

SHAPES = {
    # name: dim, hidden, heads, kv_heads, head_dim, seq, rope style
    "gqa": (64, 172, 8, 4, 8, 64, "adjacent"),
    "mha_rotate_half": (64, 128, 4, 4, 16, 64, "rotate_half"),
}


def rope_adjacent(x, theta):  # x [S, H, HD]; Meta llama: view pairs as complex numbers
    import torch
    S, H, HD = x.shape
    freqs = 1.0 / theta ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD)
    ang = torch.outer(torch.arange(S, dtype=torch.float64), freqs)
    rot = torch.polar(torch.ones_like(ang), ang)  # [S, HD/2]
    xc = torch.view_as_complex(x.reshape(S, H, HD // 2, 2).contiguous())
    return torch.view_as_real(xc * rot[:, None, :]).reshape(S, H, HD)


def rope_rotate_half(x, theta):  # HF transformers apply_rotary_pos_emb
    import torch
    S, H, HD = x.shape
    inv = 1.0 / theta ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD)
    f = torch.outer(torch.arange(S, dtype=torch.float64), inv)
    emb = torch.cat([f, f], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def rms(x, w, eps):  # x [S, D]
    import torch
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def f16(t):
    import torch
    return t.to(torch.float16).to(torch.float64)


def make(name, dim, hidden, heads, kvh, hd, seq, style, out_dir, seed):
    import numpy as np
    import torch
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(seed)

    def u(shape, a):
        return f16((torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) * a)

    qd, kvd = heads * hd, kvh * hd
    W = {
        "wq": u((qd, dim), 2 / math.sqrt(dim)), "wk": u((kvd, dim), 2 / math.sqrt(dim)),
        "wv": u((kvd, dim), 1 / math.sqrt(dim)), "wo": u((dim, qd), 1 / math.sqrt(qd)),
        "w1": u((hidden, dim), 1 / math.sqrt(dim)), "w3": u((hidden, dim), 1 / math.sqrt(dim)),
        "w2": u((dim, hidden), 1 / math.sqrt(hidden)),
        "rms_att": f16(1 + u((dim,), 0.25)), "rms_ffn": f16(1 + u((dim,), 0.25)),
    }
    x = u((seq, dim), 1.0)
    dy = u((seq, dim), 1.0)
    for t in list(W.values()) + [x]:
        t.requires_grad_(True)
    eps, theta = 1e-5, 10000.0
    rope = rope_adjacent if style == "adjacent" else rope_rotate_half

    xn1 = rms(x, W["rms_att"], eps)
    q = (xn1 @ W["wq"].T).reshape(seq, heads, hd)
    k = (xn1 @ W["wk"].T).reshape(seq, kvh, hd)
    v = (xn1 @ W["wv"].T).reshape(seq, kvh, hd)
    qr, kr = rope(q, theta), rope(k, theta)
    rep = heads // kvh
    kx = kr.repeat_interleave(rep, dim=1)  # query head h reads kv head h // rep
    vx = v.repeat_interleave(rep, dim=1)
    qh, kh, vh = qr.transpose(0, 1), kx.transpose(0, 1), vx.transpose(0, 1)  # [H, S, HD]
    scores = qh @ kh.transpose(1, 2) / math.sqrt(hd)
    causal = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    a = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1) @ vh  # [H, S, HD]
    attn = a.transpose(0, 1).reshape(seq, qd)
    x2 = x + attn @ W["wo"].T
    xn2 = rms(x2, W["rms_ffn"], eps)
    h1, h3 = xn2 @ W["w1"].T, xn2 @ W["w3"].T
    out = x2 + (F.silu(h1) * h3) @ W["w2"].T
    for t in (q, k, v, attn, x2):
        t.retain_grad()
    (out * dy).sum().backward()

    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)

    def save(n, t, act=True):  # activations [S, C] -> [C, S]
        t = t.detach()
        if act:
            t = t.reshape(seq, -1).T
        np.save(os.path.join(d, n + ".npy"), np.ascontiguousarray(t.numpy()))

    save("x", x)
    save("dy", dy)
    save("out", out)
    save("dx", x.grad)
    save("attn", attn)
    save("dx2", x2.grad)
    save("dq", q.grad)
    save("dk", k.grad)
    save("dv", v.grad)
    for n, t in W.items():
        save(n, t, act=False)
        save("d" + n, t.grad, act=False)
    with open(os.path.join(d, "shape.txt"), "w") as f:
        f.write(f"{dim} {hidden} {heads} {kvh} {hd} {seq} {style}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (default: none, required)")
    ap.add_argument("--seed", type=int, default=1234, help="random seed (default: 1234)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    skip = os.path.join(args.out, "SKIPPED")
    try:
        import numpy  # noqa: F401
        import torch
    except ImportError as e:
        with open(skip, "w") as f:
            f.write(f"PyTorch/numpy not importable by {sys.executable}: {e}\n")
        print(f"kernel_reference: skipped ({e})")
        return 0
    if os.path.exists(skip):
        os.remove(skip)
    torch.set_num_threads(2)
    for name, sh in SHAPES.items():
        make(name, *sh, args.out, args.seed)
    print(f"kernel_reference: wrote {len(SHAPES)} shapes to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
