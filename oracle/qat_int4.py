#!/usr/bin/env python3
"""INT4 codes and scales chosen by distillation from the bf16 model (quantization-aware training), not by rounding.

    python3 oracle/qat_int4.py --teacher models/pycoder-13m --init QE/gptq-int4 --out QE/qat-int4 \
        [--steps 1000] [--batch 64] [--seq 512] [--lr 1e-4] [--train-ids ids.npy | --train-text a.txt,b.txt]

--init is an INT4 checkpoint of the teacher written by tools/quantize (round to nearest or GPTQ): its codes and
scales are the starting point, its lm_head (FP8) is kept as it is. The student is the teacher with every
projection (q/k/v/o/gate/up/down) in its INT4 form, exactly as the engine's prefill dequantizes it:
    w = bf16(s q),  q = clamp(round(W / s), -8, 7),  s = bf16(scale)   (symmetric groups of 128 inputs)
Training moves the latent weights W and the group scales so as to lower the KL divergence of the student's
next-token distribution from the teacher's on training-split text, never on the held-out text that
oracle/quant_eval.py measures (on the GPU both run their matmuls in bf16, as the engine does). Gradients pass
through the rounding unchanged (the straight-through estimator; for the scales this is LSQ's gradient, Esser et
al. 2020). Embeddings and norms stay fixed, and so does the lm_head unless --train-head (its e4m3 codes then
move, over fixed scales). The output is --init with only those codes and scales rewritten in place: the same
tensors, shapes and bytes elsewhere, so the engines load it as any tools/quantize checkpoint.
On the shipped model (H100, ~70 s for the default 1,000 steps of 64 x 512 tokens), from GPTQ's codes: held-out
top-1 agreement with the bf16 engine 91.6% -> 94.2-94.8% (four runs), perplexity increase 2.35% -> 0.6-0.9% (kb/status.md).

The forward pass is written out below (Qwen3: RMSNorm, q/k norm, rotate-half RoPE, GQA, SwiGLU), so the script
also runs where transformers is missing; where it is present, the teacher's logits are checked against
Qwen3ForCausalLM's first. Training text: --train-ids, or --train-text, or else the training split of
oracle/train_tiny.py's corpus, tokenized with the model's tokenizer (files in a seeded random order, up to
--max-tokens). Teacher, latent weights, gradients and Adam's moments are fp32 on one GPU (~20 bytes per
parameter: models up to about 3B parameters on an 80 GB GPU), and so are a few batch x seq x vocab logits
(lower --batch for a large vocabulary).
"""
import argparse
import functools
import json
import math
import os
import shutil
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
               "mlp.down_proj")
GROUP = 128
DEFAULT_MAX_TOKENS = 16_000_000  # of training text: the default 1,000 x 64 x 512 steps see each token ~2 times


# ---- safetensors, read by hand (the local machine has no safetensors package) ----

@functools.lru_cache(maxsize=None)
def e4m3_values():
    """The 256 e4m3fn codes as float32 (0x7f / 0xff are NaN)."""
    v = np.zeros(256, np.float32)
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        x = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        v[b] = np.nan if (e == 15 and m == 7) else (-x if b & 0x80 else x)
    return v


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return header, 8 + n


def read_tensors(path):
    """name -> (dtype, shape, raw numpy array of the stored bytes' element type)."""
    header, base = read_header(path)
    blob = np.fromfile(path, dtype=np.uint8)
    kinds = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U8": np.uint8, "F8_E4M3": np.uint8}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in kinds:
            raise SystemExit(f"{path}: tensor {name} has dtype {t['dtype']}, which this script does not read")
        s, e = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], blob[base + s:base + e].view(kinds[t["dtype"]]).reshape(t["shape"]))
    return out


def as_float(dtype, raw):
    if dtype == "BF16":
        return torch.from_numpy((raw.astype(np.uint32) << 16).view(np.float32))
    if dtype == "F8_E4M3":
        return torch.from_numpy(e4m3_values()[raw])
    return torch.from_numpy(raw.astype(np.float32))


def load_folder(folder):
    tensors = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            tensors.update(read_tensors(os.path.join(folder, f)))
    if not tensors:
        raise SystemExit(f"{folder}: no .safetensors files")
    return tensors


