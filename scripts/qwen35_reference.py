#!/usr/bin/python3
"""fp64 reference of the Qwen3.5 dense text model (the test oracle for anelab's Qwen3.5 support, issue 36).

Written from the definitions, not copied:
  - Hugging Face transformers, src/transformers/models/qwen3_5/modeling_qwen3_5.py (Qwen3_5GatedDeltaNet,
    Qwen3_5Attention, Qwen3_5RMSNorm, Qwen3_5RMSNormGated, torch_recurrent_gated_delta_rule,
    torch_chunk_gated_delta_rule) and configuration_qwen3_5.py (Qwen3_5TextConfig: layer_types,
    full_attention_interval, partial_rotary_factor);
  - transformers src/transformers/models/qwen3_next/modeling_qwen3_next.py (the same layers, Qwen3-Next);
  - fla-org/flash-linear-attention, the chunked gated delta rule (WY/UT transform per chunk);
  - llama.cpp (unslothai/llama.cpp src/models/qwen35.cpp and the delta-net graph) for the layer order.

The model, as this script computes it (all in float64):
  h = embed[ids]
  per layer: h += mixer(norm1(h)); h += mlp(norm2(h))  with mlp = down(silu(gate(x)) * up(x))
  logits = lm_head(norm(h))  (lm_head = embed when tie_word_embeddings)
  Norm conventions (checked in the source): every Qwen3_5RMSNorm (input_layernorm, post_attention_layernorm,
  the final norm, self_attn.q_norm/k_norm) scales by (1 + weight), weights stored as offsets from 1; the
  gated norm inside the linear-attention layer (linear_attn.norm) scales by weight itself.
  mixer = full attention where layer_types[i] == "full_attention", else the Gated DeltaNet:
  - Gated DeltaNet ("linear_attention"): qkv = in_proj_qkv(x) (channels [q: Hk*dk | k: Hk*dk | v: Hv*dv]),
    depthwise causal conv1d over time (conv1d.weight [C, 1, K], no bias, zero history), SiLU;
    q, k L2-normalised per head (x * rsqrt(sum x^2 + 1e-6)), q scaled by dk^-0.5; each k head serves
    Hv/Hk consecutive v heads; beta = sigmoid(in_proj_b(x)); g = -exp(A_log) * softplus(in_proj_a(x) + dt_bias);
    per v head the state S [dk, dv]: S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q;
    o = rmsnorm(o) * weight * silu(z) per head (z = in_proj_z(x)); out_proj(o).
  - full attention: q_proj gives per head [q (head_dim) | gate (head_dim)]; q_norm/k_norm per head;
    RoPE (rotate_half, NeoX halves) on the first head_dim * partial_rotary_factor dims; GQA (kv head = head / group);
    softmax(q k^T / sqrt(head_dim)) v causal; o = attn * sigmoid(gate); o_proj(o).

Reads a Hugging Face directory (config.json, flat or with "text_config"; model.safetensors, bf16/fp16/fp32).

  /usr/bin/python3 scripts/qwen35_reference.py tests/fixtures/hf/qwen35_bf16 \
      --check tests/fixtures/hf/reference_qwen35_bf16.json

prints the largest |ours - transformers| / logit range over every position of every prompt of the reference
file and whether the greedy continuations agree; exits 1 above --tol (1e-5). --self-test checks the chunked
form of the delta rule against the recurrent one on random inputs.

  /usr/bin/python3 scripts/qwen35_reference.py --train DIR grads|train

is the training oracle of anelab's CPU strategy (tests/train/test_qwen35_train.cpp, the directory layout of
scripts/train_reference.py: DIR/config.json as anelab writes a ModelConfig plus "tensors" and "optim",
DIR/weights/<canonical name>.npy, DIR/batches.npy [n_micro, B, T+1]): the same model in float64 with autograd,
  "grads": DIR/out/loss.npy [1] (mean cross-entropy of the first micro-batch) and DIR/out/grad.<name>.npy;
  "train": DIR/out/losses.npy [steps] and DIR/out/final.<name>.npy after `steps` torch.optim.AdamW steps (float64;
           train_reference.py's schedule, decay groups, clipping and gradient accumulation);
  "lora_grads": LoRA on the frozen model (anelab's --lora, tests/train/test_qwen35_train.cpp): the adapters
           DIR/lora/layers.N.T.lora_A.npy [r, in] and .lora_B.npy [out, r] (T one of anelab's --lora-targets: q k v o
           gate up down lin_qkv lin_z lin_b lin_a lin_out) with optim.lora = {"rank", "alpha"}; every adapted weight
           is W + (alpha / r) B·A (PEFT's LoraLayer without dropout: x W^T + s (x A^T) B^T is x (W + s B A)^T), the
           base weights constants; DIR/out/loss.npy and DIR/out/grad.<adapter name>.npy of the first micro-batch.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch

D = torch.float64


def load_safetensors(path):
    """Minimal reader: 8-byte header length, JSON header, raw little-endian tensors; bf16 widened exactly."""
    out = {}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = bytearray(blob[a:b])
        dt = info["dtype"]
        if dt == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).to(torch.int32) << 16
            t = t.view(torch.float32)
        elif dt == "F16":
            t = torch.frombuffer(raw, dtype=torch.float16)
        elif dt == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32)
        else:
            sys.exit("%s: tensor %s: dtype %s not supported" % (path, name, dt))
        out[name] = t.to(D).reshape(info["shape"])
    return out


def load_weights(model_dir):
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    files = [os.path.join(model_dir, "model.safetensors")]
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted({os.path.join(model_dir, v) for v in json.load(f)["weight_map"].values()})
    w = {}
    for p in files:
        w.update(load_safetensors(p))
    # Qwen3_5ForConditionalGeneration stores the text model under model.language_model.
    return {k.replace("model.language_model.", "model."): v for k, v in w.items()}


def text_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg = cfg.get("text_config", cfg)
    if "layer_types" not in cfg or cfg["layer_types"] is None:
        every = cfg.get("full_attention_interval", 4)
        cfg["layer_types"] = ["full_attention" if (i + 1) % every == 0 else "linear_attention"
                              for i in range(cfg["num_hidden_layers"])]
    rp = cfg.get("rope_parameters") or {}
    cfg["rope_theta_"] = rp.get("rope_theta", cfg.get("rope_theta", 1e7))
    cfg["partial_rotary_factor_"] = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25))
    for key in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                "linear_conv_kernel_dim", "head_dim", "num_attention_heads", "num_key_value_heads"):
        if key not in cfg:
            sys.exit("%s: missing field %s" % (path, key))
    return cfg


def rmsnorm(x, w, eps, offset):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * (1.0 + w) if offset else y * w


def l2norm(x):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def delta_rule_recurrent(q, k, v, g, beta, state=None):
    """q, k [T, H, dk] (already normalised and scaled), v [T, H, dv], g, beta [T, H]; state [H, dk, dv]."""
    T, H, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(H, dk, dv, dtype=D) if state is None else state.clone()
    o = torch.zeros(T, H, dv, dtype=D)
    for t in range(T):
        S = S * g[t].exp()[:, None, None]
        pred = torch.einsum("hk,hkv->hv", k[t], S)
        delta = (v[t] - pred) * beta[t][:, None]
        S = S + k[t][:, :, None] * delta[:, None, :]
        o[t] = torch.einsum("hk,hkv->hv", q[t], S)
    return o, S


def delta_rule_chunked(q, k, v, g, beta, chunk=4, state=None):
    """The same recurrence by chunks (UT transform): within a chunk with cumulative log-decay c_i,
    A[i][j] = beta_i (k_i . k_j) exp(c_i - c_j) for j < i; U = (I + A)^-1 (beta v - beta exp(c) k S0);
    o_i = exp(c_i) q_i S0 + sum_{j<=i} (q_i . k_j) exp(c_i - c_j) U_j; S = exp(c_L) S0 + sum_j exp(c_L - c_j) k_j U_j."""
    T, H, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(H, dk, dv, dtype=D) if state is None else state.clone()
    o = torch.zeros(T, H, dv, dtype=D)
    for s in range(0, T, chunk):
        e = min(T, s + chunk)
        L = e - s
        for h in range(H):
            qc, kc, vc, b = q[s:e, h], k[s:e, h], v[s:e, h], beta[s:e, h]
            c = g[s:e, h].cumsum(0)
            dec = (c[:, None] - c[None, :]).tril()
            mask_strict = torch.ones(L, L, dtype=torch.bool).tril(-1)
            mask = torch.ones(L, L, dtype=torch.bool).tril()
            A = torch.where(mask_strict, b[:, None] * (kc @ kc.T) * dec.exp(), torch.zeros((), dtype=D))
            rhs = b[:, None] * (vc - (c.exp()[:, None] * kc) @ S[h])
            U = torch.linalg.solve_triangular(torch.eye(L, dtype=D) + A, rhs, upper=False, unitriangular=True)
            P = torch.where(mask, (qc @ kc.T) * dec.exp(), torch.zeros((), dtype=D))
            o[s:e, h] = c.exp()[:, None] * (qc @ S[h]) + P @ U
            S[h] = c[-1].exp() * S[h] + ((c[-1] - c).exp()[:, None] * kc).T @ U
    return o, S


def deltanet(cfg, w, p, x, chunked):
    T = x.shape[0]
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, K = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"]
    qkv = x @ w[p + "in_proj_qkv.weight"].T  # [T, C]
    conv = w[p + "conv1d.weight"].reshape(qkv.shape[1], K)
    padded = torch.cat([torch.zeros(K - 1, qkv.shape[1], dtype=D), qkv], 0)
    mixed = torch.stack([(padded[t:t + K] * conv.T).sum(0) for t in range(T)])
    mixed = torch.nn.functional.silu(mixed)
    q = mixed[:, :hk * dk].reshape(T, hk, dk)
    k = mixed[:, hk * dk:2 * hk * dk].reshape(T, hk, dk)
    v = mixed[:, 2 * hk * dk:].reshape(T, hv, dv)
    q = l2norm(q) * dk ** -0.5
    k = l2norm(k)
    q = q.repeat_interleave(hv // hk, dim=1)
    k = k.repeat_interleave(hv // hk, dim=1)
    beta = torch.sigmoid(x @ w[p + "in_proj_b.weight"].T)
    a = x @ w[p + "in_proj_a.weight"].T
    g = -w[p + "A_log"].exp() * torch.nn.functional.softplus(a + w[p + "dt_bias"])
    o, _ = (delta_rule_chunked if chunked else delta_rule_recurrent)(q, k, v, g, beta)
    z = (x @ w[p + "in_proj_z.weight"].T).reshape(T, hv, dv)
    o = rmsnorm(o, w[p + "norm.weight"], cfg["rms_norm_eps"], offset=False) * torch.nn.functional.silu(z)
    return o.reshape(T, hv * dv) @ w[p + "out_proj.weight"].T


def rope(x, pos, rot, theta):
    """rotate_half RoPE on the first `rot` dims of x [T, H, d]."""
    inv = 1.0 / theta ** (torch.arange(0, rot, 2, dtype=D) / rot)
    ang = pos[:, None].to(D) * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    xr, xp = x[..., :rot], x[..., rot:]
    half = torch.cat([-xr[..., rot // 2:], xr[..., :rot // 2]], -1)
    return torch.cat([xr * cos + half * sin, xp], -1)


def attention(cfg, w, p, x):
    T = x.shape[0]
    H, KV, hd, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    qg = (x @ w[p + "q_proj.weight"].T).reshape(T, H, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:].reshape(T, H * hd)
    k = (x @ w[p + "k_proj.weight"].T).reshape(T, KV, hd)
    v = (x @ w[p + "v_proj.weight"].T).reshape(T, KV, hd)
    q = rmsnorm(q, w[p + "q_norm.weight"], eps, offset=True)
    k = rmsnorm(k, w[p + "k_norm.weight"], eps, offset=True)
    rot = int(hd * cfg["partial_rotary_factor_"])
    pos = torch.arange(T)
    q, k = rope(q, pos, rot, cfg["rope_theta_"]), rope(k, pos, rot, cfg["rope_theta_"])
    k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(hd)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    o = torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(T, H * hd)
    return (o * torch.sigmoid(gate)) @ w[p + "o_proj.weight"].T


def forward(cfg, w, ids, chunked=False):
    eps = cfg["rms_norm_eps"]
    h = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for i, kind in enumerate(cfg["layer_types"]):
        p = "model.layers.%d." % i
        x = rmsnorm(h, w[p + "input_layernorm.weight"], eps, offset=True)
        if kind == "linear_attention":
            h = h + deltanet(cfg, w, p + "linear_attn.", x, chunked)
        elif kind == "full_attention":
            h = h + attention(cfg, w, p + "self_attn.", x)
        else:
            sys.exit("layer_types[%d]: unknown kind %s" % (i, kind))
        x = rmsnorm(h, w[p + "post_attention_layernorm.weight"], eps, offset=True)
        m = p + "mlp."
        h = h + (torch.nn.functional.silu(x @ w[m + "gate_proj.weight"].T) * (x @ w[m + "up_proj.weight"].T)) @ \
            w[m + "down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return rmsnorm(h, w["model.norm.weight"], eps, offset=True) @ head.T


def self_test():
    g = torch.Generator().manual_seed(36)
    T, H, dk, dv = 11, 3, 5, 4
    q = l2norm(torch.randn(T, H, dk, generator=g, dtype=D)) * dk ** -0.5
    k = l2norm(torch.randn(T, H, dk, generator=g, dtype=D))
    v = torch.randn(T, H, dv, generator=g, dtype=D)
    gg = -torch.rand(T, H, generator=g, dtype=D) * 2
    beta = torch.rand(T, H, generator=g, dtype=D)
    s0 = torch.randn(H, dk, dv, generator=g, dtype=D)
    o1, s1 = delta_rule_recurrent(q, k, v, gg, beta, s0)
    o2, s2 = delta_rule_chunked(q, k, v, gg, beta, 4, s0)
    err = max(float((o1 - o2).abs().max()), float((s1 - s2).abs().max()))
    print("self-test: chunked vs recurrent delta rule, max abs diff %.3g" % err)
    return err < 1e-12


# ---- the training oracle (--train) ----

# anelab's canonical layer leaves (models/arch/qwen35.cpp layer_names) -> the Hugging Face leaves used above.
CANONICAL_LEAVES = {
    "attn_norm": "input_layernorm.weight", "ffn_norm": "post_attention_layernorm.weight",
    "wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight", "wv": "self_attn.v_proj.weight",
    "wo": "self_attn.o_proj.weight", "q_norm": "self_attn.q_norm.weight", "k_norm": "self_attn.k_norm.weight",
    "w1": "mlp.gate_proj.weight", "w2": "mlp.down_proj.weight", "w3": "mlp.up_proj.weight",
    "ssm_qkv": "linear_attn.in_proj_qkv.weight", "ssm_z": "linear_attn.in_proj_z.weight",
    "ssm_b": "linear_attn.in_proj_b.weight", "ssm_a": "linear_attn.in_proj_a.weight",
    "ssm_conv": "linear_attn.conv1d.weight", "ssm_a_log": "linear_attn.A_log", "ssm_dt_bias": "linear_attn.dt_bias",
    "ssm_norm": "linear_attn.norm.weight", "ssm_out": "linear_attn.out_proj.weight"}
CANONICAL_TOP = {"tok_embeddings": "model.embed_tokens.weight", "norm": "model.norm.weight", "output": "lm_head.weight"}
# anelab's --lora-targets names -> the canonical leaf each adapts (train/lora.h).
LORA_TARGETS = {"q": "wq", "k": "wk", "v": "wv", "o": "wo", "gate": "w1", "up": "w3", "down": "w2",
                "lin_qkv": "ssm_qkv", "lin_z": "ssm_z", "lin_b": "ssm_b", "lin_a": "ssm_a", "lin_out": "ssm_out"}


def hf_name(canonical):
    if canonical in CANONICAL_TOP:
        return CANONICAL_TOP[canonical]
    _, layer, leaf = canonical.split(".", 2)
    return "model.layers.%s.%s" % (layer, CANONICAL_LEAVES[leaf])


def config_from_anelab(c):
    """anelab's ModelConfig JSON (models/formats/model_config_json.cpp) -> the config keys used above."""
    if c["arch"] != "qwen35":
        sys.exit("--train: config.json arch is %s, expected qwen35" % c["arch"])
    every = c["full_attention_interval"]
    return {"num_attention_heads": c["n_heads"], "num_key_value_heads": c["n_kv_heads"], "head_dim": c["head_dim"],
            "rms_norm_eps": c["norm_eps"], "rope_theta_": c["rope_theta"],
            "partial_rotary_factor_": c["rope_fraction"],
            "layer_types": ["full_attention" if (i + 1) % every == 0 else "linear_attention"
                            for i in range(c["n_layers"])],
            "linear_num_key_heads": c["linear_k_heads"], "linear_num_value_heads": c["linear_v_heads"],
            "linear_key_head_dim": c["linear_k_dim"], "linear_value_head_dim": c["linear_v_dim"],
            "linear_conv_kernel_dim": c["linear_conv_kernel"]}


