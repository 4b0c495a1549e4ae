#!/usr/bin/python3
"""Independent PyTorch reference for the anelab trainer (tests/train).

Reads DIR/config.json, DIR/weights/<name>.npy (canonical tensor names, [out, in]) and DIR/batches.npy
([n_micro, B, T+1] token ids stored as float32), implements the Llama model itself (RMSNorm, RoPE in
adjacent-pair (llama2.c, complex multiply) or rotate-half form, Llama 3.x "llama3" frequency scaling
(transformers' _compute_llama3_parameters, written out here), Qwen3's per-head RMSNorm of q and k before
RoPE (when the weights hold q_norm / k_norm [head_dim]), GQA via repeat_interleave, SwiGLU, tied/untied
classifier; Gemma 3's parts as transformers' Gemma3 writes them: (norm_offset + w) norms, post-attention /
post-MLP norms, GeGLU with tanh-GELU, the embedding scale, the score scale, sliding-window layers with their
own RoPE base, global layers' linear RoPE scaling, final logit soft-capping) and writes:
  mode "grads": DIR/out/loss.npy [1] and DIR/out/grad.<name>.npy for the first micro-batch;
  mode "train": DIR/out/losses.npy [steps], DIR/out/grad_norms.npy [steps] and DIR/out/final.<name>.npy
                after `steps` AdamW steps (torch.optim.AdamW, no decay on 1-D tensors, warmup + cosine
                schedule, clip_grad_norm_, gradient accumulation over `accum` micro-batches).
Usage: train_reference.py DIR grads|train
"""
import json
import math
import os
import sys

import numpy as np
import torch

torch.set_num_threads(2)


def rms_norm(x, w, eps, offset=0.0):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (offset + w)


def rope(x, pos_cos, pos_sin, style):
    # x [B, T, H, hd]; pos_cos/sin [T, hd/2]
    if style == "adjacent_pairs":
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())  # in x's precision (fp64: lora_reference)
        f = torch.complex(pos_cos.to(x.dtype), pos_sin.to(x.dtype))[None, :, None, :]
        return torch.view_as_real(xc * f).flatten(3)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = pos_cos[None, :, None, :], pos_sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


