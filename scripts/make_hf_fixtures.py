#!/usr/bin/env python3
"""Make tiny Hugging Face reference fixtures for anelab's safetensors converter and inference tests.

Needs torch + transformers (run on a machine that has them). Writes, under --out:

  gpt2/           GPT2LMHeadModel, fp32, n_embd 64, 2 layers, 4 heads, n_positions 64, vocab 512 (tied head)
  qwen2/          Qwen2ForCausalLM, fp32, hidden 64, 2 layers, 4 heads, 2 kv heads, intermediate 128,
                  vocab 512, rope_theta 1e6, rms_norm_eps 1e-6, tied embeddings (q/k/v biases)
  qwen2_bf16/     the same Qwen2 weights rounded to bf16 (dtype handling)
  llama_fp16/     LlamaForCausalLM, fp16, untied lm_head, no biases, saved SHARDED
                  (model.safetensors.index.json + several model-0000x-of-0000y.safetensors)
  reference.json  per model above: prompts (token ids), HF logits [fp32] for every position of every
                  prompt, and a 32-token greedy continuation (with the top-1/top-2 logit margin of each step).

The architectures of the models people run today (bf16, as these families ship; tied embeddings;
vocab 512), each with its own reference file reference_<name>.json (same fields, plus "about": what
the model exercises; prompts of 40, 8 and 1 tokens; 24-token greedy continuations):

  qwen3_bf16/     Qwen3ForCausalLM: hidden 64, 2 layers, 4 heads, 2 kv heads (GQA), explicit head_dim 32
                  (!= hidden/heads = 16), per-head q_norm/k_norm, no q/k/v bias, rope_theta 1e6
  llama3_bf16/    LlamaForCausalLM with RoPE scaling of type llama3 (factor 8, low_freq_factor 1,
                  high_freq_factor 4, original_max_position_embeddings 32: the 40-token prompt is longer
                  than the original context; rope_theta 1e4 so the 8 frequencies of head_dim 16 cover the
                  kept, the smoothed and the scaled bands), GQA 4/2
  gemma3_bf16/    Gemma3ForCausalLM (Gemma3TextConfig): 3 layers with layer_types sliding, sliding, full;
                  sliding_window 4 (prompts longer than it), head_dim 32, 4 heads, 1 kv head,
                  query_pre_attn_scalar 24 (!= head_dim), final_logit_softcapping 4, rope_theta 1e6 for
                  full attention and rope_local_base_freq 1e4 for sliding attention, GeGLU (tanh GELU),
                  norms stored as offsets from 1 (perturbed around 0)
  qwen35_bf16/    Qwen3_5ForCausalLM (Qwen3_5TextConfig), the hybrid Qwen3.5 dense text model: 4 layers with
                  layer_types linear, linear, linear, full; Gated DeltaNet layers with 2 key heads of dim 16 and
                  4 value heads of dim 16 (each key head serves 2 value heads), conv kernel 4, A_log = log of
                  U(0.1, 1) and dt_bias around 1 (per-step decays 0.3..0.9, so the state remembers the prompt);
                  the full-attention layer: 4 heads, 2 kv heads, head_dim 32, output gate, q/k norm,
                  partial_rotary_factor 0.25 (RoPE on 8 of 32 dims), rope_theta 1e7; intermediate 64; norms
                  stored as offsets from 1 (perturbed around 0) except the gated norm of the DeltaNet (around 1).
                  The 40-token prompt is one chunk of transformers' chunked delta rule (chunk 64).

Made with torch 2.11.0+cu130 and transformers 5.17.0 on the device machine (the versions are recorded
in every reference file); logits span about [-3.5, 3.5] and the smallest top-1/top-2 margin of a greedy
step is 0.004 (Qwen3), 0.006 (Llama 3), 0.04 (Gemma 3), 0.006 (Qwen3.5): an fp32 engine must reproduce the ids, an fp16
one may not; the configs are passed in transformers 5.x style (rope_parameters) and fall back to the 4.x
keywords (rope_theta, rope_scaling, rope_local_base_freq) on an older transformers.

Reference logits are computed in fp32 on the CPU from the saved files loaded back in fp32 (bf16/fp16
weights upcast; buffers such as the RoPE inverse frequencies built afresh in fp32, not rounded to the
storage dtype), with eager attention, so an fp32 engine reading the files should match to ~1e-5. Weights use initializer_range 0.1 (larger than HF's 0.02) so logits are not near-uniform
and greedy choices are decisive. Everything is seeded: running it twice gives identical files.

Usage: python3 scripts/make_hf_fixtures.py --out OUTDIR [--only NAME ...] [--tar OUT.tar.gz]
"""
import argparse
import json
import os
import tarfile

