#!/usr/bin/env python3
"""NumPy reference of the compressed-weight MIL ops (issue 39): dequantizes one case directory.

Usage: quant_ops_reference.py CASE_DIR

CASE_DIR holds case.json {"op": ..., "shape": [...], attributes} and .npy arrays (any float dtype; integer
values are exact in them). The dequantized weight is written to CASE_DIR/out.npy as float16.

Written from the public op definitions of coremltools (docs and the ops' value-inference methods), not from
anelab's code:
  - constexpr_affine_dequantize (iOS16, coremltools/converters/mil/mil/ops/defs/iOS16/constexpr_ops.py):
      output = scale * (quantized_data - zero_point), scale and zero_point a scalar or a vector along `axis`;
      computed in float32 and cast to the dtype of scale (fp16 here).
  - constexpr_blockwise_shift_scale (iOS18, .../defs/iOS18/compression.py):
      output = scale * (data - offset); data is cast to scale's dtype first; scale and offset have data's
      rank and each of their dims divides data's: dim i repeats data.shape[i] / scale.shape[i] times.
  - constexpr_lut_to_dense (iOS18, same file): lut has rank(indices) + 2, [..., NUM_PALETTES, VECTOR_SIZE];
      with VECTOR_SIZE 1, output[i...] = lut[i_0 / b_0, ..., i_k / b_k, indices[i...], 0], b_j =
      indices.shape[j] / lut.shape[j] (per tensor: all lut dims but the last two are 1).
Sub-byte data ("packed": true, packed.npy holding the bytes) are unpacked as MILBlob stores them
(mlmodel/src/MILBlob/SubByteTypes.cpp): element i occupies bits [nbits i, nbits (i + 1)) of the byte
stream, each byte low bit first (uint4: element 2k is the low nibble of byte k).
"""
import json
import os
import sys

import numpy as np


def fail(msg):
    print(f"[quant_ops_reference] {msg}", file=sys.stderr)
    sys.exit(1)


def load(case, name):
    path = os.path.join(case, name + ".npy")
    if not os.path.exists(path):
        fail(f"{path}: missing")
    return np.load(path)


def unpack(raw, nbits, count):
    raw = np.asarray(raw).astype(np.uint8)
    bits = np.unpackbits(raw, bitorder="little")  # bit b of byte k at position 8 k + b
    if bits.size < nbits * count:
        fail(f"packed data: {raw.size} bytes hold fewer than {count} {nbits}-bit values")
    bits = bits[: nbits * count].reshape(count, nbits).astype(np.int64)
    return (bits << np.arange(nbits, dtype=np.int64)).sum(axis=1)


def integer_data(case, cfg, name):
    """The op's integer tensor as int64, of cfg['shape'] (signed types as their signed values)."""
    shape = tuple(cfg["shape"])
    count = int(np.prod(shape))
    if cfg.get("packed", False):
        v = unpack(load(case, "packed"), int(cfg["nbits"]), count)
        if cfg.get("signed", False):  # two's complement of nbits
            v = np.where(v >= 1 << (cfg["nbits"] - 1), v - (1 << cfg["nbits"]), v)
    else:
        v = load(case, name).astype(np.float64)
        if not np.all(v == np.round(v)):
            fail(f"{name}.npy: non-integer values")
        v = v.astype(np.int64)
    return v.reshape(shape)


def repeat_blocks(t, shape):
    for axis, n in enumerate(shape):
        if n % t.shape[axis]:
            fail(f"block dims {t.shape} do not divide data shape {shape}")
        t = np.repeat(t, n // t.shape[axis], axis=axis)
    return t


def affine(case, cfg):
    q = integer_data(case, cfg, "quantized_data").astype(np.float32)
    scale = load(case, "scale").astype(np.float16)
    zp = load(case, "zero_point").astype(np.float32)
    axis = int(cfg["axis"])
    if scale.ndim == 1:  # a vector along `axis`: broadcast over every other dim
        other = tuple(i for i in range(q.ndim) if i != axis)
        scale = np.expand_dims(scale, other)
    if zp.ndim == 1:
        zp = np.expand_dims(zp, tuple(i for i in range(q.ndim) if i != axis))
    return (scale.astype(np.float32) * (q - zp)).astype(np.float16)


def blockwise(case, cfg):
    scale = load(case, "scale").astype(np.float16)
    data = integer_data(case, cfg, "data").astype(scale.dtype)
    if scale.ndim != data.ndim:
        fail(f"scale rank {scale.ndim} != data rank {data.ndim}")
    scale = repeat_blocks(scale, data.shape)
    if os.path.exists(os.path.join(case, "offset.npy")):
        offset = repeat_blocks(load(case, "offset").astype(scale.dtype), data.shape)
        data = data - offset
    return scale * data


def lut_to_dense(case, cfg):
    idx = integer_data(case, cfg, "indices")
    lut = load(case, "lut").astype(np.float16)
    if lut.ndim != idx.ndim + 2 or lut.shape[-1] != 1:
        fail(f"lut shape {lut.shape}: want rank {idx.ndim + 2} with vector size 1")
    if idx.min() < 0 or idx.max() >= lut.shape[-2]:
        fail(f"indices outside [0, {lut.shape[-2]})")
    group = [idx.shape[i] // lut.shape[i] for i in range(idx.ndim)]
    # Palette coordinates of every element: its position divided by the block along each dim.
    coords = np.indices(idx.shape)
    pal = tuple(coords[i] // group[i] for i in range(idx.ndim))
    return lut[pal + (idx, np.zeros_like(idx))]


OPS = {
    "constexpr_affine_dequantize": affine,
    "constexpr_blockwise_shift_scale": blockwise,
    "constexpr_lut_to_dense": lut_to_dense,
}


def main():
    if len(sys.argv) != 2:
        fail("usage: quant_ops_reference.py CASE_DIR")
    case = sys.argv[1]
    with open(os.path.join(case, "case.json")) as f:
        cfg = json.load(f)
    op = cfg.get("op")
    if op not in OPS:
        fail(f"{case}/case.json: op {op!r} is not one of {sorted(OPS)}")
    out = np.ascontiguousarray(OPS[op](case, cfg), dtype=np.float16)
    if list(out.shape) != list(cfg["shape"]):
        fail(f"output shape {out.shape} != {cfg['shape']}")
    tmp = os.path.join(case, "out.npy.tmp")
    with open(tmp, "wb") as f:
        np.save(f, out)
    os.replace(tmp, os.path.join(case, "out.npy"))


if __name__ == "__main__":
    main()
