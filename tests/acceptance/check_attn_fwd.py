#!/usr/bin/env python3
"""Acceptance check for `anelab mil run`.

Runs the hand-written, ANE-dialect Stories110M attention-forward program attn_fwd_stories110m.mil
(RMSNorm, three 1x1 convs from one three-chunk blob file, reshape/transpose to 12 heads, matmul,
scale, additive causal-mask blob, softmax, matmul, output conv, concat of six taps) through
`anelab mil run` on seeded random weights, and compares every tap with an independent float64
NumPy reference of the same program.

The blob files are written here by an independent implementation of the MIL blob storage format
(coremltools MILBlob/Blob/StorageFormat.hpp): 64-byte storage header (uint32 count, uint32
version 2), per blob at the next multiple of 64 a 64-byte metadata with sentinel 0xDEADBEEF,
uint32 data type (Float16 = 1) at +4, uint64 size at +8, uint64 absolute data offset at +16.

Tolerance: fp16 storage rounds every intermediate to 11 significant bits (unit roundoff
u = 2^-11 ~ 4.9e-4). A chain of ~10 dependent fp16 roundings gives relative errors of a few u per
element, i.e. NMSE ~ (3u)^2 ~ 2e-6; we require NMSE < 1e-5 per tap (and report the values).

usage: check_attn_fwd.py ANELAB_BINARY PROGRAM.mil WORK_DIR
"""
import os
import struct
import subprocess
import sys

import numpy as np

D, H, HD, S = 768, 12, 64, 256
NMSE_LIMIT = 1e-5


def blob(chunks):
    """Bytes of a blob file holding fp16 chunks (list of float arrays), and the MIL offsets."""
    out = bytearray(64)
    struct.pack_into("<II", out, 0, len(chunks), 2)
    offsets = []
    for arr in chunks:
        payload = np.asarray(arr, dtype=np.float16).tobytes()
        out += bytes(-len(out) % 64)
        start = len(out)
        hdr = bytearray(64)
        struct.pack_into("<IIQQ", hdr, 0, 0xDEADBEEF, 1, len(payload), start + 64)
        out += hdr + payload
        offsets.append(start)
    return bytes(out), offsets


def reference(x, rw, wq, wk, wv, wo, mask):
    """float64 reference of the program; weights are the fp16-rounded values the kernel sees."""
    f = np.float64
    x = x.astype(f)[0, :, 0, :]                                   # [D, S]
    invd = f(np.float16(0.001302))
    eps = f(np.float16(0.00001))
    rrms = (np.sum(x * x, axis=0, keepdims=True) * invd + eps) ** -0.5
    xn = x * rrms * rw.astype(f)[:, None]
    q, k, v = (w.astype(f) @ xn for w in (wq, wk, wv))            # [D, S]
    heads = lambda t: t.reshape(H, HD, S).transpose(0, 2, 1)      # [H, S, HD]
    sc = heads(q) @ heads(k).transpose(0, 2, 1) * 0.125 + mask.astype(f)[None]
    sc = sc - sc.max(axis=-1, keepdims=True)
    p = np.exp(sc)
    p /= p.sum(axis=-1, keepdims=True)
    a = (p @ heads(v)).transpose(0, 2, 1).reshape(D, S)           # [D, S]
    o = wo.astype(f) @ a
    return {"oo": o, "qf": q, "kf": k, "vf": v, "af": a, "xn": xn}


def main():
    binary, program, work = sys.argv[1:4]
    rng = np.random.default_rng(20261121)
    wdir = os.path.join(work, "model", "weights")
    os.makedirs(wdir, exist_ok=True)
    x = rng.standard_normal((1, D, 1, S)).astype(np.float16)
    rw = (1.0 + 0.1 * rng.standard_normal(D)).astype(np.float16)
    wq, wk, wv, wo = (rng.normal(0, 0.05, (D, D)).astype(np.float16) for _ in range(4))
    mask = np.where(np.tril(np.ones((S, S))) > 0, 0.0, -65504.0).astype(np.float16)
    files = {"rms1.bin": [rw], "qkv.bin": [wq, wk, wv], "wo.bin": [wo], "mask.bin": [mask]}
    for name, chunks in files.items():
        data, offsets = blob(chunks)
        assert offsets == [64 + i * (64 + chunks[0].nbytes) for i in range(len(chunks))]
        with open(os.path.join(wdir, name), "wb") as fh:
            fh.write(data)
    np.save(os.path.join(work, "x.npy"), x)
    out_dir = os.path.join(work, "out")
    cmd = [binary, "mil", "run", program, "--model-dir", os.path.join(work, "model"),
           "--in", "x=" + os.path.join(work, "x.npy"), "--out-dir", out_dir]
    subprocess.run(cmd, check=True)
    got = np.load(os.path.join(out_dir, "out.npy")).astype(np.float64)
    assert got.shape == (1, 6 * D, 1, S), got.shape
    ref = reference(x, rw, wq, wk, wv, wo, mask)
    ok = True
    for i, tap in enumerate(["oo", "qf", "kf", "vf", "af", "xn"]):
        g = got[0, i * D:(i + 1) * D, 0, :]
        r = ref[tap]
        nmse = float(np.sum((g - r) ** 2) / np.sum(r ** 2))
        maxrel = float(np.max(np.abs(g - r)) / np.max(np.abs(r)))
        finite = bool(np.all(np.isfinite(g)))
        good = finite and nmse < NMSE_LIMIT
        ok &= good
        print(f"{tap}: nmse={nmse:.3e} max_abs_err/max_abs={maxrel:.3e} finite={finite} {'ok' if good else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
