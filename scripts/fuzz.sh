#!/usr/bin/env bash
# Fuzzing with libFuzzer under ASan/UBSan (docs/fuzzing.md): builds the instrumented readers and one harness
# per reader into build-fuzz/ (clang, -DANELAB_FUZZ=ON), builds the seed corpora, runs the harnesses (as many at once
# as there are cores) and prints executions, coverage and crashes per harness. --ci builds at -O0, the rest at -O1.
#
#   scripts/fuzz.sh [--time S | --runs N] [--fresh] [TARGET...]   run each harness S seconds (default 60) or
#                                                                 N executions; TARGETs: npy, gguf, ... (default all)
#   scripts/fuzz.sh --ci                                           CI: the readers' smoke suites under ASan/UBSan, the
#                                                                  kept regressions replayed, then 4 s per harness
#   scripts/fuzz.sh --build-only
#   scripts/fuzz.sh --install-only                                 install clang and its runtimes, build nothing
#
# Corpora: build-fuzz/fuzz/seeds/<target> is rebuilt on every run from fuzz_seeds (files written by the
# project's writers), the repo's fixtures and, when present, ../shared/data (small files as they are, large
# tokenizers cut down to a few hundred tokens); build-fuzz/fuzz/corpus/<target> keeps what libFuzzer found
# (--fresh empties it). Crashing inputs land in build-fuzz/fuzz/crashes/<target>/; keep the fixed ones in
# tests/fuzz/regressions/<target>/ (test_fuzz_regressions replays them).
# Environment: ANELAB_FUZZ_BUILD (build-fuzz), ANELAB_DATA (../shared/data), ANELAB_FUZZ_MAX_LEN (32768).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BUILD="${ANELAB_FUZZ_BUILD:-build-fuzz}"
DATA="${ANELAB_DATA:-$ROOT/../shared/data}"
MAX_LEN="${ANELAB_FUZZ_MAX_LEN:-32768}"
TARGETS=(anelab llama2c safetensors gguf hf_config hf_index checkpoint tokenizer_llama2c tokenizer_gpt2 tokenizer_hf
         npy mil_blob mil_text train_toml run_config server_request http_request)

mode=run time_s=60 runs="" fresh=0 only=()
while (($#)); do
  case "$1" in
    --ci) mode=ci ;;
    --build-only) mode=build ;;
    --install-only) mode=install ;;
    --time) time_s="$2"; shift ;;
    --runs) runs="$2"; shift ;;
    --fresh) fresh=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "[fuzz] unknown option $1 (see --help)" >&2; exit 2 ;;
    *) only+=("$1") ;;
  esac
  shift
