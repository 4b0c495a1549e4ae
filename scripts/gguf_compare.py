#!/usr/bin/env python3
"""Compares the tensors of two GGUF files byte for byte (metadata aside).

Usage: scripts/gguf_compare.py A.gguf B.gguf
Prints one line: "N/M tensors identical" (M: tensors in A), then, when some differ or are missing, one line per
such tensor with its ggml type in each file. Exit status 0 whether or not they match; 2 on an unreadable file.
Used by scripts/quant_interop.sh to compare anelab's quantizer with llama-quantize on the same fp32 file.
"""
import struct
import sys

# GGUF metadata value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array,
# 10 u64, 11 i64, 12 f64.
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# ggml type -> (values per block, bytes per block) for the types anelab reads and writes.
_BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          12: (256, 144), 13: (256, 176), 14: (256, 210)}
_NAMES = {0: "F32", 1: "F16", 30: "BF16", 2: "Q4_0", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 12: "Q4_K", 13: "Q5_K",
          14: "Q6_K"}


class Reader:
    def __init__(self, data, path):
        self.d, self.p, self.path = data, 0, path

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.d[self.p:self.p + n].decode("utf-8", "replace")
        self.p += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            if et in _SCALAR:
                self.p += _SCALAR[et] * n
                return None
            return [self.value(et) for _ in range(n)]
        if t not in _SCALAR:
            raise ValueError(f"{self.path}: metadata value type {t}")
        v = self.d[self.p:self.p + _SCALAR[t]]
        self.p += _SCALAR[t]
        return int.from_bytes(v, "little") if t in (4, 10) else v


def tensors(path):
    with open(path, "rb") as f:
        r = Reader(f.read(), path)
    if r.d[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    r.p = 4
    r.take("I")  # version
    n_tensors, n_kv = r.take("Q"), r.take("Q")
    align = 32
    for _ in range(n_kv):
        key, t = r.string(), r.take("I")
        v = r.value(t)
        if key == "general.alignment" and isinstance(v, int):
            align = v
    infos = []
    for _ in range(n_tensors):
        name, nd = r.string(), r.take("I")
        ne = [r.take("Q") for _ in range(nd)]
        t, off = r.take("I"), r.take("Q")
        infos.append((name, ne, t, off))
    base = (r.p + align - 1) // align * align
    out = {}
    for name, ne, t, off in infos:
        if t not in _BLOCK:
            raise ValueError(f"{path}: tensor {name} has ggml type {t}")
        n = 1
        for e in ne:
            n *= e
        vals, nbytes = _BLOCK[t]
        out[name] = (t, r.d[base + off:base + off + n // vals * nbytes])
    return out


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
    except (OSError, ValueError, struct.error) as e:
        print(f"[gguf_compare] {e}", file=sys.stderr)
        return 2
    same = [n for n in a if n in b and a[n] == b[n]]
    print(f"{len(same)}/{len(a)} tensors identical")
    for n in a:
        if n not in b:
            print(f"  {n}: missing in {sys.argv[2]}")
        elif a[n] != b[n]:
            print(f"  {n}: {_NAMES[a[n][0]]} vs {_NAMES[b[n][0]]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
