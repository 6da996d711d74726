#!/usr/bin/env python3
"""Compare the engine's --dump-dir taps with transformers' (oracle/dump.py): one table, a plot, a verdict.

    python3 oracle/compare.py --ours OURS --ref REF_FP32 [--ref-bf16 REF_BF16] [--bound 2e-2] [--plot err.png]

Per tap: relative L2 error ||ours - ref|| / ||ref|| and max |ours - ref| against the fp32 reference.
Teacher-forced top-1: at each prompt position, does our argmax equal transformers bf16's (fp32's when no
bf16 dump is given)? Counted only where the position is clear: the fp32 top-1/top-2 logit gap exceeds
2 x (rms logit error of ours + rms logit error of transformers bf16) at that position, i.e. where rounding
alone cannot flip the order; each clear miss is listed with its gap over that threshold and whose top-1
left fp32's. Greedy ids: length of the common prefix with the reference's ids.npy. Mixture layers (routing_NN
taps): at how many positions the chosen experts differ from fp32's (ours, and transformers bf16's); a run with
--force-routing REF_FP32 takes fp32's choices, and its taps then measure the arithmetic alone.
Exit status 1 when a tap exceeds --bound or the clear-position agreement is below --min-top1.
"""
import argparse
import glob
import os
import sys

import numpy as np


def load(d, name):
    p = os.path.join(d, name + ".npy")
    return np.load(p).astype(np.float64) if os.path.exists(p) else None


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def tap_names(ref):
    names = [os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ref, "*.npy"))]
    order = lambda n: (0, "") if n == "embed" else (1, n) if n.startswith("layer_") else (2, n) if n == "final_norm" else (3, n)
    return sorted([n for n in names if n not in ("ids", "prompt_ids", "gen_gaps") and not n.startswith("routing_")], key=order)


def routing_agreement(ours, ref32, ref16):
    """Per mixture layer (routing_NN taps: [T][k] expert choices): positions whose set of experts differs from fp32's,
    ours and transformers bf16's."""
    rows = []
    for p in sorted(glob.glob(os.path.join(ref32, "routing_*.npy"))):
        name = os.path.basename(p)[:-4]
        r = np.sort(np.load(p), axis=1)
        a, c = load(ours, name), load(ref16, name) if ref16 else None
        n = len(a) if a is not None else len(r)  # the prompt's positions (the reference's may go on into its greedy steps)
        r = r[:n]
        diff = lambda x: None if x is None else int(np.sum(np.any(np.sort(x[:n], axis=1) != r, axis=1)))
        rows.append((name, n, diff(a), diff(c)))
    return rows


def compare_taps(ours, ref, ref16=None):
    """(name, rel_l2 ours, max_abs ours, rel_l2 transformers bf16 or None) per tap, against fp32."""
    rows = []
    for name in tap_names(ref):
        a, b = load(ours, name), load(ref, name)
        c = load(ref16, name) if ref16 else None
        base = rel_l2(c, b) if c is not None else None
        if a is None:
            rows.append((name, None, None, base))
            continue
        if a.shape != b.shape:
            raise SystemExit(f"{name}: ours {a.shape} vs reference {b.shape}")
        rows.append((name, rel_l2(a, b), float(np.max(np.abs(a - b))), base))
    return rows


def top1_agreement(ours, ref32, ref16):
    """Fraction of clear positions where our argmax equals the reference's (bf16 if given)."""
    lo, l32 = load(ours, "logits"), load(ref32, "logits")
    l16 = load(ref16, "logits") if ref16 else None
    target = l16 if l16 is not None else l32
    srt = np.sort(l32, axis=1)
    gap = srt[:, -1] - srt[:, -2]
    err = np.sqrt(np.mean((lo - l32) ** 2, axis=1))
    if l16 is not None:
        err = err + np.sqrt(np.mean((l16 - l32) ** 2, axis=1))
    clear = gap > 2 * err
    top_ours, top_target, top32 = np.argmax(lo, axis=1), np.argmax(target, axis=1), np.argmax(l32, axis=1)
    agree, agree32, target32 = top_ours == top_target, top_ours == top32, top_target == top32
    ref16_wrong = int((clear & ~target32).sum()) if l16 is not None else 0
    # Each clear position where we differ from the target: (position, fp32 gap / the clear threshold, whether
    # ours and the target each keep fp32's top-1): how near the threshold the misses sit, and whose they are.
    misses = [(int(i), float(gap[i] / (2 * err[i])), bool(agree32[i]), bool(target32[i])) for i in np.flatnonzero(clear & ~agree)]
    return int(clear.sum()), int((agree & clear).sum()), int(agree.sum()), len(agree), int((agree32 & clear).sum()), ref16_wrong, misses