def rewrite_in_place(path, updates):
    """Overwrites the stored bytes of the tensors of `updates` (name -> numpy array of the stored dtype and shape)
    that this file holds, and removes them from `updates`."""
    header, base = read_header(path)
    with open(path, "r+b") as fh:
        for name in [n for n in updates if n in header]:
            data, t = np.ascontiguousarray(updates.pop(name)), header[name]
            b, e = t["data_offsets"]
            if data.nbytes != e - b or list(data.shape) != t["shape"]:
                raise SystemExit(f"{path}: {name} would change size ({list(data.shape)} vs {t['shape']})")
            fh.seek(base + b)
            fh.write(data.tobytes())


def bf16_bits(x):
    """float32 tensor -> uint16 numpy array of its bf16 rounding (round to nearest even, as __float2bfloat16_rn)."""
    return x.detach().to(torch.bfloat16).view(torch.int16).cpu().numpy().view(np.uint16)


def bf16_round(x):
    return x.to(torch.bfloat16).to(torch.float32)


# ---- the INT4 projection ----

def ste(x, y):
    """y in the forward pass, the identity's gradient in the backward pass."""
    return x + (y - x).detach()


class Int4Projection(torch.nn.Module):
    """Latent weights W [N][K] and group scales [N][K/128], used as the engine uses the stored codes."""

    def __init__(self, codes, scales):
        super().__init__()
        self.weight = torch.nn.Parameter(codes * scales.repeat_interleave(GROUP, 1))
        self.scale = torch.nn.Parameter(scales.clone())

    def codes_and_scales(self):
        s = ste(self.scale, bf16_round(self.scale.clamp_min(1e-12)))
        s_full = s.repeat_interleave(GROUP, 1)
        v = self.weight / s_full
        q = torch.clamp(ste(v, torch.round(v)), -8, 7)
        return q, s, s_full

    def forward(self):
        q, _, s_full = self.codes_and_scales()
        return ste(q * s_full, bf16_round(q * s_full))


def e4m3_code(v):
    """float tensor (|v| <= 448) -> e4m3fn byte codes, rounded to nearest, ties to even (as quant.h rounds)."""
    grid = torch.from_numpy(e4m3_values()[:127]).to(v.device)  # codes 0x00 .. 0x7e: 0 .. 448, increasing
    a = v.abs().clamp(max=448)
    hi = torch.searchsorted(grid, a.contiguous()).clamp(1, 126)
    lo = hi - 1
    d_lo, d_hi = a - grid[lo], grid[hi] - a
    code = torch.where((d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0)), lo, hi)
    return code + 128 * (v < 0).long()


class Fp8Projection(torch.nn.Module):
    """The FP8 lm_head next to INT4 layers (--train-head): latent weights over the fixed per-128 fp32 scales,
    used as the engine uses the stored e4m3 codes: w = bf16(s e4m3(W / s)). The scales stay: a floating-point
    code's relative error hardly depends on its scale (kb/decisions.md), and as parameters they would need
    steps relative to their size (~1e-4) rather than the weights' (a first run with the INT4 scales' step diverged)."""

    def __init__(self, codes, scales):
        super().__init__()
        self.weight = torch.nn.Parameter(codes * scales.repeat_interleave(GROUP, 1))
        self.register_buffer("scale", scales.clone())

    def codes_and_scales(self):
        """The e4m3 values (straight-through) and the scales."""
        s = self.scale.clamp_min(1e-12)
        v = self.weight / s.repeat_interleave(GROUP, 1)
        values = torch.from_numpy(e4m3_values()).to(v.device)[e4m3_code(v.detach())]
        return ste(v, values), s

    def forward(self):
        q, s = self.codes_and_scales()
        w = q * s.repeat_interleave(GROUP, 1)
        return ste(w, bf16_round(w))


def unpack_int4(qweight):
    """U8 [N][K/2] (element 2j in the low nibble, stored q + 8) -> float codes [N][K] in -8..7."""
    lo = (qweight & 0x0F).astype(np.int8) - 8
    hi = (qweight >> 4).astype(np.int8) - 8
    return torch.from_numpy(np.stack([lo, hi], axis=-1).reshape(qweight.shape[0], -1).astype(np.float32))


def pack_int4(q):
    u = (q.detach().cpu().numpy().astype(np.int16) + 8).astype(np.uint8)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8)


# ---- Qwen3's forward pass ----

