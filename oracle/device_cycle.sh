#!/usr/bin/env bash
# device_cycle.sh — a whole check-and-measure cycle on the GPU machine, in one command.
#
#   bash oracle/device_cycle.sh STAGE [STAGE ...]      results (small files) under $OUT
#
# Binaries are built on the CPU machine (make ARCH=sm_90) and travel in .carry/<arch>/; device time is
# scarce, so each call runs many stages. Stages:
#   info          GPU, driver, torch/transformers versions
#   gputests      build/<arch>/gpu_tests (every kernel against its CPU reference, engine vs tiny models)
#   tiny          make the tiny test models + float32 dumps (tests/data/models), then the engine test on them
#   fid PRESET INIT_STD EMBED_STD
#                 random-weight model at a real shape: transformers fp32 + bf16 dumps of a 512-token prompt,
#                 the engine's dump, oracle/compare.py (table + plot); FID_SEEDS="7 8 9 10"
#                 runs more prompts on the same model (7, the default, is the prompt of every earlier record)
#   probe PRESET INIT_STD EMBED_STD
#                 oracle/precision_probe.py on the fid stage's model and prompt(s): which bf16 rounding costs what
#   bench PRESETS oracle/bench.py (make bench) on the comma-separated presets
#   train_start / train_wait   oracle/train_tiny.py in the background (models/pycoder-13m) / wait for it
#   goldens       dumps + transformers greedy 128 tokens for the shipped model's 3 golden prompts
#   chat          oracle/chat_goldens.py (tokenizer chat templates rendered by transformers)
#   quanteval     oracle/quant_eval.py on the shipped model: fp8 / int4 / FP8 KV vs bf16, tools/quantize bit-identity,
#                 GPTQ, and GPTQ's INT4 refined by distillation (oracle/qat_int4.py; ~2 minutes of the stage)
#   gemvbench     build/<arch>/tools/bench_gemv (GEMV GB/s per shape and format)
#   parallel PRESET  --bench --parallel N (PAR_N, default 1 4 16 64 256) per weight format (PAR_DTYPES), beside batch 1:
#                 the batched core's output tok/s and step roofline, and the prefix cache's time to first token
#   speed PRESETS engine --bench at context 512 (SPEED_CTX="512,16384") for each weight format; SPEED_FLAGS="--no-pdl,..."
#                 adds runs with those flags (comma-separated sets, '+' between flags of one set)
#   loadtime PRESET   the engine's load time on that random-weight checkpoint for each --dtype (files in the page
#                 cache, then dropped from it where the user may), and tools/quantize's outputs loaded likewise
#   tinyl         make the llama family's tiny test models (tests/data/models/tiny-{llama*,mistral,qwen2,smollm3}), pack them;
#                 TINY_NAMES="tiny-lfm2 ..." makes those instead
#   fidl PRESET LAYERS INIT_STD EMBED_STD
#                 as fid, for any model_type (engine by config), at a real shape cut to LAYERS layers; FIDL_FP8=1 also
#                 runs the same weights rewritten in Qwen's FP8 release layout (with fp32's expert choices, if a mixture)
#   ab PRESET     batch-1 decode before / after: .carry/base/qwen3 (the engine before the runner) and the new
#                 build alternating, bf16 / fp8 / int4, --bench at 512 (AB_ROUNDS rounds, default 2)
#   calm PRESET   engines/llama.cu --bench (bf16 / fp8 / int4, 512 and 16k) beside calm (.carry/calm: fp16 / fp8 /
#                 gf4 from the same folder, converted by its convert.py), back to back on this card
#   fuzz SECONDS  every libFuzzer target built here (make fuzz-build fuzz-seeds; carried in .carry/fuzz.txz with its
#                 seed corpora) for SECONDS each on all cores (-fork; FUZZ_TARGETS picks some); prints executions,
#                 coverage and crashes
#   demo          the README's demo command, and the engine on bad input
#   pack          tar what should come back into $OUT (split into <= 15 MB parts)
set -u
OUT=${OUT:-/tmp/monocu-out}
ARCH=${ARCH:-sm_90}
B=build/$ARCH
W=${WORK:-/tmp/monocu-work}
mkdir -p "$OUT" "$W/results" "$B"
export PYTHONUNBUFFERED=1
[ -d .carry/$ARCH ] && cp -rf .carry/$ARCH/* "$B"/
[ -d .carry/tools ] && mkdir -p build/tools && cp -f .carry/tools/* build/tools/
if ! ldconfig -p | grep -q libcublas.so.13; then  # fall back on the cuBLAS that torch's wheels carry
  lib=$(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null)
  [ -n "$lib" ] && export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
fi
R=$W/results
log() { echo "== $(date +%T) $*"; }

stage_info() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
}

stage_gputests() { "$B"/gpu_tests 2>&1 | tee "$R"/gpu_tests.log | tail -40; }

stage_tiny() {
  python3 oracle/make_test_models.py tests/data/models > "$R"/tiny.log 2>&1 || { tail -20 "$R"/tiny.log; return; }
  cat "$R"/tiny.log
  "$B"/gpu_tests -tc="*tiny*" -s 2>&1 | tee -a "$R"/tiny.log | tail -25
  tar czf "$R"/tiny_models.tgz tests/data/models
}

random_ids() {  # N VOCAB SEED -> stdout
  python3 -c "import numpy as np; print(' '.join(map(str, np.random.default_rng($3).integers(0, $2, $1))))"
}

fid_model() {  # PRESET INIT_STD EMBED_STD -> the folder of that random-weight model, made if missing
  local m=$W/$1-$2-$3
  [ -f "$m/config.json" ] || python3 oracle/make_model.py --preset "$1" --out "$m" --shard 2GB --init-std "$2" --embed-std "$3" > /dev/null
  echo "$m"
}

stage_fid() {  # PRESET INIT_STD EMBED_STD; FID_SEEDS="7 8 .." for more prompts (default 7)
  local p=$1 m seed tag
  m=$(fid_model "$@")
  for seed in ${FID_SEEDS:-7}; do
    tag=$p-$2-$3-s$seed
    random_ids 512 151936 "$seed" > "$W/$p.ids"
    python3 oracle/dump.py --model "$m" --ids "$W/$p.ids" --out "$W/$p.ref32" --dtype float32
    python3 oracle/dump.py --model "$m" --ids "$W/$p.ids" --out "$W/$p.ref16" --dtype bfloat16
    "$B"/qwen3 -m "$m" --ids "$W/$p.ids" --dump-dir "$W/$p.ours" -n 1 --temp 0 -q > /dev/null
    python3 oracle/compare.py --ours "$W/$p.ours" --ref "$W/$p.ref32" --ref-bf16 "$W/$p.ref16" \
      --plot "$R/fid_$tag.png" --title "$p (random, init std $2, embeddings $3, prompt seed $seed) vs transformers fp32" | tee "$R/fid_$tag.txt"
    rm -rf "$W/$p.ref32" "$W/$p.ref16" "$W/$p.ours"
  done
  rm -rf "$m"
}

stage_probe() {  # PRESET INIT_STD EMBED_STD; FID_SEEDS as for fid; PROBE_SETS overrides the sets measured
  local p=$1 m seed
  m=$(fid_model "$@")
  for seed in ${FID_SEEDS:-7}; do
    random_ids 512 151936 "$seed" > "$W/$p.ids"
    echo "prompt seed $seed"
    python3 oracle/precision_probe.py --model "$m" --ids "$W/$p.ids" \
      --sets "${PROBE_SETS:-all norm_in attn_out act q k v p norm_in+attn_out+act+qkv:f16+p:f16}" 2>&1 | grep -v "Warning\|Loading" \
      | tee "$R/probe_$p-$2-$3-s$seed.txt"
  done
  rm -rf "$m"
}

stage_bench() {  # PRESETS (comma-separated) [HF_CONTEXTS]: oracle/bench.py, the `make bench` matrix
  python3 oracle/bench.py --engine "$B"/qwen3 --work "$W/bench" --out "$R/bench-${1//,/_}" --presets "$1" \
    --hf-contexts "${HF_CONTEXTS:-512,4096}" 2>&1 | tee -a "$R/bench.log" | grep -v "^|"
  rm -rf "$W/bench"
}

stage_train_start() {
  mkdir -p models
  nohup python3 oracle/train_tiny.py --out models/pycoder-13m --log-dir "$R/train" --max-seconds 330 > "$R/train.log" 2>&1 &
  echo $! > "$W/train.pid"
}

stage_train_wait() {
  while kill -0 "$(cat "$W/train.pid")" 2>/dev/null; do sleep 5; done
  tail -15 "$R/train.log"
  ls -la models/pycoder-13m
  tar cf "$W/pycoder.tar" models/pycoder-13m && split -b 15m "$W/pycoder.tar" "$OUT/pycoder.tar.part-"
}

GOLDEN_PROMPTS=("def fibonacci(n):
" "import os
import sys


def main():
" "class Stack:
    def __init__(self):
")

stage_goldens() {
  local m=models/pycoder-13m g=$W/goldens
  mkdir -p "$g"
  for i in 0 1 2; do
    python3 oracle/dump.py --model $m --prompt "${GOLDEN_PROMPTS[$i]}" --out "$g/p$i" --dtype float32 --greedy 128 --stop-at-eos
    python3 oracle/dump.py --model $m --prompt "${GOLDEN_PROMPTS[$i]}" --out "$g/p$i.bf16" --dtype bfloat16 --greedy 128 --stop-at-eos
    "$B"/qwen3 -m $m --ids <(python3 -c "import numpy as np; print(' '.join(map(str, np.load('$g/p$i/prompt_ids.npy'))))") \
      --dump-dir "$g/p$i.ours" -n 128 --temp 0 -q > "$g/p$i.ours.txt"
    python3 oracle/compare.py --ours "$g/p$i.ours" --ref "$g/p$i" --ref-bf16 "$g/p$i.bf16" | tee "$R/golden_p$i.txt"
  done
  tar czf "$R/goldens.tgz" -C "$W" goldens
}

stage_chat() {
  python3 oracle/chat_goldens.py tests/data/hf/chat_oracle "$W/chat" > "$R/chat.log" 2>&1; tail -5 "$R/chat.log"
  cp "$W"/chat/chat_goldens.json "$R"/ 2>/dev/null
}

stage_quanteval() {
  python3 oracle/make_fp8_checkpoint.py --model models/pycoder-13m --out "$W/pycoder-fp8" | tail -1
  python3 oracle/quant_eval.py --engine "$B"/qwen3 --model models/pycoder-13m --quantize build/tools/quantize \
    --fp8-layout "$W/pycoder-fp8" --qat --out "$W/qe" 2>&1 | grep -v "^.Loading weights" | tee "$R/quant_eval.txt"
  cp "$W"/qe/quant_eval.json "$R"/
}

stage_demo() {  # the README's main command (its last step; the machine has no apt for `make deps`), and bad input
  "$B"/qwen3 -m models/pycoder-13m -p "$(printf 'def fibonacci(n):\n')" -n 200 -s 42 > "$R/demo.txt" 2>&1
  cat "$R/demo.txt"
  {
    echo "--- long prompt, small context"; "$B"/qwen3 -m models/pycoder-13m -p "def f(x): return x" -c 4; echo "exit $?"
    echo "--- no such model"; "$B"/qwen3 -m /nonexistent -p hi; echo "exit $?"
    echo "--- bad flag"; "$B"/qwen3 -m models/pycoder-13m -p hi --temp warm; echo "exit $?"
    echo "--- int4 sampling"; "$B"/qwen3 -m models/pycoder-13m -p "import numpy as np" -n 40 -s 1 --dtype int4 --kv-type fp8
    echo "exit $?"
  } > "$R/demo_errors.txt" 2>&1
  cat "$R/demo_errors.txt"
}

stage_speed() {  # PRESETS (comma-separated)
  local p m
  for p in ${1//,/ }; do
    m=$W/speed-$p
    [ -f "$m/config.json" ] || python3 oracle/make_model.py --preset "$p" --out "$m" --shard 4GB > /dev/null
    for d in bf16 fp8 int4; do
      for f in "" ${SPEED_FLAGS:+${SPEED_FLAGS//,/ }}; do
        echo "--- $p $d ${f//+/ }"
        "$(engine_for "$m")" -m "$m" --bench --n-prompt ${SPEED_CTX:-512} -n 128 --dtype $d ${f//+/ } 2>&1 | grep -E "^bench|error|fatal|GPU memory"
      done
    done
  done 2>&1 | tee -a "$R/speed.txt"
}

stage_loadtime() {  # PRESET: load time per --dtype, warm and cold page cache, and of tools/quantize's outputs
  local m=$W/speed-$1 d ids=$W/load.ids
  [ -f "$m/config.json" ] || python3 oracle/make_model.py --preset "$1" --out "$m" --shard 4GB > /dev/null
  echo "1 2 3 4" > "$ids"
  load() { echo "--- $1 --dtype $2"; "$B"/qwen3 -m "$1" --ids "$ids" -n 1 --temp 0 --dtype "$2" 2>&1 | grep -E "load time|error"; }
  cold() { sync && { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; }
  {
    du -sh "$m"; cat "$m"/*.safetensors > /dev/null
    for d in bf16 fp8 int4 bf16 fp8 int4; do load "$m" $d; done
    for d in bf16 int4; do if cold; then echo "(page cache dropped)"; load "$m" $d; else echo "cannot drop the page cache"; fi; done
    for d in int4 fp8; do
      /usr/bin/time -f "tools/quantize --dtype $d: %e s" build/tools/quantize "$m" "$m-$d" --dtype $d 2>&1 | tail -2
      cat "$m-$d"/*.safetensors > /dev/null
      load "$m-$d" $d; load "$m-$d" $d
      rm -rf "$m-$d"
    done
  } 2>&1 | tee -a "$R/loadtime.txt"
}

stage_parallel() {  # PRESET: the batched core's throughput at PAR_N sequences (default 1 4 16 64 256), beside batch 1
  local m=$W/speed-$1 d n
  [ -f "$m/config.json" ] || python3 oracle/make_model.py --preset "$1" --out "$m" --shard 4GB > /dev/null
  for d in ${PAR_DTYPES:-bf16 fp8 int4}; do
    echo "--- $1 $d batch 1"
    "$(engine_for "$m")" -m "$m" --bench --n-prompt ${PAR_PROMPT:-512} -n ${PAR_GEN:-256} --dtype $d 2>&1 | grep -E "^bench: decode|error|fatal"
    for n in ${PAR_N:-1 4 16 64 256}; do
      echo "--- $1 $d --parallel $n"
      "$(engine_for "$m")" -m "$m" --bench --n-prompt ${PAR_PROMPT:-512} -n ${PAR_GEN:-256} --dtype $d -np $n 2>&1 | grep -E "^bench: parallel|^bench: prefix|error|fatal|warning"
    done
  done 2>&1 | tee -a "$R/parallel.txt"
}

stage_gemvbench() { "$B"/tools/bench_gemv 2>&1 | tee "$R/bench_gemv.txt"; }

engine_for() {  # MODEL_DIR -> the engine binary for its model_type
  case $(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['model_type'])" "$1/config.json") in
    qwen3|qwen3_moe) echo "$B/qwen3" ;;
    lfm2|lfm2_moe) echo "$B/lfm2" ;;
    gpt_oss) echo "$B/gpt_oss" ;;
    *) echo "$B/llama" ;;
  esac
}

stage_tinyl() {
  local names=${TINY_NAMES:-tiny-llama3 tiny-llama-bias tiny-llama-dynamic tiny-mistral tiny-qwen2 tiny-smollm3}
  python3 oracle/make_test_models.py tests/data/models $names > "$R"/tinyl.log 2>&1 || { tail -30 "$R"/tinyl.log; return; }
  cat "$R"/tinyl.log
  (cd tests/data/models && tar czf "$OUT"/tiny_llama_models.tgz $names)
}

stage_fidl() {  # PRESET LAYERS INIT_STD EMBED_STD
  local p=$1 m=$W/$1-l$2 seed tag e vocab
  [ -f "$m/config.json" ] || python3 oracle/make_model.py --preset "$p" --layers "$2" --out "$m" --shard 2GB --init-std "$3" --embed-std "$4" > /dev/null
  e=$(engine_for "$m")
  vocab=$(python3 -c "import json; print(json.load(open('$m/config.json'))['vocab_size'])")
  for seed in ${FID_SEEDS:-7}; do
    tag=$p-l$2-s$seed
    random_ids 512 "$vocab" "$seed" > "$W/$p.ids"
    python3 oracle/dump.py --model "$m" --ids "$W/$p.ids" --out "$W/$p.ref32" --dtype float32 --greedy 16
    python3 oracle/dump.py --model "$m" --ids "$W/$p.ids" --out "$W/$p.ref16" --dtype bfloat16
    "$e" -m "$m" --ids "$W/$p.ids" --dump-dir "$W/$p.ours" -n 16 --temp 0 -q > /dev/null
    python3 oracle/compare.py --ours "$W/$p.ours" --ref "$W/$p.ref32" --ref-bf16 "$W/$p.ref16" \
      --plot "$R/fid_$tag.png" --title "$p, $2 layers (random, init std $3, embeddings $4, prompt seed $seed) vs transformers fp32" | tee "$R/fid_$tag.txt"
    if ls "$W/$p.ref32"/routing_*.npy > /dev/null 2>&1; then  # a mixture: again with fp32's expert choices
      echo "--- with transformers fp32's expert choices (--force-routing)"
      "$e" -m "$m" --ids "$W/$p.ids" --dump-dir "$W/$p.forced" -n 16 --temp 0 -q --force-routing "$W/$p.ref32" > /dev/null
      python3 oracle/compare.py --ours "$W/$p.forced" --ref "$W/$p.ref32" --ref-bf16 "$W/$p.ref16" | tee "$R/fid_${tag}_forced.txt"
      rm -rf "$W/$p.forced"
    fi
    if [ -n "${FIDL_FP8:-}" ]; then  # the same weights in Qwen's FP8 release layout (128x128 block scales), loaded as published
      echo "--- Qwen's FP8 layout of the same weights (oracle/make_fp8_checkpoint.py)"
      python3 oracle/make_fp8_checkpoint.py --model "$m" --out "$W/$p.fp8" | tail -1
      local force=""; ls "$W/$p.ref32"/routing_*.npy > /dev/null 2>&1 && force="--force-routing $W/$p.ref32"
      "$e" -m "$W/$p.fp8" --ids "$W/$p.ids" --dump-dir "$W/$p.fp8.ours" -n 16 --temp 0 -q $force > /dev/null
      python3 oracle/compare.py --ours "$W/$p.fp8.ours" --ref "$W/$p.ref32" --ref-bf16 "$W/$p.ref16" | tee "$R/fid_${tag}_fp8layout.txt"
      rm -rf "$W/$p.fp8" "$W/$p.fp8.ours"
    fi
    rm -rf "$W/$p.ref32" "$W/$p.ref16" "$W/$p.ours"
  done
  rm -rf "$m"
}

stage_ab() {  # PRESET: the new qwen3 engine against .carry/base/qwen3, alternating, same card
  local m=$W/speed-$1 r d
  [ -f "$m/config.json" ] || python3 oracle/make_model.py --preset "$1" --out "$m" --shard 4GB > /dev/null
  for r in $(seq "${AB_ROUNDS:-2}"); do
    for d in bf16 fp8 int4; do
      for e in .carry/base/qwen3 "$B"/qwen3; do
        echo "--- round $r $d $e"; "$e" -m "$m" --bench --n-prompt 512 -n 128 --dtype $d 2>&1 | grep -E "^bench: decode |error|fatal"
      done
    done
  done 2>&1 | tee -a "$R/ab.txt"
  rm -rf "$m"
}

stage_calm() {  # PRESET (a llama model_type): ours, then calm's three formats, on the same random weights
  local m=$W/speed-$1 c=$W/calm d
  [ -f "$m/config.json" ] || python3 oracle/make_model.py --preset "$1" --out "$m" --shard 4GB --tokenizer .carry/tok-llama3 > /dev/null
  mkdir -p "$c"
  {
    for d in bf16 fp8 int4; do
      echo "--- ours $d"; "$B"/llama -m "$m" --bench --n-prompt 512,16384 -n 128 --dtype $d 2>&1 | grep -E "^bench: (ceil|prefill|decode )|error|fatal"
      echo "--- ours $d, fp8 kv"; "$B"/llama -m "$m" --bench --n-prompt 16384 -n 128 --dtype $d --kv-type fp8 2>&1 | grep -E "^bench: decode |error|fatal"
    done
    export LD_LIBRARY_PATH=$PWD/.carry/calm/lib:${LD_LIBRARY_PATH:-}
    for d in fp16 fp8 gf4; do
      echo "--- calm $d: convert"; /usr/bin/time -f "%e s" python3 .carry/calm/convert.py "$c/m-$d.calm" "$m" --dtype $d 2>&1 | tail -1
      for i in 1 2; do  # decode at context 512 .. 640 (calm's own way to start deep in the context), then at 16k
        echo "--- calm $d at 512, run $i"; CALM_POSO=512 .carry/calm/run "$c/m-$d.calm" -n 128 -t 0 -c 4096 2>&1 | grep -aoE "[0-9]+ tokens: throughput.*|rror.*"
      done
      echo "--- calm $d at 16k (its cache is fp8 past a 4096 context)"; CALM_POSO=16384 .carry/calm/run "$c/m-$d.calm" -n 128 -t 0 -c 16640 2>&1 | grep -aoE "[0-9]+ tokens: throughput.*|rror.*"
      rm -f "$c/m-$d.calm"
    done
  } 2>&1 | tee -a "$R/calm.txt"
  rm -rf "$m" "$c"
}

stage_fuzz() {  # SECONDS: each target of build/fuzz on every core; crashes are kept under $OUT
  local t jobs
  jobs=$(nproc)
  [ -f .carry/fuzz.txz ] && tar xJf .carry/fuzz.txz
  export MONOCU_FUZZ_TOKENIZERS="${MONOCU_FUZZ_TOKENIZERS:-$PWD/.carry/tok/qwen3 $PWD/.carry/tok/llama2 $PWD/.carry/tok/mistral_v0_3 $PWD/.carry/tok/smollm2}"
  for t in ${FUZZ_TARGETS:-safetensors_header config npy tokenizer_json tokenizer_encode model_folder jinja chat_reply}; do
    [ -x build/fuzz/$t ] || { echo "--- $t: not built"; continue; }
    mkdir -p "$W/crash_$t"
    echo "--- fuzz $t: $1 s on $jobs cores"
    (cd build/fuzz && ./$t -max_total_time="$1" -fork="$jobs" -max_len=65536 -timeout=20 -rss_limit_mb=4096 \
      -artifact_prefix="$W/crash_$t/" corpus_$t 2>&1 | grep -aE "^#[0-9]+:|crash|ERROR|SUMMARY|INFO: fuzzed" | tail -3)
    ls "$W/crash_$t" | head -3
  done 2>&1 | tee "$R/fuzz.txt"
  tar czf "$OUT/fuzz_crashes.tgz" -C "$W" $(cd "$W" && ls -d crash_* 2>/dev/null) 2>/dev/null
}

stage_pack() {
  tar czf "$OUT/results.tgz" -C "$W" results
  ls -la "$OUT"
}

while [ $# -gt 0 ]; do
  s=$1; shift
  case $s in
    fid|probe) log "$s $1 $2 $3"; "stage_$s" "$1" "$2" "$3"; shift 3 ;;
    fidl) log "$s $1 $2 $3 $4"; "stage_$s" "$1" "$2" "$3" "$4"; shift 4 ;;
    bench|speed|loadtime|ab|calm|fuzz|parallel) log "$s $1"; "stage_$s" "$1"; shift ;;
    *) log "$s"; "stage_$s" ;;
  esac
done
