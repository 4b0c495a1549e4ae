#!/usr/bin/env python3
"""Trains a model of a real model's shape from scratch (PyTorch + transformers, one CUDA GPU) on token ids
written by `anelab tokenize` (TinyStories), and saves it as a Hugging Face directory (fp32 safetensors,
config.json, and the tokenizer.json when given) that `anelab convert` reads.

Why: the interop check of docs/benchmarks_history.md (scripts/quant_interop.sh) compares anelab's and llama.cpp's greedy
tokens on the same quantized GGUF. Random weights give near-flat logits, where the two programs' different
activation rounding flips the arg-max within a few tokens; a trained model has the margins real models have.

Shapes (the weights are this script's, not the originals'):
  qwen2.5-0.5b  Qwen2: hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864, vocabulary 151936,
                tied embeddings, q/k/v biases, RoPE theta 1e6 (Qwen tokenizer)
  stories110m   Llama: dim 768, 12 layers, 12 heads, hidden 2048, vocabulary 32000, RoPE theta 1e4, untied
                (llama2.c's / Llama 2's tokenizer)
The TinyStories text is small (~190k tokens): the model memorises much of it, which is what makes its
logits peaked.

Usage (device machine): /opt/torch/.venv/bin/python3 scripts/train_shaped_model.py --shape SHAPE
    --tokens train.bin [--heldout-tokens heldout.bin] [--tokenizer-json tokenizer.json] --out DIR [--steps 400]
"""
import argparse
import json
import math
import os
import shutil
import time

import torch


def read_tokens(path):
    """Ids of an `anelab tokenize` file: raw little-endian uint16/uint32 (dtype in PATH.json)."""
    with open(path + ".json") as f:
        meta = json.load(f)
    if meta.get("format") != "anelab-tokens" or meta.get("dtype") not in ("uint16", "uint32"):
        raise SystemExit(f"[train_shaped_model] {path}.json: not an anelab-tokens file with uint16/uint32 ids")
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    if meta["dtype"] == "uint16":
        return torch.frombuffer(raw, dtype=torch.int16).to(torch.int64) & 0xFFFF
    return torch.frombuffer(raw, dtype=torch.int32).to(torch.int64) & 0xFFFFFFFF


def rope(cls, common, theta):
    """The config in transformers 5.x style (RoPE in rope_parameters), else 4.x's rope_theta."""
    try:
        return cls(**common, rope_parameters={"rope_type": "default", "rope_theta": theta})
    except (TypeError, ValueError, KeyError):
        return cls(**common, rope_theta=theta)


def qwen_shape():
    from transformers import Qwen2Config
    eot = 151643  # <|endoftext|>
    return rope(Qwen2Config, dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                                  rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
                                  use_sliding_window=False, attention_dropout=0.0, bos_token_id=eot,
                                  eos_token_id=eot), 1e6)


def stories_shape():
    from transformers import LlamaConfig
    return rope(LlamaConfig, dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                                  num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=1024,
                                  rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                                  hidden_act="silu", bos_token_id=1, eos_token_id=2), 1e4)


SHAPES = {"qwen2.5-0.5b": qwen_shape, "stories110m": stories_shape}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--tokens", required=True, help="training ids: `anelab tokenize` output (.bin + .bin.json)")
    ap.add_argument("--heldout-tokens", default="", help="held-out ids, the same format (loss printed)")
    ap.add_argument("--tokenizer-json", default="", help="copied into the output (the model's own tokenizer)")
    ap.add_argument("--out", required=True, help="output directory (Hugging Face layout)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("[train_shaped_model] needs a CUDA GPU (this is a device-machine script)")
    data = read_tokens(args.tokens)
    print(f"[train_shaped_model] {args.shape}: {len(data)} training tokens", flush=True)
    torch.manual_seed(args.seed)
    cfg = SHAPES[args.shape]()
    dev = torch.device("cuda")
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_config(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warm = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    g = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    model.train()
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - args.seq - 1, (args.batch,), generator=g)
        x = torch.stack([data[s : s + args.seq] for s in starts]).to(dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"[train_shaped_model] step {step} loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)

    model.eval()
    hl = None
    if args.heldout_tokens:
        held = read_tokens(args.heldout_tokens)[: 4 * args.seq]
        with torch.no_grad():
            hl = model(input_ids=held[None].to(dev), labels=held[None].to(dev)).loss.item()
    os.makedirs(args.out, exist_ok=True)
    model.to(torch.float32).save_pretrained(args.out, safe_serialization=True)
    if args.tokenizer_json:
        shutil.copy(args.tokenizer_json, os.path.join(args.out, "tokenizer.json"))
    summary = {"params": n_params, "steps": args.steps, "batch": args.batch, "seq": args.seq, "lr": args.lr,
               "shape": args.shape, "train_tokens": len(data), "final_train_loss": loss.item(), "heldout_loss": hl,
               "seconds": time.time() - t0, "torch": torch.__version__}
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"[train_shaped_model] {n_params / 1e6:.0f}M parameters; train loss {loss.item():.3f}, held-out loss "
          f"{hl} ({time.time() - t0:.0f} s); saved {args.out}", flush=True)


if __name__ == "__main__":
    main()