done
((${#only[@]})) && TARGETS=("${only[@]}")

# clang and its runtimes (libFuzzer, ASan, UBSan: libclang-rt-14-dev on Debian 12) when missing.
install_clang() {
  command -v clang++ >/dev/null && [[ -n "$(clang++ -print-file-name="libclang_rt.fuzzer-$(uname -m).a" 2>/dev/null |
                                            grep /)" ]] && return
  [[ "$(uname -s)" == Linux ]] && command -v apt-get >/dev/null || return 0
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  echo "[fuzz] installing clang and libclang-rt-14-dev" >&2
  $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends clang libclang-rt-14-dev >/dev/null 2>&1 ||
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev >/dev/null; }
}

# The readers' GoogleTest smoke suites, built in the same instrumented tree (ASan + UBSan, no libFuzzer main): the
# corrupt / truncated / mutated-input tests of the model formats, the tokenizers and the MIL text reader.
SMOKE_TESTS=(test_model_formats test_tokenizer_unit test_mil_text)
build() {
  install_clang
  # Line tables (stack traces name file:line) at -O1, what sanitizer builds usually use for long fuzzing runs; --ci
  # builds at -O0: the sanitizers catch the same errors, clang compiles the instrumented code 2.4x faster (the
  # largest unity file of anelab_models: 66 s at -O1, 27 s at -O0) and CI's harnesses run for a fixed time anyway.
  # Switching between the two rebuilds build-fuzz.
  local opt=-O1
  [[ "$mode" == ci ]] && opt=-O0
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DANELAB_FUZZ=ON \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$opt -gline-tables-only -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$opt -gline-tables-only -DNDEBUG" "-DANELAB_TEST_OPT=$opt" "-DANELAB_TEST_OPT_PLAIN=$opt" \
    "-DANELAB_TEST_AREAS=models;mil;fuzz" >/dev/null
  cmake --build "$BUILD" -j"$(getconf _NPROCESSORS_ONLN)" --target fuzzers test_fuzz_regressions "${SMOKE_TESTS[@]}"
}

# The smoke suites' reader tests under ASan (leaks included) and UBSan, the three suites side by side; their output
# is printed when all have ended.
run_smoke() {
  local logs rc=0 pids=() p
  logs="$(mktemp -d)"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  "$BUILD/bin/test_model_formats" --gtest_brief=1 --gtest_filter="Corrupt.*:Gguf.*:Llama2c.*" >"$logs/formats" 2>&1 &
  pids+=($!)
  "$BUILD/bin/test_tokenizer_unit" --gtest_brief=1 \
    --gtest_filter="Tokenizer.Fuzz*:Tokenizer.InvalidUtf8*:Loaders.*:Unicode.Utf8*" >"$logs/tokenizer" 2>&1 &
  pids+=($!)
  "$BUILD/bin/test_mil_text" --gtest_brief=1 --gtest_filter="MilFuzz.*:MilParseErrors.*:MilCheck.*" >"$logs/mil" 2>&1 &
  pids+=($!)
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$logs/formats" "$logs/tokenizer" "$logs/mil"
  rm -rf "$logs"
  unset ASAN_OPTIONS UBSAN_OPTIONS
  ((rc == 0))
}

# seed TARGET FILE...: copies files into the target's seed directory (missing ones are skipped).
seed() {
  local t="$1" f
  shift
  mkdir -p "$SEEDS/$t"
  for f in "$@"; do [[ -f "$f" ]] && cp "$f" "$SEEDS/$t/$(basename "$(dirname "$f")")_$(basename "$f")"; done
  return 0
}

# A large real tokenizer cut down to its first 400 tokens and the merges among them (python3, stdlib only).
shrink_tokenizer() {
  python3 - "$@" <<'EOF'
import json, sys
kind, out = sys.argv[1], sys.argv[2]
keep = 400
def merges_within(merges, vocab):
    ok = []
    for m in merges:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            ok.append(m)
    return ok[:300]
if kind == "hf":
    j = json.load(open(sys.argv[3], encoding="utf-8"))
    vocab = {k: v for k, v in j["model"]["vocab"].items() if v < keep}
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = merges_within(j["model"]["merges"], vocab)
    for i, a in enumerate(j.get("added_tokens", [])[:8]):
        a["id"] = keep + i
    j["added_tokens"] = j.get("added_tokens", [])[:8]
    open(out, "w", encoding="utf-8").write(json.dumps(j, ensure_ascii=False))
else:  # gpt2: encoder.json + NUL + vocab.bpe
    enc = json.load(open(sys.argv[3], encoding="utf-8"))
    vocab = {k: v for k, v in enc.items() if v < keep}
    vocab["<|endoftext|>"] = len(vocab)
    lines = open(sys.argv[4], encoding="utf-8").read().split("\n")
    merges = merges_within([l for l in lines[1:] if l], vocab)
    data = json.dumps(vocab, ensure_ascii=False) + "\0" + lines[0] + "\n" + "\n".join(merges) + "\n"
    open(out, "w", encoding="utf-8").write(data)
EOF
}

make_seeds() {
  SEEDS="$BUILD/fuzz/seeds"
  rm -rf "$SEEDS"
  "$BUILD/bin/fuzz_seeds" "$SEEDS"
  local fx=tests/fixtures/hf
  seed mil_text tests/mil/golden/*.mil
  seed hf_config $fx/*/config.json
  seed hf_index $fx/llama_fp16/model.safetensors.index.json
  seed safetensors $fx/llama_fp16/model-00003-of-00004.safetensors $fx/qwen2_bf16/model.safetensors
  seed tokenizer_hf data/tinytales/tokenizer.json
  seed train_toml experiments/*.toml
  seed tokenizer_llama2c "$DATA/llama2c/tok512.bin"
  seed gguf "$DATA"/tokenizer-vectors/ggml-vocab-llama-spm.gguf
  if [[ -f "$DATA/qwen/tokenizer.json" ]]; then shrink_tokenizer hf "$SEEDS/tokenizer_hf/qwen_400.json" "$DATA/qwen/tokenizer.json"; fi
  if [[ -f "$DATA/gpt2/encoder.json" ]]; then
    shrink_tokenizer gpt2 "$SEEDS/tokenizer_gpt2/gpt2_400" "$DATA/gpt2/encoder.json" "$DATA/gpt2/vocab.bpe"
  fi
  mkdir -p "$SEEDS/server_request"
  local i=0 body
  for body in '{"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0}' \
    '{"prompt": ["a", "b"], "stream": true, "stream_options": {"include_usage": true}, "stop": ["\n", "."]}' \
    '{"prompt": [1, 2, 3], "top_p": 0.9, "top_k": 40, "seed": 7, "echo": true}' \
    '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_completion_tokens": 8}' \
    '{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "n": 1, "repeat_penalty": 1.1}'; do
    printf '%s' "$body" >"$SEEDS/server_request/body$((i++)).json"
  done
  mkdir -p "$SEEDS/http_request"
  i=0
  local req
  for req in 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n' \
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"prompt":""}' \
    'POST /v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer k\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}GET / HTTP/1.0\r\n\r\n' \
    'GET /v1/models HTTP/1.0\r\nConnection: keep-alive\r\n\r\n'; do
    printf "$req" >"$SEEDS/http_request/req$((i++)).http"
  done
}

# run_one TARGET ARGS...: one harness; appends its row to $TABLE (execs, cov, ft, crashes, seconds).
run_one() {
  local t="$1" log corpus="$BUILD/fuzz/corpus/$1" crashes="$BUILD/fuzz/crashes/$1" t0 rc=0 n0 n1
  shift
  log="$BUILD/fuzz/logs/$t.log"
  mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
  n0=$(find "$crashes" -type f | wc -l)
  t0=$(date +%s)
  "$BUILD/bin/fuzz_$t" "$corpus" "$SEEDS/$t" -max_len="$MAX_LEN" -timeout=20 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$@" >"$log" 2>&1 || rc=$?
  n1=$(find "$crashes" -type f | wc -l)
  local execs cov ft
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-18s %10s %7s %7s %8s %7s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$((n1 - n0))" "$(($(date +%s) - t0))" |
    tee -a "$TABLE"
  if ((rc != 0 || n1 > n0)); then
    echo "[fuzz] $t: exit $rc, crash input(s) in $crashes (log: $log):" >&2
    grep -m3 -E 'ERROR|runtime error|SUMMARY' "$log" >&2 || tail -5 "$log" >&2
    return 1
  fi
}

# Every harness, as many at once as there are cores (each harness is one process, one thread); rows in the order they end.
run_all() {
  local failed=0 t par running=0
  par=$(getconf _NPROCESSORS_ONLN)
  TABLE="$BUILD/fuzz/table.txt"
  mkdir -p "$BUILD/fuzz"
  ((fresh)) && rm -rf "$BUILD/fuzz/corpus"
  printf '%-18s %10s %7s %7s %8s %7s\n' target execs cov ft crashes seconds | tee "$TABLE"
  for t in "${TARGETS[@]}"; do
    if ((running >= par)); then
      wait -n || failed=1
      ((running--))
    fi
    run_one "$t" "$@" &
    ((++running))
  done
  while ((running > 0)); do
    wait -n || failed=1
    ((running--))
  done
  return $failed
}

case "$mode" in
  install) install_clang ;;
  build) build ;;
  ci)
    build
    run_smoke
    export ASAN_OPTIONS=abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    "$BUILD/bin/test_fuzz_regressions"
    make_seeds
    run_all -max_total_time=4
    ;;
  run)
    build
    make_seeds
    if [[ -n "$runs" ]]; then run_all -runs="$runs"; else run_all -max_total_time="$time_s"; fi
    ;;
esac