class Qwen3:
    def __init__(self, cfg, fixed, device):
        self.L, self.H, self.KV = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.D, self.HD = cfg["hidden_size"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        self.eps = cfg["rms_norm_eps"]
        self.theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
        self.fixed = {k: v.to(device) for k, v in fixed.items()}
        self.rope_cache = {}

    def rms(self, x, w):
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, T):
        if T not in self.rope_cache:  # transformers' default RoPE: inv_freq in fp32, cos/sin of (pos x inv_freq) twice over
            inv = 1.0 / (self.theta ** (torch.arange(0, self.HD, 2, dtype=torch.float32, device=x.device) / self.HD))
            a = torch.arange(T, dtype=torch.float32, device=x.device)[:, None] * inv[None]
            a = torch.cat([a, a], -1)
            self.rope_cache[T] = (a.cos()[:, None, :], a.sin()[:, None, :])  # [T][1][HD]: x is [B][T][heads][HD]
        c, s = self.rope_cache[T]
        half = self.HD // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * c + rot * s

    def attention(self, q, k, v):
        G = self.H // self.KV
        k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        T = q.shape[2]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.HD)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        return s.softmax(-1) @ v

    def logits(self, ids, proj, head):
        """ids [B][T]; proj(name) -> weight [N][K]; head [V][D]."""
        W, (B, T) = self.fixed, ids.shape
        x = W["model.embed_tokens.weight"][ids]
        for l in range(self.L):
            p = f"model.layers.{l}."
            h = self.rms(x, W[p + "input_layernorm.weight"])
            q = F.linear(h, proj(p + "self_attn.q_proj")).view(B, T, self.H, self.HD)
            k = F.linear(h, proj(p + "self_attn.k_proj")).view(B, T, self.KV, self.HD)
            v = F.linear(h, proj(p + "self_attn.v_proj")).view(B, T, self.KV, self.HD)
            q = self.rope(self.rms(q, W[p + "self_attn.q_norm.weight"]), T).transpose(1, 2)
            k = self.rope(self.rms(k, W[p + "self_attn.k_norm.weight"]), T).transpose(1, 2)
            o = self.attention(q, k.to(q.dtype), v.transpose(1, 2).to(q.dtype)).transpose(1, 2).reshape(B, T, self.H * self.HD)
            x = x + F.linear(o, proj(p + "self_attn.o_proj")).float()
            h = self.rms(x, W[p + "post_attention_layernorm.weight"])
            g, u = F.linear(h, proj(p + "mlp.gate_proj")), F.linear(h, proj(p + "mlp.up_proj"))
            x = x + F.linear(F.silu(g) * u, proj(p + "mlp.down_proj")).float()
        return F.linear(self.rms(x, W["model.norm.weight"]), head).float()


# ---- data ----

def training_ids(model_dir, max_tokens, seed):
    """The training split of train_tiny.py's corpus (files in a seeded order), tokenized, up to max_tokens."""
    import train_tiny
    from tokenizers import Tokenizer
    train, _ = train_tiny.read_corpus()
    order = np.random.default_rng(seed).permutation(len(train))
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    parts, n = [], 0
    for i in range(0, len(order), 256):
        parts.append(train_tiny.encode_all(tok, [train[j] for j in order[i:i + 256]]))
        n += len(parts[-1])
        if n >= max_tokens:
            break
    return np.concatenate(parts)[:max_tokens]


def text_ids(model_dir, paths):
    """Text files tokenized with the model's tokenizer, each followed by its end-of-text token when it has one."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    eos = json.load(open(os.path.join(model_dir, "config.json"))).get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    ids = []
    for p in paths:
        ids.extend(tok.encode(open(p, encoding="utf-8", errors="replace").read(), add_special_tokens=False).ids)
        if eos is not None:
            ids.append(eos)
    return np.array(ids, dtype=np.int32)


def windows(ids, starts, seq, device):
    return torch.stack([torch.from_numpy(ids[s:s + seq].astype(np.int64)) for s in starts]).to(device)


def kl_from_teacher(student_logits, teacher_logits):
    """KL(teacher || student), the mean over positions."""
    ls = F.log_softmax(student_logits.reshape(-1, student_logits.shape[-1]), -1)
    lt = F.log_softmax(teacher_logits.reshape(-1, teacher_logits.shape[-1]), -1)
    return (lt.exp() * (lt - ls)).sum(-1).mean()


# ---- checks ----

def check_against_transformers(model, teacher_dir, head, proj, device):
    """The written-out forward against Qwen3ForCausalLM (fp32), where transformers is installed."""
    try:
        from transformers import Qwen3ForCausalLM
    except ImportError:
        print("transformers not importable: the forward pass is not checked against it")
        return
    hf = Qwen3ForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32).to(device).eval()
    ids = torch.randint(0, head.shape[0], (2, 64), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        ref = hf(input_ids=ids).logits.float()
        ours = model.logits(ids, proj, head)
    err = float((ours - ref).norm() / ref.norm())
    print(f"forward vs transformers' Qwen3ForCausalLM (fp32, 2 x 64 tokens): rel-L2 {err:.2e}")
    if not err < 1e-4:
        raise SystemExit(f"{teacher_dir}: this script's forward pass differs from transformers' by {err:.2e}")


def student_projections(init, n_layers, init_dir):
    """projection name -> Int4Projection at --init's codes and scales (checked to survive the round trip)."""
    student = {}
    for l in range(n_layers):
        for p in PROJECTIONS:
            name = f"model.layers.{l}.{p}"
            if name + ".qweight" not in init or name + ".scales" not in init:
                raise SystemExit(f"{init_dir}: no INT4 tensors {name}.qweight / .scales")
            codes = unpack_int4(init[name + ".qweight"][2])
            student[name] = Int4Projection(codes, as_float(*init[name + ".scales"][::2]))
            if not torch.equal(student[name].codes_and_scales()[0], codes):
                raise SystemExit(f"{init_dir}: {name}: the codes do not survive a round trip through the student")
    return student