import torch

PROMPTS = [[1, 2, 3, 4, 5], [100, 7, 42, 300, 511, 0, 9, 250], [17]]
N_GREEDY = 32
# The newer architectures: a 40-token prompt (longer than Llama 3's original context of 32 and Gemma 3's
# sliding window of 4), the 8-token one and a single token; 24-token greedy continuations.
LONG_PROMPTS = [[int(v) for v in torch.randint(3, 512, (40,), generator=torch.Generator().manual_seed(4040))],
                PROMPTS[1], PROMPTS[2]]
N_GREEDY_LONG = 24


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


def make_config(cls, v5, v4):
    """The config in transformers 5.x style (v5 keywords); the 4.x keywords (v4) where 5.x's are refused.
    Eager attention (the reference computes softmax(QK^T)V as written)."""
    try:
        cfg = cls(**v5)
    except (TypeError, ValueError, KeyError):
        cfg = cls(**v4)
    cfg._attn_implementation = "eager"
    return cfg


def make_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM
    common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, initializer_range=0.1,
                  hidden_act="silu", use_sliding_window=False, attention_dropout=0.0, bos_token_id=0,
                  eos_token_id=1)
    cfg = make_config(Qwen3Config, dict(common, rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
                      dict(common, rope_theta=1e6))
    set_seed(4567)
    m = Qwen3ForCausalLM(cfg)
    randomise_norms(m, 4568)
    return m


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}


def make_llama3():
    from transformers import LlamaConfig, LlamaForCausalLM
    common = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                  tie_word_embeddings=True, attention_bias=False, mlp_bias=False, initializer_range=0.1,
                  hidden_act="silu", bos_token_id=1, eos_token_id=2)
    cfg = make_config(LlamaConfig, dict(common, rope_parameters=dict(LLAMA3_ROPE, rope_theta=1e4)),
                      dict(common, rope_theta=1e4, rope_scaling=dict(LLAMA3_ROPE)))
    set_seed(5678)
    m = LlamaForCausalLM(cfg)
    randomise_norms(m, 5679)
    return m


def make_gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, initializer_range=0.1,
                  hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24, sliding_window=4,
                  layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                  final_logit_softcapping=4.0, attn_logit_softcapping=None, attention_bias=False,
                  attention_dropout=0.0, pad_token_id=0, bos_token_id=2, eos_token_id=1)
    v5 = dict(common, rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                       "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    cfg = make_config(Gemma3TextConfig, v5, dict(common, rope_theta=1e6, rope_local_base_freq=1e4))
    set_seed(6789)
    m = Gemma3ForCausalLM(cfg)
    randomise_norms(m, 6790, weight_base=0.0)  # Gemma's RMSNorm scales by (1 + weight)
    return m


def make_qwen35():
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    common = dict(vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, initializer_range=0.1,
                  hidden_act="silu", attention_dropout=0.0, linear_conv_kernel_dim=4, linear_key_head_dim=16,
                  linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                  layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
                  bos_token_id=0, eos_token_id=1)
    rope = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}
    cfg = make_config(Qwen3_5TextConfig, dict(common, rope_parameters=rope),
                      dict(common, rope_theta=1e7, partial_rotary_factor=0.25))
    set_seed(3535)
    m = Qwen3_5ForCausalLM(cfg)
    randomise_norms(m, 3536, weight_base=0.0)  # Qwen3_5RMSNorm scales by (1 + weight)
    g = torch.Generator().manual_seed(3537)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("linear_attn.norm.weight"):  # the gated norm scales by weight itself
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)
            elif name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.1, 1.0, generator=g).log())
            elif name.endswith("dt_bias"):
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)
    return m


