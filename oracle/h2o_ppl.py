#!/usr/bin/env python3
"""What H2O KV eviction costs: held-out perplexity of a trained model at KV budgets of a fraction of the context.

    python3 oracle/h2o_ppl.py --engine build/sm_90/qwen3 --model models/pycoder-13m \
        [--ctx 512,2048] [--windows 8] [--fractions 0.125,0.25,0.5,1] --out /tmp/h2o [--plot kb/h2o_ppl.png]

For each context length C: --windows windows of C + 1 held-out tokens (train_tiny.py's split, as
quant_eval.py takes them), each run through the engine as decode steps (-ub 1: every token attends to what the
cache holds at that point, the streaming setting H2O is defined in) with --dump-dir, and the perplexity of the
next token over all C positions and over the positions past the smallest budget. Per budget fraction f < 1:
H2O with --kv-budget f*C (window f*C/2: half recent, half heavy hitters) and, for comparison, the recent tokens
alone (--kv-window = --kv-budget, a sliding window). f = 1 is the full cache. Writes h2o_ppl.json and the plot.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quant_eval import heldout_windows, log_softmax  # noqa: E402


def run(engine, model, ids_path, out, extra):
    cmd = [engine, "-m", model, "--ids", ids_path, "--dump-dir", out, "-n", "1", "--temp", "0", "-q", "-ub", "1"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return np.load(os.path.join(out, "logits.npy"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", default="512,2048")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--fractions", default="0.125,0.25,0.5,1")
    ap.add_argument("--out", required=True)
    ap.add_argument("--plot")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    fractions = [float(f) for f in a.fractions.split(",")]
    results = {"model": a.model, "windows": a.windows, "contexts": {}}
    for C in [int(c) for c in a.ctx.split(",")]:
        wins, _ = heldout_windows(a.model, a.windows, C)
        targets = np.concatenate([np.array(w[1:C + 1]) for w in wins])
        late_from = int(min(fractions) * C)  # positions past the smallest budget: where every budget has evicted
        late = np.concatenate([np.arange(C) >= late_from for _ in wins])
        variants = {}
        for f in fractions:
            n = int(round(f * C))
            if f >= 1:
                variants["full"] = (1.0, [])
            else:
                variants[f"h2o {f:g}"] = (f, ["--kv-budget", str(n), "--kv-window", str(max(1, n // 2))])
                variants[f"recent {f:g}"] = (f, ["--kv-budget", str(n), "--kv-window", str(n)])
        row = {}
        for name, (f, extra) in variants.items():
            lg = []
            for i, w in enumerate(wins):
                p = os.path.join(a.out, f"c{C}.w{i}.ids")
                open(p, "w").write(" ".join(map(str, w[:C])))
                lg.append(run(a.engine, a.model, p, os.path.join(a.out, f"c{C}.{name.replace(' ', '_')}.w{i}"), ["-c", str(C + 8)] + extra))
            nll = -log_softmax(np.concatenate(lg).astype(np.float64))[np.arange(len(targets)), targets]
            row[name] = dict(fraction=f, budget=int(round(f * C)), ppl=float(np.exp(nll.mean())), ppl_late=float(np.exp(nll[late].mean())))
            print(f"ctx {C:5d} {name:<14} budget {row[name]['budget']:5d}: perplexity {row[name]['ppl']:.4f}, "
                  f"past position {late_from}: {row[name]['ppl_late']:.4f}", flush=True)
        results["contexts"][str(C)] = dict(late_from=late_from, positions=int(len(targets)), variants=row)
    json.dump(results, open(os.path.join(a.out, "h2o_ppl.json"), "w"), indent=1)
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        ctxs = list(results["contexts"])
        fig, axes = plt.subplots(1, len(ctxs), figsize=(5.5 * len(ctxs), 4), squeeze=False)
        for ax, C in zip(axes[0], ctxs):
            row = results["contexts"][C]["variants"]
            full = row["full"]["ppl_late"]
            for kind, style in (("h2o", "o-"), ("recent", "s--")):
                pts = sorted((v["fraction"], v["ppl_late"]) for k, v in row.items() if k.startswith(kind)) + [(1.0, full)]
                ax.plot([100 * x for x, _ in pts], [y for _, y in pts], style,
                        label="H2O (half recent, half heavy hitters)" if kind == "h2o" else "recent tokens only")
            ax.axhline(full, color="gray", lw=0.8)
            ax.set_xlabel("KV budget, % of the context")
            ax.set_ylabel(f"perplexity past position {results['contexts'][C]['late_from']}")
            ax.set_title(f"{os.path.basename(a.model.rstrip('/'))}, context {C}, {a.windows} held-out windows")
            ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)


if __name__ == "__main__":
    main()