def inv_freq(c, theta=None):
    """theta^(-2i/hd) in fp64, then the llama3 scaling when the config has it."""
    hd = c["head_dim"]
    i = torch.arange(0, hd // 2, dtype=torch.float64)
    inv = float(theta or c["rope_theta"]) ** (-2.0 * i / hd)
    s = c.get("rope_scaling", {"type": "none"})
    if s["type"] == "none":
        return inv
    assert s["type"] == "llama3", s
    factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_pos"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
    return torch.where(medium, smoothed, scaled)


class Llama(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict()
        for name, arr in weights.items():
            self.p[name.replace(".", "__")] = torch.nn.Parameter(torch.tensor(arr, dtype=torch.float32))

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def has(self, name):
        return name.replace(".", "__") in self.p

    def forward(self, tokens, targets):
        c = self.cfg
        B, T = tokens.shape
        D, H, KV, hd = c["dim"], c["n_heads"], c["n_kv_heads"], c["head_dim"]
        pos = torch.arange(T, dtype=torch.float64)[:, None]
        ang = pos * inv_freq(c)[None, :] / c.get("rope_linear_factor", 1.0)
        cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
        ang = pos * inv_freq(c, c.get("rope_local_theta", 0.0))[None, :]  # sliding layers: no linear scaling
        cos_l, sin_l = torch.cos(ang).float(), torch.sin(ang).float()
        mask = torch.full((T, T), float("-inf")).triu(1)
        W = c.get("sliding_window", 0)
        mask_l = mask.clone()
        if W > 0:
            mask_l = mask_l + torch.full((T, T), float("-inf")).tril(-W)  # keys j with i - j >= W are hidden
        emb = self.w("tok_embeddings")
        x = emb[tokens] * c.get("embed_scale", 1.0)
        eps, off = c["norm_eps"], c.get("norm_offset", 0.0)
        scale = c.get("attn_scale", 0.0) or 1.0 / math.sqrt(hd)
        post = self.has("layers.0.attn_post_norm")  # the architecture implies its norms: read off the weights
        for l in range(c["n_layers"]):
            pre = "layers.%d." % l
            pattern = c.get("sliding_pattern", 0)
            local = W > 0 and not (pattern > 0 and (l + 1) % pattern == 0)
            cs, sn, mk = (cos_l, sin_l, mask_l) if local else (cos, sin, mask)
            xn = rms_norm(x, self.w(pre + "attn_norm"), eps, off)
            q = (xn @ self.w(pre + "wq").T).view(B, T, H, hd)
            k = (xn @ self.w(pre + "wk").T).view(B, T, KV, hd)
            v = (xn @ self.w(pre + "wv").T).view(B, T, KV, hd)
            if self.has(pre + "q_norm"):
                q = rms_norm(q, self.w(pre + "q_norm"), eps, off)
                k = rms_norm(k, self.w(pre + "k_norm"), eps, off)
            q, k = rope(q, cs, sn, c["rope_style"]), rope(k, cs, sn, c["rope_style"])
            k = k.repeat_interleave(H // KV, dim=2)
            v = v.repeat_interleave(H // KV, dim=2)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            att = torch.softmax(q @ k.transpose(2, 3) * scale + mk, dim=-1) @ v
            o = att.transpose(1, 2).reshape(B, T, H * hd) @ self.w(pre + "wo").T
            x = x + (rms_norm(o, self.w(pre + "attn_post_norm"), eps, off) if post else o)
            xn = rms_norm(x, self.w(pre + "ffn_norm"), eps, off)
            h1 = xn @ self.w(pre + "w1").T
            if c["activation"] == "gelu_tanh_gated":
                act = torch.nn.functional.gelu(h1, approximate="tanh")
            else:
                act = torch.nn.functional.silu(h1)
            y = (act * (xn @ self.w(pre + "w3").T)) @ self.w(pre + "w2").T
            x = x + (rms_norm(y, self.w(pre + "ffn_post_norm"), eps, off) if post else y)
        x = rms_norm(x, self.w("norm"), eps, off)
        out = emb if c["tied_embeddings"] else self.w("output")
        logits = x @ out.T
        cap = c.get("logit_softcap", 0.0)
        if cap > 0:
            logits = cap * torch.tanh(logits / cap)
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def lr_at(o, step):
    if o["warmup_steps"] > 0 and step < o["warmup_steps"]:
        return o["lr"] * (step + 1) / o["warmup_steps"]
    if o["schedule"] == "constant":
        return o["lr"]
    lo = o["min_lr_frac"] * o["lr"]
    span = max(1, o["steps"] - o["warmup_steps"])
    prog = min(1.0, (step - o["warmup_steps"]) / span)
    return lo + 0.5 * (o["lr"] - lo) * (1 + math.cos(math.pi * prog))


def main():
    d, mode = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(d, "config.json")))
    names = cfg["tensors"]
    weights = {n: np.load(os.path.join(d, "weights", n + ".npy")) for n in names}
    batches = torch.tensor(np.load(os.path.join(d, "batches.npy"))).long()
    model = Llama(cfg, weights)
    out = os.path.join(d, "out")
    os.makedirs(out, exist_ok=True)
    if mode == "grads":
        b = batches[0]
        loss = model(b[:, :-1], b[:, 1:])
        loss.backward()
        np.save(os.path.join(out, "loss.npy"), np.array([loss.item()], dtype=np.float64))
        for n in names:
            np.save(os.path.join(out, "grad." + n + ".npy"), model.w(n).grad.numpy().astype(np.float32))
        return
    o = cfg["optim"]
    decay = [model.w(n) for n in names if weights[n].ndim >= 2]
    nodecay = [model.w(n) for n in names if weights[n].ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], foreach=False)
    losses, norms = [], []
    params = [model.w(n) for n in names]
    for step in range(o["steps"]):
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for a in range(o["accum"]):
            b = batches[step * o["accum"] + a]
            loss = model(b[:, :-1], b[:, 1:])
            (loss / o["accum"]).backward()
            total += loss.item()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)).item()
        if o["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, o["grad_clip"])
        for g in opt.param_groups:
            g["lr"] = lr_at(o, step)
        opt.step()
        losses.append(total / o["accum"])
        norms.append(norm)
    np.save(os.path.join(out, "losses.npy"), np.array(losses, dtype=np.float64))
    np.save(os.path.join(out, "grad_norms.npy"), np.array(norms, dtype=np.float64))
    for n in names:
        np.save(os.path.join(out, "final." + n + ".npy"), model.w(n).detach().numpy().astype(np.float32))


if __name__ == "__main__":
    main()
