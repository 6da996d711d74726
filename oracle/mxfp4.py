#!/usr/bin/env python3
"""MXFP4 as GPT-OSS checkpoints store their experts, in torch (CPU or GPU): the same rule as common/host/mxfp4.h.

    blocks, scales = quantize_rows(w)      # w [.., K] float -> uint8 [.., K/32, 16], uint8 [.., K/32]
    w2 = dequantize(blocks, scales)         # float32 [.., K]
    python3 oracle/mxfp4.py --selftest      # the rule, ties and round trip on hand-made and random rows

A row of K weights is K/32 blocks of 32. Byte b of a block holds element 2b in its low nibble and 2b + 1 in its
high nibble, an E2M1 code (bit 3 the sign, then 0, 0.5, 1, 1.5, 2, 3, 4, 6); one E8M0 byte s per block scales it
by 2^(s - 127). The encoder must be bit-identical to the C++ one, so that the checkpoints made here and those
tools/quantize writes agree: per block e is the smallest integer with max|x| / 6 <= 2^e (float32 arithmetic,
clamped to [-127, 127]; an all-zero block gets -127), and each x 2^-e rounds to the nearest code, ties to the
code with an even low bit, sign kept (-0 is code 8). A decoded value is code x 2^e: exact in float32 and, for
every scale a real model has, in bf16.
"""
import argparse
import math
import struct

import torch

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Halfway between neighbouring codes i and i + 1 (exact in float32). At one of them the code with the even low
# bit wins. Comparing against these gives the same code as mxfp4.h's distance loop: near a midpoint both
# distances are exact in float32 (Sterbenz), save 0.5 - a for a just under 0.25, which can only round to a tie
# that code 0 wins anyway.
MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
BLOCK = 32


def _pow2(e):
    """2^e as float32 for integer e in [-127, 127], built from its bits: exact, 2^-127 (a subnormal) too."""
    e = e.to(torch.int32)
    normal = (e + 127).clamp(min=1) << 23
    subnormal = torch.ones_like(e) << (e + 149).clamp(0, 22)
    return torch.where(e >= -126, normal, subnormal).view(torch.float32)


def _codes(v):
    """E2M1 codes (uint8, sign in bit 3) of float32 values already divided by their block's scale."""
    a = v.abs()
    code = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for i, m in enumerate(MIDPOINTS):
        up = a > m
        if (i + 1) % 2 == 0:  # a tie goes up to an even code
            up |= a == m
        code += up.to(torch.uint8)
    return code | (torch.signbit(v).to(torch.uint8) << 3)


def _quantize_blocks(x):
    """x float32 [R, nb, 32] -> (blocks uint8 [R, nb, 16], scales uint8 [R, nb])."""
    amax = x.abs().amax(-1)
    m, ex = torch.frexp(amax / 6.0)  # amax / 6 rounded to float32, as mxfp4.h has it; m in [0.5, 1)
    e = torch.where(m == 0.5, ex - 1, ex).clamp(-127, 127)
    e = torch.where(amax > 0, e, torch.full_like(e, -127))
    code = _codes(x * _pow2(-e)[..., None])
    return code[..., 0::2] | (code[..., 1::2] << 4), (e + 127).to(torch.uint8)


