#!/bin/bash
# On the device machine: a full-training step against a LoRA step (--strategy cpu, r 8, every target) of stories110m
# (B 4, T 256; an fp32 model file, as llama2.c's stories110M.bin) and of the Qwen2.5-0.5B shape without q/k/v bias
# (B 1, T 256; a bf16 model file, as the HF release), in one run; prints the mean of steps 2-5 of each (ms, forward,
# backward, head, dW, optimizer), the process's peak RSS, and for the LoRA runs issue 37's memory bound: peak RSS <=
# 1.3 x (the model file + the activations the run reports in its `memory` event) (docs/finetuning.md). Each LoRA run
# twice: the base's products in fp32 (`--lora`) and in bf16 (`--lora --lora-compute bf16`, *_lora16_*).
# The two model files are seeded random weights written here by `anelab convert --random` (no download).
#   stage here (git-ignored): DIR/anelab (this tree's build; or build it on the device), DIR/lib/ (the non-glibc
#   shared libraries ldd lists), DIR/rand32k.bin (flat uint16 random tokens < 32000), DIR/rand152k.bin + .json
#   (anelab-tokens uint32 < 151936)
#   on device:   OUT=dir [ROUNDS=n] scripts/lora_speed_device.sh DIR
set -u
D=$(realpath "$1")
export LD_LIBRARY_PATH=$D/lib
A=$D/anelab
if ! $A --help >/dev/null 2>&1; then
  echo "[lora_speed_device] DIR/anelab does not start: $($A --help 2>&1 | head -2)"; exit 3
fi
lscpu | grep -E "Model name|^CPU\(s\)"
echo "bf16 instructions: $(grep -o -w -E 'avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
M=/tmp/lora_speed_models; mkdir -p $M
[ -f $M/s110.anelab ] || $A convert --random stories110m $M/s110.anelab > /dev/null
[ -f $M/q05.bf16.anelab ] || $A convert --random qwen2.5-0.5b $M/q05.bf16.anelab --dtype bf16 \
  --shape '{"qkv_bias":false}' > /dev/null
ls -l $M
bench() {
  local name=$1; shift
  local dir=/tmp/r_$name; rm -rf $dir
  taskset -c 0-7 $A train "$@" --threads 8 --run-dir $dir --eval-batches 0 --quiet --steps 100 > /tmp/$name.log 2>&1 &
  local pid=$! n=0 hwm=0 t0=$(date +%s)
  while kill -0 $pid 2>/dev/null; do
    n=$(grep -c '"event":"step"' $dir/events.jsonl 2>/dev/null); n=${n:-0}
    hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status 2>/dev/null || echo $hwm)
    [ "$n" -ge 5 ] && break
    [ $(( $(date +%s) - t0 )) -gt 70 ] && break
    sleep 0.3
  done
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  cp $dir/events.jsonl $OUT/$name.events.jsonl 2>/dev/null; cp /tmp/$name.log $OUT/$name.log
  ${PYTHON:-/opt/torch/.venv/bin/python3} - "$name" "$dir/events.jsonl" "$hwm" <<'PY'
import json, sys
name, path, hwm = sys.argv[1], sys.argv[2], sys.argv[3]
lines = [json.loads(l) for l in open(path)]
ev = [e for e in lines if e.get('event') == 'step']
s = ev[1:5]
k = ['ms', 'ms_fwd', 'ms_bwd', 'ms_cls', 'ms_cpu_dw', 'ms_optim']
peak = int(hwm) / 1024
print(name, 'steps', len(ev), ' '.join('%s %.0f' % (x, sum(e[x] for e in s) / len(s)) for x in k), 'peak_rss_mb %.0f' % peak)
mem = [e for e in lines if e.get('event') == 'memory'][0]
mib = lambda k: (mem.get(k) or 0) / 1048576
bound = 1.3 * (mib('file_bytes') + mib('activation_bytes'))
print('  memory (MiB): base %.1f (%s), activations %.1f, reported total %.1f, file %.1f; peak RSS %.1f vs bound '
      '1.3 x (file + activations) = %.1f: %.2f x (file + activations)' %
      (mib('base_bytes'), mem.get('base_types', ''), mib('activation_bytes'), mib('total_bytes'), mib('file_bytes'),
       peak, bound, peak / (mib('file_bytes') + mib('activation_bytes'))))
PY
}
S110="--init $M/s110.anelab --data $D/rand32k.bin --batch-size 4 --seq-len 256"
Q05="--init $M/q05.bf16.anelab --data $D/rand152k.bin --batch-size 1 --seq-len 256"
# ROUNDS (default 1) alternations of full and LoRA runs: the machine's speed drifts between processes, so each ratio
# is best read from the runs next to each other.
for r in $(seq "${ROUNDS:-1}"); do
  bench s110_full_r$r $S110
  bench s110_lora_r$r $S110 --lora
  bench s110_lora16_r$r $S110 --lora --lora-compute bf16
  bench q05_full_r$r $Q05
  bench q05_lora_r$r $Q05 --lora
  bench q05_lora16_r$r $Q05 --lora --lora-compute bf16
done
