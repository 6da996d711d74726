#!/usr/bin/env python3
"""torch's scaled_dot_product_attention beside tools/bench_attention: the same causal shapes, on the same card.

    python3 oracle/bench_sdpa.py            # fp16, batch 1, GQA through enable_gqa (no copy of the KV heads)

FLOPs count as bench_attention counts them: 4 head_dim per query-key pair a query sees, per head. Median of 10
timed calls after 3 warm-ups, with CUDA events. Prints one line per shape and the backend torch picked.
"""
import torch
import torch.nn.functional as F

PEAK = 989.4  # dense bf16 / fp16 tensor-core TFLOP/s of an H100 / H200 SXM


def bench(nh, nkv, hd, T, dtype=torch.float16):
    q = torch.randn(1, nh, T, hd, device="cuda", dtype=dtype)
    k = torch.randn(1, nkv, T, hd, device="cuda", dtype=dtype)
    v = torch.randn(1, nkv, T, hd, device="cuda", dtype=dtype)
    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=nh != nkv)
    times = []
    for i in range(13):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(a.elapsed_time(b))
    ms = sorted(times)[len(times) // 2]
    flop = 4.0 * nh * hd * T * (T + 1) / 2
    tf = flop / (ms * 1e-3) / 1e12
    print(f"torch sdpa {nh}/{nkv}/{hd}, T {T:6d}: {ms:8.3f} ms  {tf:6.1f} TFLOP/s  {100 * tf / PEAK:5.1f}% of peak")


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for T in (1024, 2048, 4096, 8192, 16384):
        bench(32, 8, 128, T)
    bench(64, 8, 64, 16384)
