#!/usr/bin/env bash
# Numerics fingerprint of the CPU executors, for refactors that must not change a bit (issue 35's acceptance):
# for every `convert --random` preset, a small model of the preset's architecture (its flags kept, its sizes
# shrunk by --shape; Gemma 3 with a sliding window shorter than the prompt), then
#   - the teacher-forced logits of a fixed prompt (`infer logits`) on the CPU engine at fp32 and fp16,
#     and through the MIL prefill on the emulator (fp16),
#   - the per-step training losses of 3 steps of `train --strategy cpu` (and static / dynamic where the
#     kernel strategies take the architecture), printed as the events' JSON numbers.
# One line per item: "<preset> <what> <sha256>" on stdout.
#
#   scripts/numerics_hash.sh ANELAB_BINARY > before.txt   # on the old tree
#   scripts/numerics_hash.sh ANELAB_BINARY > after.txt    # on the new tree
#   diff before.txt after.txt                             # empty when nothing changed
set -euo pipefail
BIN="$(readlink -f "${1:?usage: numerics_hash.sh ANELAB_BINARY [WORK_DIR]}")"
WORK="${2:-/tmp/anelab_numerics_hash}"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
h() { sha256sum "$1" | cut -c1-16; }

# Random uint16 tokens below 256 (every shrunk vocabulary is 512), a fixed seed: the training data.
python3 -c "
import random, struct
r = random.Random(7)
open('data.bin', 'wb').write(struct.pack('<4096H', *[r.randrange(1, 256) for _ in range(4096)]))"
ids="1 5 9 200 31 77 4 18 250 3 66 12 101 7 42 9 13 250 8 1 90 17 33 2"

presets=$("$BIN" convert --help | sed -n 's/.*--random TEXT:{\([^}]*\)}.*/\1/p' | tr ',' ' ')
[[ -n "$presets" ]] || { echo "numerics_hash: no presets in 'convert --help'" >&2; exit 1; }
for p in $presets; do
  shape='{"dim":64,"n_layers":3,"n_heads":4,"n_kv_heads":2,"head_dim":16,"hidden_dim":96,"vocab_size":512,"max_seq_len":128'
  case "$p" in
    gemma3*) shape+=',"n_layers":7,"sliding_window":8' ;;
    gpt2*) shape+=',"n_kv_heads":4' ;;
  esac
  shape+='}'
  "$BIN" convert --random "$p" --seed 3 --shape "$shape" "$p.anelab" >/dev/null 2>&1 ||
    { echo "$p convert FAILED"; continue; }
  for v in "cpu fp32" "cpu fp16" "emulator fp16"; do
    set -- $v
    if "$BIN" infer logits -q -m "$p.anelab" --ids "$ids" --backend "$1" --dtype "$2" -o "$p.$1.$2.npy" >/dev/null 2>&1
    then echo "$p logits-$1-$2 $(h "$p.$1.$2.npy")"; else echo "$p logits-$1-$2 refused"; fi
  done
  for s in cpu static dynamic; do
    rd="run.$p.$s"
    if "$BIN" train --init "$p.anelab" --data data.bin --strategy "$s" --steps 3 --batch-size 2 --seq-len 64 \
      --val-frac 0.1 --quiet --run-dir "$rd" --seed 5 >/dev/null 2>&1; then
      grep '"event":"step"' "$rd/events.jsonl" | sed 's/.*"loss":\([^,}]*\).*/\1/' >"$rd.losses"
      echo "$p train-$s $(h "$rd.losses") ($(tr '\n' ' ' <"$rd.losses"))"
    else echo "$p train-$s refused"; fi
  done
done
