#!/usr/bin/env bash
# `mxserve eval` against the independent reference's figures (fixture reference_metrics.json)
# and the accuracy bounds of the MX schemes. Usage: eval_test.sh MXSERVE SOURCE_DIR SHARED_DIR
set -u
bin=$1 src=$2 shared=$3
model=$src/models/tiny-qwen3-moe
ref=$shared/fixtures/tiny-qwen3-moe/eval/reference_metrics.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 passes=0
check() { if [ "$2" = 0 ]; then passes=$((passes + 1)); echo "ok   $1"; else fails=$((fails + 1)); echo "FAIL $1"; fi; }

# BF16, whole held-out sets, non-overlapping 256-token windows.
"$bin" eval -m "$model" --ctx 256 --stride 256 --json >"$tmp/bf16.json" || echo '{}' >"$tmp/bf16.json"
python3 - "$tmp/bf16.json" "$ref" <<'PY'
import json, sys
got = json.load(open(sys.argv[1])); ref = json.load(open(sys.argv[2]))
ppl, acc = ref["prose_heldout"]["perplexity"], ref["arith_heldout"]["exact_match"]
print(f"bf16: perplexity {got['perplexity']:.4f} (reference {ppl}), accuracy {got['task_accuracy']:.3f} (reference {acc}), {got['scored_tokens']} tokens")
assert abs(got["perplexity"] / ppl - 1) <= 0.005, "perplexity off by more than 0.5%"
assert abs(got["task_accuracy"] - acc) <= 0.01, "accuracy off by more than 1 point"
assert got["scored_tokens"] == ref["prose_heldout"]["scored_tokens"]
PY
check "eval bf16 reproduces the reference perplexity and accuracy" $?

# W8A8 MXFP8 against BF16 on the same tokens (the first 200 windows, 150 questions).
"$bin" eval -m "$model" --quantization mxfp8 --compare-bf16 --max-windows 200 --max-questions 150 --json >"$tmp/q8.json" || echo '{}' >"$tmp/q8.json"
python3 - "$tmp/q8.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"w8a8_mxfp8: ppl change {100*d['ppl_change']:+.3f}%, top-1 agreement {100*d['top1_agreement']:.2f}%, KL {d['kl_mean']:.5f}, accuracy {d['task_accuracy']:.3f} vs bf16 {d['ref_task_accuracy']:.3f}")
assert abs(d["ppl_change"]) <= 0.01 and d["top1_agreement"] >= 0.95
assert abs(d["task_accuracy"] - d["ref_task_accuracy"]) <= 0.02
PY
check "w8a8_mxfp8: perplexity within 1%, top-1 agreement >= 95%, accuracy within 2 points" $?

# Dual-level MXFP4 has a lower KL than single-level on the same windows.
"$bin" eval -m "$model" --ppl "$model/eval/prose_heldout.txt" --quantization mxfp4 --compare-bf16 --max-windows 60 --json >"$tmp/dual.json"
"$bin" eval -m "$model" --ppl "$model/eval/prose_heldout.txt" --quantization w4a4_mxfp4 --compare-bf16 --max-windows 60 --json >"$tmp/single.json"
python3 - "$tmp/dual.json" "$tmp/single.json" <<'PY'
import json, sys
d, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(f"KL: w4a4_mxfp4_dual {d['kl_mean']:.5f} < w4a4_mxfp4 {s['kl_mean']:.5f}")
assert d["kl_mean"] < s["kl_mean"]
PY
check "w4a4_mxfp4_dual has a lower KL than w4a4_mxfp4" $?

"$bin" eval -m "$model" --ctx 4096 >/dev/null 2>&1; [ $? -ne 0 ]; check "eval: a window past the context is refused" $?
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