def student_lm_head(init, teacher_head, train, init_dir, device):
    """The student's output projection: --init's FP8 one as the engine dequantizes it (an Fp8Projection to train
    with --train-head), its bf16 one, or else the teacher's (tied embeddings)."""
    fp8 = "lm_head.weight" in init and init["lm_head.weight"][0] == "F8_E4M3"
    if train and not fp8:
        raise SystemExit(f"{init_dir}: --train-head needs an FP8 lm_head (tools/quantize --dtype int4 writes one)")
    if not fp8:
        return as_float(*init["lm_head.weight"][::2]).to(device) if "lm_head.weight" in init else teacher_head
    codes, scales = as_float(*init["lm_head.weight"][::2]), as_float(*init["lm_head.weight_scale"][::2])
    if not train:
        return bf16_round(codes * scales.repeat_interleave(GROUP, 1)).to(device)
    head = Fp8Projection(codes, scales).to(device)
    if not torch.equal(head.codes_and_scales()[0].cpu(), codes):
        raise SystemExit(f"{init_dir}: lm_head: the codes do not survive a round trip through the student")
    return head


def lr_factor(progress):
    """Warm-up over the first 5% of training, then cosine decay to 0."""
    return progress / 0.05 if progress < 0.05 else 0.5 * (1 + math.cos(math.pi * (progress - 0.05) / 0.95))


