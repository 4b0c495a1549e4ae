#!/usr/bin/python3
"""Synthetic but realistic events.jsonl writer (schema: docs/events.md) for dashboard tests.

Models a stories260K fine-tuning run: warmup + cosine LR, a noisy decaying loss, evals, samples,
checkpoints, compile batches and one exec-restart (compile budget). Usage:

  gen_events.py OUT.jsonl [--steps N] [--seed S] [--restart-at STEP] [--malformed]
                [--live --interval-ms MS]   # append while sleeping (partial lines included)

Used to make tests/dashboard/fixtures/*/events.jsonl and, with --live, as a stand-in trainer."""
import argparse
import json
import math
import os
import random
import sys
import time

SAMPLES = [
    "Once upon a time, there was a little girl named Lily. She liked to play in the park with her dog.",
    "One day, a big bear came to the forest. The bear was very hungry and wanted to find some honey.",
    "Tom and Sue went to the beach. They made a sand castle and the sun was warm and bright.",
    "The little bird could not fly. Mom said, \"Be brave!\" and the bird tried again and again.",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--restart-at", type=int, default=250)
    ap.add_argument("--malformed", action="store_true")
    ap.add_argument("--live", action="store_true")
    ap.add_argument("--interval-ms", type=float, default=20)
    ap.add_argument("--run", default="stories260k-ft")
    ap.add_argument("--t0", type=float, default=1763770000.0)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    t = time.time() if a.live else a.t0
    f = open(a.out, "a" if a.live else "w")
    line_no = [0]

    def emit(ev, **kw):
        nonlocal t
        rec = {"event": ev, "t": round(t, 3), **kw}
        s = json.dumps(rec, separators=(",", ":"))
        line_no[0] += 1
        if a.live and rnd.random() < 0.2:  # a partly written line, completed a bit later
            cut = len(s) // 2
            f.write(s[:cut]); f.flush(); time.sleep(a.interval_ms / 4000); f.write(s[cut:] + "\n")
        else:
            f.write(s + "\n")
        if a.live:
            f.flush()

    cfg = {"run": a.run, "model": "stories260K", "data": "tinystories/val", "steps": a.steps, "lr": 5e-4,
           "warmup": 20, "min_lr": 5e-5, "batch": 4, "seq_len": 256, "accum": 2, "grad_clip": 1.0,
           "eval_every": 50, "sample_every": 100, "ckpt_every": 100, "loss_scale": 256,
           "backend": "emulator", "device": "m4", "strategy": "static", "seed": a.seed}
    model = {"arch": "llama", "dim": 64, "hidden_dim": 172, "n_layers": 5, "n_heads": 8, "n_kv_heads": 4,
             "vocab_size": 512, "seq_len": 512, "params": 260032}
    pid = os.getpid() if a.live else 4242

    def start(step, restart):
        emit("run_start", step=step, schema=1, run=a.run, pid=pid, resumed=False, restart=restart,
             config=cfg, model=model, backend="emulator", device="m4", strategy="static")

    def compile_batch(step, total):
        emit("compile", step=step, kernels=10, ms=round(180 + rnd.random() * 60, 1), compiles_total=total,
             budget=119)

    start(0, 0)
    compiles = 10
    compile_batch(0, compiles)
    restarts = 0
    scale = 256.0
    best = None
    for step in range(1, a.steps + 1):
        if a.restart_at and step == a.restart_at:
            emit("restart", step=step - 1, reason="compile_budget", compiles_total=110, budget=119)
            restarts += 1
            t += 0.8
            start(step - 1, restarts)
            compiles = 10
            compile_batch(step - 1, compiles)
        warm = min(1.0, step / cfg["warmup"])
        prog = step / a.steps
        lr = cfg["min_lr"] + (cfg["lr"] - cfg["min_lr"]) * 0.5 * (1 + math.cos(math.pi * prog))
        lr *= warm
        loss = 1.42 + 0.75 * math.exp(-step / 90.0) + rnd.gauss(0, 0.05)
        skipped = rnd.random() < 0.01
        if skipped:
            scale /= 2
        elif step % 200 == 0:
            scale *= 2
        ms_kernel = 38 + rnd.gauss(0, 1.5)
        ms_dw = 5 + abs(rnd.gauss(0, 1))
        ms_st = 6 + rnd.gauss(0, 0.4)
        ms_other = 9 + abs(rnd.gauss(0, 2)) + (30 if step == a.restart_at else 0)
        ms = ms_kernel + ms_dw + ms_st + ms_other
        tokens = cfg["batch"] * cfg["seq_len"] * cfg["accum"]
        t += ms / 1000.0
        emit("step", step=step, loss=round(loss, 4), lr=float("%.6g" % lr), grad_norm=round(abs(0.4 + 1.2 * math.exp(-step / 150) +
             rnd.gauss(0, 0.1)), 4), loss_scale=scale, skipped=skipped, tokens=tokens,
             tokens_per_s=round(tokens / (ms / 1000.0), 1), ms=round(ms, 2), ms_kernel=round(ms_kernel, 2),
             ms_cpu_dw=round(ms_dw, 2), ms_staging=round(ms_st, 2), ms_other=round(ms_other, 2),
             compiles_total=compiles, restarts=restarts, rss_mb=round(88 + step * 0.01 + rnd.random(), 1),
             cpu_pct=round(185 + rnd.gauss(0, 6), 1))
        if a.malformed and step in (7, 19):
            f.write('{"event":"step","step":%d,"loss":\n' % step if step == 7 else "garbage line\n")
            line_no[0] += 1
        if step % cfg["eval_every"] == 0:
            t += 0.3
            v = 1.48 + 0.7 * math.exp(-step / 100.0) + rnd.gauss(0, 0.01)
            emit("eval", step=step, val_loss=round(v, 4), val_tokens=8192)
            if best is None or v < best:
                best = v
                emit("checkpoint", step=step, path="checkpoints/%s/best.ckpt" % a.run, kind="best",
                     val_loss=round(v, 4))
        if step % cfg["sample_every"] == 0:
            emit("sample", step=step, text=rnd.choice(SAMPLES), prompt="", temperature=0.8, top_p=0.9, tokens=64)
        if step % cfg["ckpt_every"] == 0:
            emit("checkpoint", step=step, path="checkpoints/%s/last.ckpt" % a.run, kind="last")
        if a.live:
            time.sleep(a.interval_ms / 1000.0)
    emit("run_end", step=a.steps, steps=a.steps, wall_s=round(t - (a.t0 if not a.live else t), 1), compile_s=2.1,
         train_ms_per_step=58.4, gflops=3.1, final_loss=round(loss, 4), best_val_loss=round(best or 0, 4))
    f.close()


if __name__ == "__main__":
    sys.exit(main())
