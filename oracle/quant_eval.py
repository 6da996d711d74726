#!/usr/bin/env python3
"""Accuracy of quantized weights and the FP8 KV cache against the engine's own bf16, on held-out Python.

    python3 oracle/quant_eval.py --engine build/sm_90/qwen3 --model models/pycoder-13m \
        [--quantize build/tools/quantize] [--windows 4] [--seq 512] --out /tmp/qe

Held-out text: the files train_tiny.py held out of training (sha1 of the path mod 50 == 0), tokenized with
the model's tokenizer; --windows windows of --seq tokens evenly spaced over it (>= 1k positions in all). For each
variant the engine runs every window with --dump-dir and the script reports, against engine bf16:
teacher-forced top-1 agreement, held-out perplexity and its increase, and the rel-L2 error of each tap.
Variants: fp8 and int4 quantized on load, bf16 weights with the FP8 KV cache, fp8 + FP8 KV (both with
--kv-prefill-cache: the prompt attends through the cache, as decode does; by default the engine's prompt
attends to its own bf16 keys, which would leave the cache's rounding unmeasured), the Qwen FP8
layout (oracle/make_fp8_checkpoint.py), and with --quantize the tools/quantize checkpoints, whose logits
must equal quantize-on-load's bit for bit, plus its GPTQ checkpoints (--calib): calibrated on --calib-windows
windows of the *training* split, whose projection inputs the bf16 engine dumps (--dump-inputs). With --qat also
the GPTQ INT4 checkpoint refined by distillation (oracle/qat_int4.py, on training-split text; variant qat-int4),
and one more such variant per --qat-variant NAME=ARGS (ARGS: more qat_int4.py flags, e.g. "--lr 3e-4").
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def heldout_windows(model, windows, seq):
    """windows x (seq + 1) tokens, evenly spaced over the whole held-out token stream."""
    import train_tiny
    from tokenizers import Tokenizer
    _, valid = train_tiny.read_corpus()
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    ids = []
    for text in valid:
        ids.extend(tok.encode(text, add_special_tokens=False).ids)
        ids.append(tok.token_to_id(train_tiny.EOT))
    step = (len(ids) - seq - 1) // windows
    return [ids[w * step:w * step + seq + 1] for w in range(windows)], len(ids)


def calibration_windows(model, windows, seq):
    """windows x seq tokens from the training split (never the held-out text): files spread over the corpus."""
    import train_tiny
    from tokenizers import Tokenizer
    train, _ = train_tiny.read_corpus()
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    picked = train[::max(1, len(train) // (4 * windows))]
    ids = []
    for text in picked:
        ids.extend(tok.encode(text, add_special_tokens=False).ids)
        ids.append(tok.token_to_id(train_tiny.EOT))
    step = (len(ids) - seq) // windows
    return [ids[w * step:w * step + seq] for w in range(windows)]


def run(engine, model, ids_path, out, extra):
    cmd = [engine, "-m", model, "--ids", ids_path, "--dump-dir", out, "-n", "1", "--temp", "0", "-q"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")


def log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--quantize", help="build/tools/quantize, to check its output against quantize-on-load")
    ap.add_argument("--fp8-layout", help="a Qwen-FP8-layout copy of --model (make_fp8_checkpoint.py)")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--calib-windows", type=int, default=32, help="training-split windows for the GPTQ variants")
    ap.add_argument("--qat", action="store_true", help="also the GPTQ INT4 checkpoint refined by oracle/qat_int4.py")
    ap.add_argument("--qat-variant", action="append", default=[], metavar="NAME=ARGS", help="another one, with these qat_int4.py flags")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if (a.qat or a.qat_variant) and not a.quantize:
        ap.error("--qat needs --quantize (it starts from the GPTQ INT4 checkpoint)")
    if any("=" not in v or not v.split("=", 1)[0] for v in a.qat_variant):
        ap.error("--qat-variant takes NAME=ARGS")
    os.makedirs(a.out, exist_ok=True)
    wins, n_heldout = heldout_windows(a.model, a.windows, a.seq)
    variants = {"bf16": (a.model, ["--dtype", "bf16"]), "fp8": (a.model, ["--dtype", "fp8"]),
                "int4": (a.model, ["--dtype", "int4"]), "bf16+kv8": (a.model, ["--dtype", "bf16", "--kv-type", "fp8", "--kv-prefill-cache"]),
                "fp8+kv8": (a.model, ["--dtype", "fp8", "--kv-type", "fp8", "--kv-prefill-cache"])}
    if a.fp8_layout:
        variants["qwen-fp8-layout"] = (a.fp8_layout, [])
    if a.quantize:
        # Default output-projection handling (as quantize-on-load does it), plus int4 with a bf16 lm_head.
        for name, args in (("tool-fp8", ["--dtype", "fp8"]), ("tool-int4", ["--dtype", "int4"]),
                           ("tool-int4-head-bf16", ["--dtype", "int4", "--lm-head", "bf16"])):
            q = os.path.join(a.out, name)
            subprocess.run([a.quantize, a.model, q] + args, check=True, capture_output=True)
            variants[name] = (q, [])
        calib = []
        for w, chunk in enumerate(calibration_windows(a.model, a.calib_windows, a.seq)):
            p = os.path.join(a.out, f"calib{w}.ids")
            open(p, "w").write(" ".join(map(str, chunk)))
            d = os.path.join(a.out, f"calib{w}")
            run(a.engine, a.model, p, d, ["--dtype", "bf16", "--dump-inputs"])
            calib.append(d)
        for name, args in (("gptq-fp8", ["--dtype", "fp8"]), ("gptq-int4", ["--dtype", "int4"])):
            q = os.path.join(a.out, name)
            r = subprocess.run([a.quantize, a.model, q, "--calib", ",".join(calib)] + args, check=True, capture_output=True, text=True)
            print(r.stdout.strip())
            variants[name] = (q, [])
        qat = ([("qat-int4", "")] if a.qat else []) + [tuple(v.split("=", 1)) for v in a.qat_variant]
        if qat:
            import qat_int4
            ids_path = os.path.join(a.out, "qat_train_ids.npy")
            np.save(ids_path, qat_int4.training_ids(a.model, qat_int4.DEFAULT_MAX_TOKENS, 0))
        for name, extra in qat:
            q = os.path.join(a.out, name)
            cmd = [sys.executable, qat_int4.__file__, "--teacher", a.model, "--init", os.path.join(a.out, "gptq-int4"), "--out", q,
                   "--train-ids", ids_path] + extra.split()
            subprocess.run(cmd, check=True)
            variants[name] = (q, [])
    logits, taps = {}, {}
    for w in range(a.windows):
        chunk = wins[w][:a.seq]
        p = os.path.join(a.out, f"w{w}.ids")
        open(p, "w").write(" ".join(map(str, chunk)))
        for name, (model, extra) in variants.items():
            d = os.path.join(a.out, f"{name}.w{w}")
            run(a.engine, model, p, d, extra)
            logits.setdefault(name, []).append(np.load(os.path.join(d, "logits.npy")))
            for f in sorted(os.listdir(d)):
                if f.startswith("layer_") or f in ("final_norm.npy",):
                    taps.setdefault(name, {}).setdefault(f[:-4], []).append(np.load(os.path.join(d, f)))
    targets = np.concatenate([np.array(wins[w][1:]) for w in range(a.windows)])
    base = np.concatenate(logits["bf16"])
    base_top = base.argmax(1)
    base_nll = -log_softmax(base.astype(np.float64))[np.arange(len(targets)), targets].mean()
    results = {"positions": int(len(targets)), "variants": {}}
    print(f"{len(targets)} positions in {a.windows} windows spread over {n_heldout} held-out tokens; "
          f"engine bf16 perplexity {np.exp(base_nll):.4f}")
    print(f"{'variant':<16} {'top1 vs bf16':>12} {'ppl':>9} {'ppl +%':>7} {'worst layer rel_l2':>19}")
    for name in variants:
        lg = np.concatenate(logits[name])
        agree = float((lg.argmax(1) == base_top).mean())
        nll = -log_softmax(lg.astype(np.float64))[np.arange(len(targets)), targets].mean()
        layer_err = {k: float(np.linalg.norm(np.concatenate(v) - np.concatenate(taps["bf16"][k])) /
                              np.linalg.norm(np.concatenate(taps["bf16"][k]))) for k, v in taps[name].items()}
        worst = max(layer_err.items(), key=lambda kv: kv[1])
        results["variants"][name] = dict(top1_agreement=agree, ppl=float(np.exp(nll)), ppl_increase=float(np.exp(nll - base_nll) - 1),
                                         layer_rel_l2=layer_err)
        print(f"{name:<16} {100 * agree:11.2f}% {np.exp(nll):9.4f} {100 * (np.exp(nll - base_nll) - 1):6.2f}% "
              f"{worst[0]:>10} {worst[1]:.2e}")
    # A clear position: bf16's top-1/top-2 gap exceeds 0.5 nats (rounding alone cannot flip it).
    srt = np.sort(base, axis=1)
    clear = (srt[:, -1] - srt[:, -2]) > 0.5
    print(f"clear positions (bf16 top-2 gap > 0.5): {int(clear.sum())} of {len(clear)}")
    for name in variants:
        lg = np.concatenate(logits[name])
        agree_clear = float((lg.argmax(1) == base_top)[clear].mean())
        results["variants"][name]["top1_agreement_clear"] = agree_clear
        print(f"{name:<16} top-1 on clear positions {100 * agree_clear:6.2f}%")
    for d in ("fp8", "int4"):
        if f"tool-{d}" in logits:
            same = all(np.array_equal(x, y) for x, y in zip(logits[d], logits[f"tool-{d}"]))
            results[f"tool_{d}_bit_identical"] = same
            print(f"tools/quantize {d} vs quantize-on-load: logits {'bit-identical' if same else 'DIFFER'}")
    json.dump(results, open(os.path.join(a.out, "quant_eval.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
