#!/usr/bin/env bash
# A/B of single-stream decode and prefill: the binaries given run `nextok bench` one after the
# other, ROUNDS times (interleaved, so that a change in the machine's load hits them alike), and
# the table gives each one's decode and prefill tokens/s per round and the median over the
# rounds, with every binary's ratio to the first, and the decode under a JSON schema
# (`constrained`) with its ratio to the same round's plain decode (`c/plain`, median over the
# rounds; issue 16 asks ≥ 0.97). On a loaded machine only the ratios mean anything.
#
#   tools/ab-decode.sh [-t THREADS] [-r ROUNDS] OLD NEW [MORE...]
#
# Each round is `BIN bench --threads THREADS --prefill 16 --decode 128 --repetitions 3 --json`;
# decode is the median of its repetitions. Needs jq; the model at the default path or in
# NEXTOK_MODEL.
set -euo pipefail
threads=1
rounds=5
while getopts "t:r:" opt; do
    case $opt in
        t) threads=$OPTARG ;;
        r) rounds=$OPTARG ;;
        *) echo "usage: $0 [-t THREADS] [-r ROUNDS] OLD NEW [MORE...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -lt 2 ]; then
    echo "usage: $0 [-t THREADS] [-r ROUNDS] OLD NEW [MORE...]" >&2
    exit 2
fi
bins=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
    for i in "${!bins[@]}"; do
        "${bins[$i]}" bench --threads "$threads" --prefill 16 --decode 128 --repetitions 3 --json \
            2>/dev/null >"$tmp/$i.$r.json"
        printf '%s round %s %s: decode %.1f prefill %.1f constrained %.1f\n' "$(date +%T)" "$r" \
            "${bins[$i]}" "$(jq .decode_tok_s.median "$tmp/$i.$r.json")" \
            "$(jq '.prefill_tok_s["16"].median' "$tmp/$i.$r.json")" \
            "$(jq .constrained_decode_tok_s.median "$tmp/$i.$r.json")" >&2
    done
done
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "threads $threads, $rounds rounds: median tok/s (ratio to ${bins[0]})"
printf '%-50s %10s %7s %10s %7s %11s %7s\n' binary decode ratio prefill ratio constrained c/plain
base_d=""
base_p=""
for i in "${!bins[@]}"; do
    d=$(for r in $(seq 1 "$rounds"); do jq .decode_tok_s.median "$tmp/$i.$r.json"; done | median)
    p=$(for r in $(seq 1 "$rounds"); do jq '.prefill_tok_s["16"].median' "$tmp/$i.$r.json"; done | median)
    c=$(for r in $(seq 1 "$rounds"); do jq .constrained_decode_tok_s.median "$tmp/$i.$r.json"; done | median)
    cp=$(for r in $(seq 1 "$rounds"); do
        jq '.constrained_decode_tok_s.median / .decode_tok_s.median' "$tmp/$i.$r.json"
    done | median)
    base_d=${base_d:-$d}
    base_p=${base_p:-$p}
    printf '%-50s %10.1f %7.3f %10.1f %7.3f %11.1f %7.3f\n' "${bins[$i]}" "$d" \
        "$(echo "$d / $base_d" | bc -l)" "$p" "$(echo "$p / $base_p" | bc -l)" "$c" "$cp"
done
