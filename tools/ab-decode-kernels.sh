#!/usr/bin/env bash
# A/B of the decode kernels' own CPU time, for a machine too loaded for tokens/s to mean much:
# each binary runs `nextok bench --threads 1 --prefill 16 --decode 128 --repetitions 1` under
# `perf record -e cpu-clock` (4 kHz), one after the other, ROUNDS times, and the table gives the
# samples inside the Q4_1 and Q8_0 decode kernels (the same work in every binary: three decodes
# of 128 tokens, one prefill). Wall time suffers from every other process; the samples inside a
# kernel only from the memory traffic of others, so their minimum over rounds is steadier.
#
#   tools/ab-decode-kernels.sh [-r ROUNDS] OLD NEW [MORE...]
#
# Needs perf and jq; the model at the default path or in NEXTOK_MODEL.
set -euo pipefail
rounds=4
while getopts "r:" opt; do
    case $opt in
        r) rounds=$OPTARG ;;
        *) echo "usage: $0 [-r ROUNDS] OLD NEW [MORE...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -lt 2 ]; then
    echo "usage: $0 [-r ROUNDS] OLD NEW [MORE...]" >&2
    exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
    for b in "$@"; do
        perf record -q -e cpu-clock -F 4000 -o "$tmp/perf.data" "$b" bench --threads 1 \
            --prefill 16 --decode 128 --repetitions 1 --json >"$tmp/bench.json" 2>/dev/null
        perf report -i "$tmp/perf.data" --no-children --sort symbol -n 2>/dev/null | awk \
            -v b="$b" -v r="$r" -v d="$(jq .decode_tok_s.median "$tmp/bench.json")" '
            /q4_1_tiles_decode_avx512/ { q4 = $2 }
            /q8_0_tiles_decode_avx512/ { q8 = $2 }
            END { printf "%s\t%s\t%d\t%d\t%.1f\n", r, b, q4, q8, d }' | tee -a "$tmp/rows" >&2
    done
done
echo "samples inside the decode kernels, min over $rounds rounds (4 kHz cpu-clock)"
printf '%-50s %10s %10s %12s\n' binary q4_1 q8_0 decode_tok_s
for b in "$@"; do
    awk -F'\t' -v b="$b" '$2 == b {
        if (n == 0 || $3 < q4) q4 = $3
        if (n == 0 || $4 < q8) q8 = $4
        if ($5 > d) d = $5
        n++
    } END { printf "%-50s %10d %10d %12.1f (best)\n", b, q4, q8, d }' "$tmp/rows"
done
