#!/usr/bin/env python3
"""Where a decode step's time goes, kernel by kernel, from a profiling build's block timestamps.

    make trace && build/sm_90-trace/qwen3 -m MODEL --bench --n-prompt 512 -n 64 --timeline /tmp/tl
    python3 oracle/trace_report.py /tmp/tl.512 bf16          # bf16 | fp8 | int4: bytes per weight

The file holds one 56-byte record per block of every GEMV and Flash-Decoding launch of 3 decode steps
(common/trace.cuh: kind, N, K, block, SM, 6 timestamps in ns). Launches are told apart by kind and shape
and by block index (launches()); the report covers the step between the first two lm_head launches. Per kernel kind, averaged
over the step's layers, in microseconds:
  dur    previous kernel's last block end -> this kernel's last block end (what the kernel adds to the step)
  gap    previous kernel's end -> this kernel's first block past its wait (the PDL hand-over)
  stage  median block: wait -> x staged in shared memory (GEMV)
  x_in   median block: wait -> thread 0's copies of x landed (GEMV; the rest of stage is the other warps'
         copies and the arithmetic: norm, conversion)
  tail   last block end - 90th percentile block end
  early  blocks that started before the previous kernel ended (programmatic dependent launch)
  TB/s   weight bytes / dur (GEMV)
and for Flash-Decoding's split launch the median block's phases after its wait: queries ready, keys done,
partials written (its merge is a launch of its own, "attention merge").
"""
import argparse
import sys

import numpy as np

RECORD = np.dtype([("kind", "<u4"), ("n", "<u4"), ("k", "<u4"), ("block", "<u4"), ("sm", "<u4"), ("pad", "<u4"),
                   ("t", "<u8", (6,))])
GEMV, FD_SPLIT, FD_MERGE = 1, 2, 3
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0 + 4 / 128, "int4": 0.5 + 2 / 128}  # with the scales (fp8: a float per 128; int4: a bf16 per 128)
LM_HEAD_MIN_ROWS = 32000  # the one GEMV this large: a step's boundary


def launches(rec):
    """Group block records into launches: same kind and shape, in start order; a block index that the open launch of
    that kind and shape already holds starts the next one. (Each launch of a kernel numbers its blocks from 0, and
    the next layer's launch of the same kernel starts its blocks only after this one's have all started: the
    launches are chained. An earlier rule, start times within 15 us, merged consecutive layers at Qwen3-0.6B.)"""
    out, open_by_key = [], {}
    for i in np.argsort(rec["t"][:, 0], kind="stable"):
        kind = rec["kind"][i]
        key = ("fd",) if kind == FD_SPLIT else ("merge",) if kind == FD_MERGE else (int(rec["n"][i]), int(rec["k"][i]))
        block = int(rec["block"][i])
        j = open_by_key.get(key)
        if j is None or block in out[j]["blocks"]:
            out.append({"key": key, "rows": [], "blocks": set()})
            j = open_by_key[key] = len(out) - 1
        out[j]["rows"].append(i)
        out[j]["blocks"].add(block)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("dtype", choices=sorted(WEIGHT_BYTES))
    a = ap.parse_args()
    rec = np.fromfile(a.file, dtype=RECORD)
    if rec.size == 0:
        sys.exit(f"{a.file}: no records")
    t = rec["t"].astype(np.int64)
    end = t[:, 4]  # GEMV: all warps done; FD: partials written / merged
    runs = launches(rec)
    heads = [i for i, r in enumerate(runs) if isinstance(r["key"][0], int) and r["key"][0] >= LM_HEAD_MIN_ROWS]
    if len(heads) < 2:
        sys.exit(f"{a.file}: fewer than two lm_head launches: not a whole decode step")
    kinds, fd_phases, prev_end, step = {}, [], None, 0.0
    for r in runs[heads[0] + 1: heads[1] + 1]:
        rows = np.array(r["rows"])
        tr, er = t[rows], end[rows]
        is_fd, is_merge = r["key"][0] == "fd", r["key"][0] == "merge"
        name = "attention" if is_fd else "attention merge" if is_merge else "%d x %d" % r["key"]
        release, last_end = tr[:, 1].min(), er.max()
        s = kinds.setdefault(name, dict(n=0, dur=0.0, gap=0.0, stage=0.0, x_in=0.0, tail=0.0, early=0, mb=0.0))
        s["n"] += 1
        dur = (last_end - (prev_end if prev_end is not None else tr[:, 0].min())) / 1e3
        s["dur"] += dur
        step += dur
        s["gap"] += (release - prev_end) / 1e3 if prev_end is not None else 0.0
        s["tail"] += (last_end - np.percentile(er, 90)) / 1e3
        s["early"] += int((tr[:, 0] < prev_end).sum()) if prev_end is not None else 0
        if is_fd:
            fd_phases.append([np.median(tr[:, 2] - tr[:, 1]), np.median(tr[:, 3] - tr[:, 2]), np.median(tr[:, 4] - tr[:, 3]),
                              last_end - release])
        elif not is_merge:
            s["stage"] += np.median(tr[:, 2] - tr[:, 1]) / 1e3
            s["x_in"] += np.median(tr[:, 5] - tr[:, 1]) / 1e3 if (tr[:, 5] > 0).all() else np.nan  # nan: no stamp
            s["mb"] += r["key"][0] * r["key"][1] * WEIGHT_BYTES[a.dtype] / 1e6
        prev_end = last_end
    print(f"{a.file}: {rec.size} block records, {len(runs)} launches; one step = {step:.1f} us")
    print("%-16s %4s %8s %6s %6s %6s %6s %7s %6s" % ("kernel (N x K)", "n", "dur us", "gap", "stage", "x_in", "tail", "early", "TB/s"))
    for name, s in kinds.items():
        n = s["n"]
        tbs = "%6.2f" % (s["mb"] / s["dur"]) if s["mb"] else "     -"
        x_in = "%6.2f" % (s["x_in"] / n) if s["mb"] and np.isfinite(s["x_in"]) else "     -"  # GEMVs with the stamp
        print("%-16s %4d %8.2f %6.2f %6.2f %s %6.2f %7.1f %s" % (name, n, s["dur"] / n, s["gap"] / n, s["stage"] / n, x_in,
                                                               s["tail"] / n, s["early"] / n, tbs))
    if fd_phases:
        f = np.median(np.array(fd_phases), axis=0) / 1e3
        print("attention after its wait (median block, us): queries ready %.2f, keys done %.2f, partials written %.2f; "
              "last block done %.2f" % tuple(f))


if __name__ == "__main__":
    main()