def write_checkpoint(init_dir, out, init, student, head, config):
    """--init's files again, with the trained codes and scales written over the old ones in place."""
    updates, changed, total = {}, 0, 0
    for name, m in student.items():
        q, sc, _ = m.codes_and_scales()
        updates[name + ".qweight"], updates[name + ".scales"] = pack_int4(q), bf16_bits(sc)
        changed += int((updates[name + ".qweight"] != init[name + ".qweight"][2]).sum())
        total += init[name + ".qweight"][2].size
    if isinstance(head, Fp8Projection):
        q, sc = head.codes_and_scales()
        updates["lm_head.weight"] = e4m3_code(q.detach()).to(torch.uint8).cpu().numpy()
        updates["lm_head.weight_scale"] = sc.detach().float().cpu().numpy()
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(init_dir):
        shutil.copy(os.path.join(init_dir, f), os.path.join(out, f))
    for f in sorted(os.listdir(out)):
        if f.endswith(".safetensors"):
            rewrite_in_place(os.path.join(out, f), updates)
    if updates:
        raise SystemExit(f"{out}: tensors not found in any shard: {sorted(updates)[:3]}")
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
    return changed, total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", required=True, help="the bf16 model folder")
    ap.add_argument("--init", required=True, help="an INT4 checkpoint of it from tools/quantize")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-4, help="Adam's step for the latent weights (cosine decay to 0)")
    ap.add_argument("--scale-lr", type=float, default=1e-5, help="the same for the group scales")
    ap.add_argument("--train-head", action="store_true", help="train the FP8 lm_head's e4m3 codes too (over its fixed scales)")
    ap.add_argument("--train-ids", help="int32 .npy token stream to train on (default: the shipped model's training split)")
    ap.add_argument("--train-text", help="or text files to train on (comma-separated), tokenized with the model's tokenizer")
    ap.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.time()
    torch.manual_seed(a.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    amp = device == "cuda"

    cfg = json.load(open(os.path.join(a.teacher, "config.json")))
    icfg = json.load(open(os.path.join(a.init, "config.json")))
    qc = icfg.get("quantization_config") or {}
    if qc.get("quant_method") != "monocu" or qc.get("weights") != "int4":
        raise SystemExit(f"{a.init}/config.json: not an INT4 checkpoint from tools/quantize (quantization_config {qc})")
    teacher = {k: as_float(d, r) for k, (d, _, r) in load_folder(a.teacher).items()}
    init = load_folder(a.init)
    model = Qwen3(cfg, {k: v for k, v in teacher.items() if not any(f".{p}." in k for p in PROJECTIONS)}, device)
    teacher_head = teacher.get("lm_head.weight", teacher["model.embed_tokens.weight"]).to(device)
    student = student_projections(init, model.L, a.init)
    torch.nn.ModuleList(student.values()).to(device)
    student_head = student_lm_head(init, teacher_head, a.train_head, a.init, device)
    teacher_w = {name: teacher[name + ".weight"].to(device) for name in student}
    check_against_transformers(model, a.teacher, teacher_head, teacher_w.get, device)

    if a.train_ids:
        ids = np.load(a.train_ids).astype(np.int32)
    elif a.train_text:
        ids = text_ids(a.teacher, a.train_text.split(","))
    else:
        ids = training_ids(a.teacher, a.max_tokens, a.seed)
    monitor_starts = list(range(len(ids) - 8 * a.seq, len(ids) - a.seq + 1, a.seq))  # the stream's tail: never trained on
    n_train = len(ids) - 8 * a.seq - a.seq
    if n_train <= 0:
        raise SystemExit(f"{len(ids)} training tokens are too few for --seq {a.seq}")
    print(f"training text: {len(ids)} tokens; {a.steps} steps of {a.batch} x {a.seq}; device {device}; {time.time() - t0:.0f} s", flush=True)

    def teacher_logits(batch):
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            return model.logits(batch, teacher_w.get, teacher_head)

    def student_logits(batch):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            return model.logits(batch, lambda name: student[name](), student_head() if callable(student_head) else student_head)

    monitor = windows(ids, monitor_starts, a.seq, device)
    monitor_teacher = teacher_logits(monitor)

    def report(step):
        with torch.no_grad():
            s = student_logits(monitor)
            agree = float((s.argmax(-1) == monitor_teacher.argmax(-1)).float().mean())
            kl = float(kl_from_teacher(s, monitor_teacher))
        print(f"step {step}: monitor windows (training split's tail) top-1 vs teacher {100 * agree:.2f}%, KL {kl:.5f}, "
              f"{time.time() - t0:.0f} s", flush=True)
        return agree, kl

    start = report(0)
    heads = [student_head.weight] if isinstance(student_head, Fp8Projection) else []
    opt = torch.optim.Adam([{"params": [m.weight for m in student.values()] + heads, "lr": a.lr},
                            {"params": [m.scale for m in student.values()], "lr": a.scale_lr}], betas=(0.9, 0.95))
    base_lr = [g["lr"] for g in opt.param_groups]
    gen = np.random.default_rng(a.seed)
    # The schedule runs over --steps or over what is left of --max-seconds, whichever runs out first, so that a
    # run cut short by time still ends with small steps.
    t_train, budget = time.time(), a.max_seconds - (time.time() - t0)
    done = 0
    for step in range(1, a.steps + 1):
        used = (time.time() - t_train) / budget
        if used >= 1:
            print(f"stopping before step {step}: --max-seconds {a.max_seconds} reached", flush=True)
            break
        for g, lr in zip(opt.param_groups, base_lr):
            g["lr"] = lr * lr_factor(max((step - 1) / a.steps, used))
        batch = windows(ids, gen.integers(0, n_train, a.batch), a.seq, device)
        loss = kl_from_teacher(student_logits(batch), teacher_logits(batch))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done = step
        if step % max(1, a.steps // 10) == 0:
            report(step)
    end = report(done)

    config = dict(icfg, quantization_config=dict(qc, method=qc.get("method", "round-to-nearest") + "+qat", qat_steps=done,
                                                 qat_tokens=done * a.batch * a.seq))
    changed, total = write_checkpoint(a.init, a.out, init, student, student_head, config)
    print(f"wrote {a.out}: {changed} of {total} code bytes changed; monitor top-1 {100 * start[0]:.2f}% -> "
          f"{100 * end[0]:.2f}%, KL {start[1]:.5f} -> {end[1]:.5f}; {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