def greedy_prefix(ours, ref):
    a, b = load(ours, "ids"), load(ref, "ids")
    if a is None or b is None:
        return None
    n = min(len(a), len(b))
    k = next((i for i in range(n) if a[i] != b[i]), n)
    return k, len(a), len(b)


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in rows if r[1] is not None]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.semilogy(range(len(rows)), [max(r[1], 1e-9) for r in rows], "o-", label="monocu")
    if all(r[3] is not None for r in rows):
        ax.semilogy(range(len(rows)), [max(r[3], 1e-9) for r in rows], "s--", label="transformers bf16")
    ax.legend()
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r[0].replace("layer_", "L") for r in rows], rotation=90, fontsize=7)
    ax.set_ylabel("relative L2 error vs fp32")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--ref", required=True, help="transformers fp32 taps")
    ap.add_argument("--ref-bf16", help="transformers bf16 taps (for top-1 agreement)")
    ap.add_argument("--bound", type=float, default=2e-2)
    ap.add_argument("--min-top1", type=float, default=0.995)
    ap.add_argument("--plot")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    rows = compare_taps(a.ours, a.ref, a.ref_bf16)
    ok = True
    print(f"{'tap':<12} {'rel_l2':>10} {'max_abs':>10} {'hf_bf16_rel_l2':>15}")
    for name, r, m, base in rows:
        hb = f"{base:15.3e}" if base is not None else f"{'-':>15}"
        if r is None:
            print(f"{name:<12} {'missing':>10} {'':>10} {hb}")
            ok = False
            continue
        flag = "" if r <= a.bound else "  <-- over bound"
        ok &= r <= a.bound
        print(f"{name:<12} {r:10.3e} {m:10.3e} {hb}{flag}")
    n_clear, n_agree_clear, n_agree, n, n_agree32, ref16_wrong, misses = top1_agreement(a.ours, a.ref, a.ref_bf16)
    frac = n_agree_clear / max(n_clear, 1)
    ok &= frac >= a.min_top1
    print(f"top-1 vs transformers {'bf16' if a.ref_bf16 else 'fp32'}: {n_agree_clear}/{n_clear} clear positions "
          f"({100 * frac:.2f}%), {n_agree}/{n} of all positions")
    print(f"top-1 vs transformers fp32: {n_agree32}/{n_clear} clear positions ({100 * n_agree32 / max(n_clear, 1):.2f}%)"
          + (f"; transformers bf16 itself differs from fp32 on {ref16_wrong} of them" if a.ref_bf16 else ""))
    for pos, margin, ours_ok, ref_ok in misses:
        print(f"  clear miss at position {pos}: fp32 gap {margin:.2f}x the threshold; fp32's top-1 kept by "
              f"{'us' if ours_ok else 'not us'}, {'the reference' if ref_ok else 'not the reference'}")
    for name, n, d_ours, d16 in routing_agreement(a.ours, a.ref, a.ref_bf16):
        print(f"{name}: expert choices differ from fp32's at {d_ours if d_ours is not None else '?'} of {n} positions"
              + (f" (transformers bf16: {d16})" if d16 is not None else ""))
    g = greedy_prefix(a.ours, a.ref_bf16 or a.ref)
    if g:
        print(f"greedy ids: first {g[0]} identical (ours {g[1]}, reference {g[2]})")
    if a.plot:
        plot(rows, a.plot, a.title)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
