#!/usr/bin/env python3
"""Trains a Qwen2.5-0.5B-shaped model from scratch (PyTorch + transformers, one CUDA GPU) on the TinyStories
validation prefix, tokenized with the Qwen tokenizer, and saves it as a Hugging Face directory (fp32
safetensors, config.json, tokenizer.json) that `anelab convert` reads.

Why: docs/quantization.md's interop check (scripts/quant_interop.sh) compares anelab's and llama.cpp's greedy
tokens on the same quantized GGUF. Random weights give near-flat logits, where the two programs' different
activation rounding flips the arg-max within a few tokens; a trained model has the margins real models have.

The shape is Qwen2.5-0.5B's (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864, vocabulary
151936, tied embeddings, q/k/v biases, RoPE theta 1e6); the weights are this script's, not Qwen's. All
paragraphs but the last --heldout train (the last 40 are quant_interop.sh's held-out text). The text is small
(~190k tokens): the model memorises much of it, which is what makes its logits peaked.

Usage (device machine): /opt/torch/.venv/bin/python3 scripts/train_qwen_shaped.py --text TXT
    --tokenizer tokenizer.json --out DIR [--steps 400]
"""
import argparse
import json
import math
import os
import shutil
import time

import torch


def paragraphs(path):
    with open(path, encoding="utf-8") as f:
        return [p.strip() for p in f.read().split("\n\n") if p.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", required=True, help="TinyStories text (blank-line separated paragraphs)")
    ap.add_argument("--tokenizer", required=True, help="Qwen tokenizer.json")
    ap.add_argument("--out", required=True, help="output directory (Hugging Face layout)")
    ap.add_argument("--heldout", type=int, default=40, help="last paragraphs kept out of training")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("[train_qwen_shaped] needs a CUDA GPU (this is a device-machine script)")
    from tokenizers import Tokenizer
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer.from_file(args.tokenizer)
    eot = tok.token_to_id("<|endoftext|>")
    paras = paragraphs(args.text)
    train = paras[: len(paras) - args.heldout]
    ids = []
    for p in train:  # each story ends with <|endoftext|>, as Qwen's pre-training documents do
        ids += tok.encode(p + "\n\n").ids + [eot]
    data = torch.tensor(ids, dtype=torch.long)
    print(f"[train_qwen_shaped] {len(train)} paragraphs, {len(ids)} tokens (held out: the last {args.heldout})",
          flush=True)

    torch.manual_seed(args.seed)
    common = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, hidden_act="silu", use_sliding_window=False, attention_dropout=0.0,
                  bos_token_id=eot, eos_token_id=eot)
    try:  # transformers 5.x: RoPE settings in rope_parameters; 4.x: rope_theta
        cfg = Qwen2Config(**common, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    except (TypeError, ValueError, KeyError):
        cfg = Qwen2Config(**common, rope_theta=1e6)
    dev = torch.device("cuda")
    model = Qwen2ForCausalLM(cfg).to(dev)
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
            print(f"[train_qwen_shaped] step {step} loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)

    model.eval()
    held = torch.tensor(tok.encode("\n\n".join(paras[len(paras) - args.heldout :])).ids[: 4 * args.seq])
    with torch.no_grad():
        hl = model(input_ids=held[None].to(dev), labels=held[None].to(dev)).loss.item()
    os.makedirs(args.out, exist_ok=True)
    model.to(torch.float32).save_pretrained(args.out, safe_serialization=True)
    shutil.copy(args.tokenizer, os.path.join(args.out, "tokenizer.json"))
    summary = {"params": n_params, "steps": args.steps, "batch": args.batch, "seq": args.seq, "lr": args.lr,
               "train_tokens": len(ids), "final_train_loss": loss.item(), "heldout_loss": hl,
               "seconds": time.time() - t0, "torch": torch.__version__}
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"[train_qwen_shaped] {n_params / 1e6:.0f}M parameters; train loss {loss.item():.3f}, held-out loss "
          f"{hl:.3f} ({time.time() - t0:.0f} s); saved {args.out}", flush=True)


if __name__ == "__main__":
    main()