def quantize_rows(w):
    """w [.., K] (any float dtype, K a multiple of 32) -> (blocks uint8 [.., K/32, 16], scales uint8 [.., K/32]),
    on w's device. Works in slices of about 16M weights so that a 120B layer's experts fit beside their temporaries."""
    K = w.shape[-1]
    assert K % BLOCK == 0, f"a row of {K} is not whole blocks of {BLOCK}"
    lead, nb = w.shape[:-1], K // BLOCK
    x = w.reshape(-1, nb, BLOCK)
    blocks = torch.empty(x.shape[0], nb, BLOCK // 2, dtype=torch.uint8, device=w.device)
    scales = torch.empty(x.shape[0], nb, dtype=torch.uint8, device=w.device)
    step = max(1, (1 << 24) // K)
    for r in range(0, x.shape[0], step):
        blocks[r:r + step], scales[r:r + step] = _quantize_blocks(x[r:r + step].float())
    return blocks.reshape(*lead, nb, BLOCK // 2), scales.reshape(*lead, nb)


def dequantize(blocks, scales):
    """(blocks uint8 [.., nb, 16], scales uint8 [.., nb]) -> float32 [.., nb * 32]; a scale of 255 (E8M0's NaN) gives NaN."""
    table = torch.tensor(E2M1 + tuple(-v for v in E2M1), dtype=torch.float32, device=blocks.device)
    codes = torch.stack((blocks & 0x0F, blocks >> 4), -1).reshape(*blocks.shape[:-1], BLOCK)
    s = scales.to(torch.int32)
    scale = torch.where(s == 255, torch.full(s.shape, float("nan"), device=s.device), _pow2((s - 127).clamp(max=127)))
    out = table[codes.long()] * scale[..., None]
    return out.reshape(*blocks.shape[:-2], blocks.shape[-2] * BLOCK)


# ---- self-test: the rule written out as mxfp4.h has it (a loop over the codes), against the vectorised one ----

def _f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def _ref_exponent(amax):
    """mxfp4.h's exponent for one block's max|x| (a float32 value as a Python float)."""
    if amax == 0:
        return -127
    m, ex = math.frexp(_f32(amax / 6.0))  # one division, rounded once to float32 (double then float is exact here)
    return max(-127, min(127, ex - 1 if m == 0.5 else ex))


def _ref_codes(v):
    """mxfp4.h's e2m1_code, vectorised as written: float32 distances to every code, ties to the even one."""
    a = v.abs()
    table = torch.tensor(E2M1, dtype=torch.float32, device=v.device)
    d = (a[..., None] - table).abs()
    best = torch.zeros(v.shape, dtype=torch.long, device=v.device)
    for c in range(1, 8):
        db = d.gather(-1, best[..., None])[..., 0]
        take = d[..., c] < db
        if c % 2 == 0:
            take |= d[..., c] == db
        best = torch.where(take, torch.full_like(best, c), best)
    return best.to(torch.uint8) | (torch.signbit(v).to(torch.uint8) << 3)


def _bits(t):
    return t.contiguous().view(torch.int32)


def selftest(device="cpu"):
    g = torch.Generator().manual_seed(0)
    # Hand-made: every midpoint (ties), values just off them, the top code, signed zeros; amax 6 gives e = 0.
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0]
    want = [0, 2, 2, 4, 4, 6, 6, 7]
    off = [0.2501, 0.7499, 1.2501, 1.7499, 2.5001, 3.4999, 5.0001, 0.0]
    off_want = [1, 1, 3, 3, 5, 5, 7, 0]
    row = ties + [-t for t in ties] + off + [-0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0]
    codes = want + [8 | c for c in want] + off_want + [8, 0] * 4
    hand = torch.tensor(row, dtype=torch.float32)
    for k in (0, 10, -20):  # the same block scaled by 2^k: the same codes, scale byte 127 + k
        b, s = quantize_rows((hand * 2.0 ** k).to(device))
        got = torch.stack((b[0] & 0x0F, b[0] >> 4), -1).reshape(-1).cpu().tolist()
        assert got == codes, f"2^{k}: codes {got} != {codes}"
        assert s.cpu().tolist() == [127 + k], f"2^{k}: scale {s.cpu().tolist()}"
    # Exponents at their edges: amax exactly 6 x 2^e, just past it, 3 (= 6 x 2^-1), and an all-zero block of -0s.
    past6 = float(torch.nextafter(torch.tensor(6.0), torch.tensor(7.0)))
    for amax, e in ((6.0, 0), (past6, 1), (3.0, -1), (12.0, 1), (0.0, -127)):
        blk = torch.zeros(BLOCK)
        blk[5] = amax
        b, s = quantize_rows(blk.to(device))
        assert int(s[0]) == e + 127, f"amax {amax}: scale byte {int(s[0])}, want {e + 127}"
    b, s = quantize_rows(torch.full((BLOCK,), -0.0, device=device))
    assert int(s[0]) == 0 and (b == 0x88).all(), "an all -0 block: scale 0, codes 8"
    assert (_bits(dequantize(b, s)) == _bits(torch.full((BLOCK,), -0.0, device=device))).all(), "-0 decodes as -0"

    # Random rows over many scales, with zero blocks, -0s, and values a float32 step either side of each midpoint.
    rows = torch.randn(96, 256, generator=g) * torch.exp2(torch.randint(-30, 30, (96, 1), generator=g).float())
    rows[3, :32] = 0
    rows[4, 32:64] = -0.0
    rows[5, ::7] = -0.0
    mids = torch.tensor(MIDPOINTS)
    near = torch.stack((mids, torch.nextafter(mids, mids + 1), torch.nextafter(mids, mids - 1)), -1).reshape(-1)
    pick = torch.randint(0, near.numel(), (16, 256), generator=g)
    sign = torch.where(torch.rand(16, 256, generator=g) < 0.5, -1.0, 1.0)
    tie_rows = near[pick] * sign
    tie_rows[:, ::32] = 6.0 * sign[:, ::32]  # every block's amax 6: e = 0, the values are used as they are
    tie_rows = tie_rows * torch.exp2(torch.randint(-8, 8, (16, 1), generator=g).float())
    w = torch.cat((rows, tie_rows)).to(device)
    b, s = quantize_rows(w)
    ref_e = torch.tensor([[_ref_exponent(float(a)) for a in r] for r in w.reshape(w.shape[0], -1, BLOCK).abs().amax(-1).cpu()])
    assert torch.equal(s.cpu().long(), ref_e + 127), "scales differ from the rule written out"
    ref_c = _ref_codes(w.reshape(w.shape[0], -1, BLOCK) * _pow2(-ref_e.to(device))[..., None])
    got_c = torch.stack((b & 0x0F, b >> 4), -1).reshape(ref_c.shape)
    assert torch.equal(got_c, ref_c), f"codes differ from the rule written out at {(got_c != ref_c).nonzero()[:5].tolist()}"

    # Round trip: a decoded tensor encodes back to itself, bit for bit (its scale may drop, its values may not).
    dq = dequantize(b, s)
    dq2 = dequantize(*quantize_rows(dq))
    assert torch.equal(_bits(dq), _bits(dq2)), "dequant(quant(dequant(q))) != dequant(q)"
    wb = w.reshape(w.shape[0], -1, BLOCK)
    err = ((dq.reshape(wb.shape) - wb).abs() / wb.abs().amax(-1, keepdim=True).clamp(min=1e-30)).max()
    assert err <= 1 / 3 + 1e-6, f"an error of {float(err):.3g} of its block's max"  # half of 4..6 over a max of at least 3
    # Leading dimensions and bf16 input; dequantized values are exact in bf16.
    w3 = torch.randn(3, 5, 64, generator=g).to(device, torch.bfloat16)
    b3, s3 = quantize_rows(w3)
    assert b3.shape == (3, 5, 2, 16) and s3.shape == (3, 5, 2)
    d3 = dequantize(b3, s3)
    assert torch.equal(d3, d3.to(torch.bfloat16).float()), "a decoded value is not exact in bf16"
    return b, s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args()
    if not a.selftest:
        ap.error("nothing to do (--selftest)")
    b, s = selftest("cpu")
    print("mxfp4 self-test (cpu): passed")
    if torch.cuda.is_available():
        bg, sg = selftest("cuda")
        assert torch.equal(bg.cpu(), b) and torch.equal(sg.cpu(), s), "the GPU encodes differently from the CPU"
        print("mxfp4 self-test (cuda, and the same bytes as the cpu): passed")


if __name__ == "__main__":
    main()
