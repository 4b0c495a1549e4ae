#!/usr/bin/env python3
"""Make tiny Hugging Face reference fixtures for anelab's safetensors converter and inference tests.

Needs torch + transformers (run on a machine that has them). Writes, under --out:

  gpt2/           GPT2LMHeadModel, fp32, n_embd 64, 2 layers, 4 heads, n_positions 64, vocab 512 (tied head)
  qwen2/          Qwen2ForCausalLM, fp32, hidden 64, 2 layers, 4 heads, 2 kv heads, intermediate 128,
                  vocab 512, rope_theta 1e6, rms_norm_eps 1e-6, tied embeddings (q/k/v biases)
  qwen2_bf16/     the same Qwen2 weights rounded to bf16 (dtype handling)
  llama_fp16/     LlamaForCausalLM, fp16, untied lm_head, no biases, saved SHARDED
                  (model.safetensors.index.json + several model-0000x-of-0000y.safetensors)
  reference.json  per model: prompts (token ids), HF logits [fp32] for every position of every prompt,
                  and a 32-token greedy continuation (with the top-1/top-2 logit margin of each step).

Reference logits are computed in fp32 on the CPU from the weights exactly as saved (bf16/fp16 weights
are upcast to fp32 first), with eager attention, so an fp32 engine reading the files should match
to ~1e-5. Weights use initializer_range 0.1 (larger than HF's 0.02) so logits are not near-uniform
and greedy choices are decisive. Everything is seeded: running it twice gives identical files.

Usage: python3 scripts/make_hf_fixtures.py --out OUTDIR [--tar OUT.tar.gz]
"""
import argparse
import json
import os
import tarfile

import torch

PROMPTS = [[1, 2, 3, 4, 5], [100, 7, 42, 300, 511, 0, 9, 250], [17]]
N_GREEDY = 32


def set_seed(seed):
    torch.manual_seed(seed)


def make_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     initializer_range=0.1, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
    set_seed(1234)
    m = GPT2LMHeadModel(cfg)
    randomise_norms(m, 1235)
    return m


def make_qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True,
                      initializer_range=0.1, hidden_act="silu", use_sliding_window=False,
                      attention_dropout=0.0, bos_token_id=0, eos_token_id=1)
    set_seed(2345)
    m = Qwen2ForCausalLM(cfg)
    randomise_norms(m, 2346)
    # HF initialises linear biases to zero; make the q/k/v biases non-zero so the test sees them.
    g = torch.Generator().manual_seed(2347)
    with torch.no_grad():
        for layer in m.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.copy_(torch.randn(proj.bias.shape, generator=g) * 0.1)
    return m


def make_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      attention_bias=False, initializer_range=0.1, hidden_act="silu",
                      bos_token_id=1, eos_token_id=2)
    set_seed(3456)
    m = LlamaForCausalLM(cfg)
    randomise_norms(m, 3457)
    return m


def randomise_norms(model, seed):
    """Norm weights default to ones (biases to zeros); perturb them so transposition/mapping bugs show."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("ln" in name or "norm" in name):
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + torch.randn(p.shape, generator=g) * 0.1)


@torch.no_grad()
def reference(model):
    model = model.float().eval()
    out = {"prompts": PROMPTS, "logits": [], "greedy": [], "greedy_min_margin": []}
    for prompt in PROMPTS:
        ids = torch.tensor([prompt], dtype=torch.long)
        logits = model(ids).logits[0]  # [T, vocab]
        out["logits"].append([[float("%.7g" % v) for v in row.tolist()] for row in logits])
        seq = list(prompt)
        margins = []
        for _ in range(N_GREEDY):
            last = model(torch.tensor([seq], dtype=torch.long)).logits[0, -1]
            top = torch.topk(last, 2)
            margins.append(float(top.values[0] - top.values[1]))
            seq.append(int(top.indices[0]))
        out["greedy"].append(seq[len(prompt):])
        out["greedy_min_margin"].append(min(margins))
    return out


def save(model, path, dtype, **kw):
    model = model.to(dtype)
    model.save_pretrained(path, safe_serialization=True, **kw)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--tar", default="", help="also pack the output directory into this .tar.gz")
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)

    import transformers
    refs = {"generator": "scripts/make_hf_fixtures.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "models": {}}

    gpt2 = save(make_gpt2(), os.path.join(args.out, "gpt2"), torch.float32)
    refs["models"]["gpt2"] = reference(gpt2)

    qwen = save(make_qwen2(), os.path.join(args.out, "qwen2"), torch.float32)
    refs["models"]["qwen2"] = reference(qwen)
    qwen_bf16 = save(qwen, os.path.join(args.out, "qwen2_bf16"), torch.bfloat16)
    refs["models"]["qwen2_bf16"] = reference(qwen_bf16)

    llama = save(make_llama(), os.path.join(args.out, "llama_fp16"), torch.float16, max_shard_size="100KB")
    refs["models"]["llama_fp16"] = reference(llama)

    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(refs, f, separators=(",", ":"))
    for name in os.listdir(args.out):
        p = os.path.join(args.out, name)
        if os.path.isdir(p):
            # Generation configs are irrelevant to anelab and vary between transformers versions.
            gc = os.path.join(p, "generation_config.json")
            if os.path.exists(gc):
                os.remove(gc)
    if args.tar:
        with tarfile.open(args.tar, "w:gz") as t:
            t.add(args.out, arcname="hf")
    print(json.dumps({k: {"greedy0": v["greedy"][0][:8], "min_margin": min(v["greedy_min_margin"])}
                      for k, v in refs["models"].items()}))


if __name__ == "__main__":
    main()
