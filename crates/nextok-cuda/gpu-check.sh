#!/usr/bin/env bash
# The GPU check of nextok-cuda (issue 8), in two halves:
#
#   crates/nextok-cuda/gpu-check.sh prepare
#       here, on the development machine (no GPU needed): builds the release binaries with the
#       `cuda` feature (the `nextok` command, the crate's test binaries, the bench example), strips
#       them into target/gpu-bundle/ (about 30 MB), and, if the default model is in the cache,
#       splits it into two parts under target/gpu-model/ (the device tool carries at most 64 MiB
#       per call, and the model is 94 MiB).
#
#   crates/nextok-cuda/gpu-check.sh
#       on the device machine, from the repository root, with $OUT set. That machine has the
#       NVIDIA driver and CUDA (NVRTC) but no Rust toolchain and no network, so it runs only the
#       carried binaries: nothing is compiled there but the kernels (by NVRTC, at start).
#
# With the device tool (one run of about 3 minutes; give the machine back afterwards):
#   run(command="bash crates/nextok-cuda/gpu-check.sh", carry=["target/gpu-bundle"], timeout_s=540)
# To include the real model (its conformance test and `nextok bench --device cuda`), first send
# its first part in a call of its own, right before, while the machine stays warm (ignored files
# a call left there stay for the next call):
#   run(command="ls -l target/gpu-model", carry=["target/gpu-model/part-a"], timeout_s=60)
#   run(command="bash crates/nextok-cuda/gpu-check.sh",
#       carry=["target/gpu-bundle", "target/gpu-model/part-b"], timeout_s=540)
# Without the model, the GPU tests on random models and the bench on a random model of the same
# shape (84 MB of weights per token, all Q4_1, against the real file's 96 MB with its Q8_0
# embedding) still run; the real-model test is skipped and the summary says so.
#
# Results land in $OUT: summary.txt (the figures), gpu-tests.log, bench.jsonl, env.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=target/gpu-bundle
PARTS=target/gpu-model

if [ "${1:-}" = prepare ]; then
    set -e
    cargo build --release -p nextok-cli --features cuda
    cargo build --release -p nextok-cuda --example bench
    tests=$(cargo test --release -p nextok-cuda --no-run --message-format=json 2>/dev/null \
        | grep '"executable":"[^"]' | grep -o '"executable":"[^"]*"' | cut -d'"' -f4)
    rm -rf "$BUNDLE" && mkdir -p "$BUNDLE"
    for t in $tests; do
        case "$(basename "$t")" in
            gpu-*) cp "$t" "$BUNDLE/gpu-tests" ;;
            no_gpu-*) cp "$t" "$BUNDLE/no-gpu-tests" ;;
        esac
    done
    cp target/release/nextok target/release/examples/bench "$BUNDLE/"
    strip "$BUNDLE"/*
    model="${NEXTOK_MODEL:-$HOME/.cache/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
    if [ -f "$model" ]; then
        rm -rf "$PARTS" && mkdir -p "$PARTS"
        half=$(( ($(stat -c %s "$model") + 1) / 2 ))
        head -c "$half" "$model" > "$PARTS/part-a"
        tail -c +"$((half + 1))" "$model" > "$PARTS/part-b"
        sha256sum "$model" | cut -d' ' -f1 > "$BUNDLE/model.sha256"
    fi
    du -sh "$BUNDLE" "$PARTS" 2>/dev/null
    exit 0
fi

: "${OUT:?set OUT to the folder for the results}"
summary="$OUT/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
: > "$summary"
[ -x "$BUNDLE/gpu-tests" ] || { say "FAIL: no $BUNDLE/gpu-tests; run '$0 prepare' first and carry $BUNDLE"; exit 1; }

# cudarc looks for libnvrtc.so (and .so.12, .so.11 ...); CUDA 13 ships libnvrtc.so.13, so give
# it the name cudarc asks for first. The driver's libcuda.so.1 is found by its own name.
libs=/tmp/nextok-cuda-libs
mkdir -p "$libs"
nvrtc=$( (ls /usr/local/cuda/lib64/libnvrtc.so* /usr/local/cuda*/lib64/libnvrtc.so* \
    /usr/local/cuda*/targets/x86_64-linux/lib/libnvrtc.so* 2>/dev/null;
    python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null \
        | xargs -I{} find {} -name 'libnvrtc.so*' 2>/dev/null) | grep -v builtins | head -1)