def batch_loss(cfg, w, batch):
    """Mean cross-entropy over every target of batch [B, T+1] (each sequence from position 0)."""
    logits = torch.cat([forward(cfg, w, row[:-1].tolist()) for row in batch])
    return torch.nn.functional.cross_entropy(logits, batch[:, 1:].reshape(-1))


def train_oracle(d, mode):
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_reference import lr_at  # the schedule anelab's trainer follows (one place)
    torch.set_num_threads(1)
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    cfg = config_from_anelab(c)
    names = c["tensors"]
    params = {n: torch.tensor(np.load(os.path.join(d, "weights", n + ".npy")), dtype=D, requires_grad=True)
              for n in names}
    w = {hf_name(n): t for n, t in params.items()}
    batches = torch.tensor(np.load(os.path.join(d, "batches.npy"))).long()
    out = os.path.join(d, "out")
    os.makedirs(out, exist_ok=True)
    if mode == "lora_grads":
        lc = c["optim"]["lora"]
        scale = lc["alpha"] / lc["rank"]
        lora_dir = os.path.join(d, "lora")
        anames = sorted(f[:-len(".npy")] for f in os.listdir(lora_dir))
        ad = {n: torch.tensor(np.load(os.path.join(lora_dir, n + ".npy")), dtype=D, requires_grad=True)
              for n in anames}
        w = {hf_name(n): t.detach() for n, t in params.items()}  # the base: constants
        for n in anames:
            if n.endswith(".lora_A"):
                _, layer, target, _ = n.split(".")
                key = hf_name("layers.%s.%s" % (layer, LORA_TARGETS[target]))
                w[key] = w[key] + scale * (ad[n[:-len("A")] + "B"] @ ad[n])
        loss = batch_loss(cfg, w, batches[0])
        loss.backward()
        np.save(os.path.join(out, "loss.npy"), np.array([loss.item()], dtype=np.float64))
        for n in anames:
            np.save(os.path.join(out, "grad." + n + ".npy"), ad[n].grad.numpy())
        return
    if mode == "grads":
        loss = batch_loss(cfg, w, batches[0])
        loss.backward()
        np.save(os.path.join(out, "loss.npy"), np.array([loss.item()], dtype=np.float64))
        for n in names:
            np.save(os.path.join(out, "grad." + n + ".npy"), params[n].grad.numpy().astype(np.float32))
        return
    if mode != "train":
        sys.exit("--train: mode %s is not grads, train or lora_grads" % mode)
    o = c["optim"]
    plist = [params[n] for n in names]
    opt = torch.optim.AdamW([{"params": [p for p in plist if p.ndim >= 2], "weight_decay": o["weight_decay"]},
                             {"params": [p for p in plist if p.ndim < 2], "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], foreach=False)
    losses = []
    for step in range(o["steps"]):
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for a in range(o["accum"]):
            loss = batch_loss(cfg, w, batches[step * o["accum"] + a])
            (loss / o["accum"]).backward()
            total += loss.item()
        if o["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(plist, o["grad_clip"])
        for g in opt.param_groups:
            g["lr"] = lr_at(o, step)
        opt.step()
        losses.append(total / o["accum"])
    np.save(os.path.join(out, "losses.npy"), np.array(losses, dtype=np.float64))
    for n in names:
        np.save(os.path.join(out, "final." + n + ".npy"), params[n].detach().numpy().astype(np.float32))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--check", default="", help="reference_<name>.json from scripts/make_hf_fixtures.py")
    ap.add_argument("--tol", type=float, default=1e-5, help="largest |diff| / logit range accepted")
    ap.add_argument("--chunked", action="store_true", help="use the chunked delta rule (else recurrent)")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--train", nargs=2, metavar=("DIR", "MODE"), help="the training oracle (see above)")
    args = ap.parse_args()
    if args.train:
        train_oracle(*args.train)
        return
    if args.self_test:
        sys.exit(0 if self_test() else 1)
    if not args.model_dir:
        ap.error("model_dir is required")
    cfg = text_config(args.model_dir)
    w = load_weights(args.model_dir)
    if not args.check:
        print(json.dumps(forward(cfg, w, [1, 2, 3], args.chunked)[-1].tolist()[:8]))
        return
    with open(args.check) as f:
        ref = next(iter(json.load(f)["models"].values()))
    worst, same = 0.0, True
    for prompt, logits, greedy in zip(ref["prompts"], ref["logits"], ref["greedy"]):
        hf = torch.tensor(logits, dtype=D)
        ours = forward(cfg, w, prompt, args.chunked)
        worst = max(worst, float((ours - hf).abs().max() / (hf.max() - hf.min())))
        seq = list(prompt)
        for _ in greedy:
            seq.append(int(forward(cfg, w, seq, args.chunked)[-1].argmax()))
        same = same and seq[len(prompt):] == greedy
    print("qwen35 reference vs transformers: max |diff| / logit range %.3g (tol %g), greedy ids %s" %
          (worst, args.tol, "equal" if same else "DIFFER"))
    sys.exit(0 if worst <= args.tol and same else 1)


if __name__ == "__main__":
    main()