def randomise_norms(model, seed, weight_base=1.0):
    """Norm weights default to ones (biases to zeros); perturb them so transposition/mapping bugs show."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("ln" in name or "norm" in name):
                base = weight_base if name.endswith("weight") else 0.0
                p.copy_(base + torch.randn(p.shape, generator=g) * 0.1)


@torch.no_grad()
def reference(model, prompts=PROMPTS, n_greedy=N_GREEDY):
    model = model.float().eval()
    out = {"prompts": prompts, "logits": [], "greedy": [], "greedy_min_margin": []}
    for prompt in prompts:
        ids = torch.tensor([prompt], dtype=torch.long)
        logits = model(ids).logits[0]  # [T, vocab]
        out["logits"].append([[float("%.7g" % v) for v in row.tolist()] for row in logits])
        seq = list(prompt)
        margins = []
        for _ in range(n_greedy):
            last = model(torch.tensor([seq], dtype=torch.long)).logits[0, -1]
            top = torch.topk(last, 2)
            margins.append(float(top.values[0] - top.values[1]))
            seq.append(int(top.indices[0]))
        out["greedy"].append(seq[len(prompt):])
        out["greedy_min_margin"].append(min(margins))
    return out


def save(model, path, dtype, **kw):
    """Saves the model in `dtype` and returns it loaded back from the files in fp32: the reference then computes
    from exactly the saved weights, with buffers (RoPE inverse frequencies) built afresh in fp32 as a user
    loading the checkpoint in fp32 gets them (model.to(bfloat16) would round those buffers too)."""
    model.to(dtype).save_pretrained(path, safe_serialization=True, **kw)
    return type(model).from_pretrained(path, dtype=torch.float32, attn_implementation="eager")


NEW_MODELS = [
    ("qwen3_bf16", make_qwen3, "Qwen3: q_norm/k_norm, head_dim 32 != hidden/heads, GQA 4/2, tied, bf16"),
    ("llama3_bf16", make_llama3, "Llama 3: rope_scaling llama3 (factor 8, low 1, high 4, original context 32 "
     "< the 40-token prompt), GQA 4/2, tied, bf16"),
    ("gemma3_bf16", make_gemma3, "Gemma 3 text: sliding_window 4 < prompts, layer_types sliding/sliding/full, "
     "query_pre_attn_scalar 24, final_logit_softcapping 4, rope 1e6 global / 1e4 local, GQA 4/1, tied, bf16"),
    ("qwen35_bf16", make_qwen35, "Qwen3.5: layer_types linear x3 + full; Gated DeltaNet 2 key heads / 4 value "
     "heads of dim 16, conv kernel 4; gated attention 4/2 heads, head_dim 32, partial RoPE 0.25, rope_theta 1e7; "
     "(1 + w) norms, tied, bf16"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--tar", default="", help="also pack the output directory into this .tar.gz")
    ap.add_argument("--only", nargs="*", default=[], help="make only these (e.g. qwen3_bf16 llama3_bf16)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)

    import transformers
    refs = {"generator": "scripts/make_hf_fixtures.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "models": {}}

    want = lambda name: not args.only or name in args.only
    if want("gpt2"):
        gpt2 = save(make_gpt2(), os.path.join(args.out, "gpt2"), torch.float32)
        refs["models"]["gpt2"] = reference(gpt2)
    if want("qwen2"):
        qwen = save(make_qwen2(), os.path.join(args.out, "qwen2"), torch.float32)
        refs["models"]["qwen2"] = reference(qwen)
        qwen_bf16 = save(qwen, os.path.join(args.out, "qwen2_bf16"), torch.bfloat16)
        refs["models"]["qwen2_bf16"] = reference(qwen_bf16)
    if want("llama_fp16"):
        llama = save(make_llama(), os.path.join(args.out, "llama_fp16"), torch.float16, max_shard_size="100KB")
        refs["models"]["llama_fp16"] = reference(llama)
    if refs["models"]:
        with open(os.path.join(args.out, "reference.json"), "w") as f:
            json.dump(refs, f, separators=(",", ":"))

    # The newer architectures, bf16, one reference file each.
    for name, make, about in NEW_MODELS:
        if not want(name):
            continue
        m = save(make(), os.path.join(args.out, name), torch.bfloat16)
        ref = reference(m, LONG_PROMPTS, N_GREEDY_LONG)
        ref["about"] = about
        ref["config"] = m.config.to_dict()
        r = {k: refs[k] for k in ("generator", "torch", "transformers")}
        r["models"] = {name: ref}
        refs.setdefault("new", {})[name] = ref
        with open(os.path.join(args.out, "reference_%s.json" % name), "w") as f:
            json.dump(r, f, separators=(",", ":"), default=str)
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
    every = dict(refs["models"], **refs.get("new", {}))
    print(json.dumps({k: {"greedy0": v["greedy"][0][:8], "min_margin": min(v["greedy_min_margin"]),
                          "logit_range": [min(min(r) for p in v["logits"] for r in p),
                                          max(max(r) for p in v["logits"] for r in p)]}
                      for k, v in every.items()}))


if __name__ == "__main__":
    main()