[ -n "$nvrtc" ] && ln -sf "$nvrtc" "$libs/libnvrtc.so"
export LD_LIBRARY_PATH="$libs:$(dirname "${nvrtc:-/nonexistent/x}"):/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv
    echo "libnvrtc: ${nvrtc:-not found}"
    uname -a
} > "$OUT/env.txt" 2>&1
say "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
say "libnvrtc: ${nvrtc:-not found}"

# The real model, when both parts were carried.
model=""
if [ -f "$PARTS/part-a" ] && [ -f "$PARTS/part-b" ]; then
    cat "$PARTS/part-a" "$PARTS/part-b" > /tmp/SmolLM2-135M-Instruct.Q4_1.gguf
    if [ "$(sha256sum /tmp/SmolLM2-135M-Instruct.Q4_1.gguf | cut -d' ' -f1)" = "$(cat "$BUNDLE/model.sha256" 2>/dev/null)" ]; then
        model=/tmp/SmolLM2-135M-Instruct.Q4_1.gguf
    else
        say "the model's parts do not reassemble to the prepared file (checksum differs)"
    fi
fi
[ -n "$model" ] && say "real model: $model" || say "real model: NOT carried; its test is skipped and nextok bench does not run"

# 1. The kernels compile with this machine's NVRTC (and the no-GPU checks still hold).
"$BUNDLE/no-gpu-tests" --nocapture > "$OUT/no-gpu-tests.log" 2>&1
say "no-GPU tests: exit $? ($(grep -o 'NVRTC compiled.*' "$OUT/no-gpu-tests.log" || echo 'NVRTC did not run'))"

# 2. The GPU tests: the CPU backend is the oracle, stage by stage.
skip=()
[ -n "$model" ] || skip=(--skip real_model)
[ -n "$model" ] && export NEXTOK_MODEL="$model"
timeout 300 "$BUNDLE/gpu-tests" --ignored --test-threads 1 --nocapture \
    "${skip[@]}" > "$OUT/gpu-tests.log" 2>&1
status=$?
say "GPU tests: exit $status; $(grep -E '^test result' "$OUT/gpu-tests.log" | tail -1)"
grep -E '^test .* (ok|FAILED)$' "$OUT/gpu-tests.log" | tee -a "$summary"
grep -E 'max \|GPU' "$OUT/gpu-tests.log" | sort | uniq | head -40 >> "$summary"

# 3. Speed: the bench example on both devices (the real model when carried, else one of its
# shape), and the nextok command's own bench on the real model.
bench_model=()
[ -n "$model" ] && bench_model=(--model "$model")
for flags in "--device cuda" "--device cuda --host-cache" "--device cpu"; do
    # shellcheck disable=SC2086 # the flags are words on purpose
    timeout 120 "$BUNDLE/bench" $flags "${bench_model[@]}" >> "$OUT/bench.jsonl" 2>> "$OUT/bench.err"
    say "bench $flags: exit $? $(tail -1 "$OUT/bench.jsonl")"
done
if [ -n "$model" ]; then
    for device in cuda cpu; do
        timeout 120 "$BUNDLE/nextok" bench --device "$device" --model "$model" --json \
            > "$OUT/nextok-bench-$device.json" 2>&1
        say "nextok bench --device $device: exit $? $(cat "$OUT/nextok-bench-$device.json")"
    done
fi
exit "$status"
