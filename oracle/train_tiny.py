#!/usr/bin/env python3
"""Train the small model shipped in models/: a byte-level BPE tokenizer and a ~13M-parameter Qwen3 on Python.

    python3 oracle/train_tiny.py --out models/pycoder-13m --max-seconds 330

Runs on the GPU machine (torch, transformers, tokenizers there; nothing downloaded). Seeded.
  corpus      every .py file of the Python standard library (sysconfig's "stdlib" path) except test
              suites and a few generated/data-like modules, plus the .py files of the installed packages
              listed in PACKAGES, each file <= 256 KiB, sorted by relative path, cut at MAX_CORPUS_BYTES.
              A file goes to validation when sha1(its relative path) mod 50 == 0 (2%).
  tokenizer   HF `tokenizers` BPE, 8192 ids, NFC normalizer, Qwen2's split regex + ByteLevel (no prefix
              space), ByteLevel decoder, one special token <|endoftext|> (id 0), also the document separator.
  model       Qwen3ForCausalLM: hidden 384, 6 layers, 6 heads x 64 (head_dim 64), 2 KV heads (GQA 3),
              MLP 1152, tied embeddings, RoPE theta 10000, 2048 positions. bf16 on disk, two shards.
  training    random 512-token windows, batch 64, AdamW (0.9, 0.95), wd 0.1, lr 2e-3 with 300 warm-up
              steps and cosine decay to 10% over --steps; bf16 autocast; stops early at --max-seconds.
Writes the checkpoint, and train_log.json (corpus, sizes, steps, tokens seen, wall time, losses) and
loss.png into --log-dir.
"""
import argparse
import hashlib
import json
import math
import os
import random
import sysconfig
import time

import numpy as np
import torch

PACKAGES = ["transformers", "torch", "numpy", "scipy", "sympy", "networkx", "jinja2", "requests", "urllib3", "setuptools",
            "pip", "pandas", "matplotlib", "sklearn", "tqdm", "rich", "pygments", "click", "yaml", "packaging"]
SKIP_DIRS = {"test", "tests", "idle_test", "__pycache__", "site-packages", "dist-packages", "encodings", "lib2to3", "pydoc_data",
             "_vendor", "vendored"}
MAX_FILE = 256 * 1024
MAX_CORPUS_BYTES = 160 * 1024 * 1024
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
EOT = "<|endoftext|>"


def package_dirs():
    site = sysconfig.get_paths()["purelib"]
    roots = [("stdlib", sysconfig.get_paths()["stdlib"])]
    for p in PACKAGES:
        d = os.path.join(site, p)
        if os.path.isdir(d):
            roots.append((p, d))
    return roots


def corpus_files():
    """(relative name, path) of every corpus file, in a fixed order."""
    files = []
    for label, root in package_dirs():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
            for f in sorted(filenames):
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    if os.path.getsize(path) <= MAX_FILE:
                        files.append((label + "/" + os.path.relpath(path, root), path))
    files.sort()
    return files


def read_corpus():
    train, valid, total = [], [], 0
    for rel, path in corpus_files():
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        if EOT in text:
            continue
        total += len(text.encode())
        if total > MAX_CORPUS_BYTES:
            break
        is_valid = int(hashlib.sha1(rel.encode()).hexdigest(), 16) % 50 == 0
        (valid if is_valid else train).append(text)
    return train, valid


def train_tokenizer(texts, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def save_tokenizer(tok, out):
    tok.save(os.path.join(out, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": EOT, "pad_token": EOT,
           "unk_token": None, "add_bos_token": False, "add_eos_token": False, "model_max_length": 2048,
           "clean_up_tokenization_spaces": False}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def encode_all(tok, texts):
    eot = tok.token_to_id(EOT)
    ids = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eot)
    return np.array(ids, dtype=np.int32)


def make_model(vocab_size, eot):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=vocab_size, hidden_size=384, intermediate_size=1152, num_hidden_layers=6, num_attention_heads=6,
                      num_key_value_heads=2, head_dim=64, max_position_embeddings=2048, rms_norm_eps=1e-6,
                      tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      bos_token_id=None, eos_token_id=eot, pad_token_id=eot, initializer_range=0.02)
    return Qwen3ForCausalLM(cfg)


def batches(data, seq, batch, gen):
    n = len(data) - seq - 1
    while True:
        starts = torch.randint(0, n, (batch,), generator=gen)
        x = torch.stack([torch.from_numpy(data[s:s + seq + 1].astype(np.int64)) for s in starts.tolist()])
        yield x


@torch.no_grad()
def evaluate(model, data, seq, batch, n_batches=16):
    gen = torch.Generator().manual_seed(99)
    it = batches(data, seq, batch, gen)
    model.eval()
    losses = []
    for _ in range(n_batches):
        x = next(it).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            losses.append(float(lm_loss(model, x)))
    model.train()
    return sum(losses) / len(losses)


def lm_loss(model, x):
    logits = model(input_ids=x[:, :-1]).logits
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


def plot_loss(log, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([p[0] for p in log["train_curve"]], [p[1] for p in log["train_curve"]], label="train (mean of 50 steps)")
    ax.plot([p[0] for p in log["valid_curve"]], [p[1] for p in log["valid_curve"]], "o-", label="held-out")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("pycoder-13m: Qwen3 architecture, 8k BPE, Python source")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--max-seconds", type=float, default=330)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--log-dir", help="where train_log.json and loss.png go (default: --out)")
    a = ap.parse_args()
    a.log_dir = a.log_dir or a.out
    t_start = time.time()
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)

    train_texts, valid_texts = read_corpus()
    corpus_bytes = sum(len(t.encode()) for t in train_texts) + sum(len(t.encode()) for t in valid_texts)
    print(f"corpus: {len(train_texts)} train files, {len(valid_texts)} held-out files, {corpus_bytes / 1e6:.1f} MB", flush=True)
    tok = train_tokenizer(train_texts, a.vocab)
    save_tokenizer(tok, a.out)
    train_ids, valid_ids = encode_all(tok, train_texts), encode_all(tok, valid_texts)
    t_tok = time.time() - t_start
    print(f"tokenizer: {tok.get_vocab_size()} ids; {len(train_ids)} train / {len(valid_ids)} held-out tokens "
          f"({corpus_bytes / (len(train_ids) + len(valid_ids)):.2f} bytes/token); {t_tok:.0f} s", flush=True)

    eot = tok.token_to_id(EOT)
    model = make_model(tok.get_vocab_size(), eot).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    seq, batch = 512, 64
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    warm, lr_max, lr_min = 300, 2e-3, 2e-4

    def lr_at(step):
        if step < warm:
            return lr_max * (step + 1) / warm
        p = min(1.0, (step - warm) / max(1, a.steps - warm))
        return lr_min + 0.5 * (lr_max - lr_min) * (1 + math.cos(math.pi * p))

    gen = torch.Generator().manual_seed(a.seed)
    it = batches(train_ids, seq, batch, gen)
    log = {"train_curve": [], "valid_curve": []}
    recent, step, t_train = [], 0, time.time()
    model.train()
    for step in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x = next(it).cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lm_loss(model, x)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        recent.append(float(loss))
        if (step + 1) % 50 == 0:
            log["train_curve"].append((step + 1, sum(recent) / len(recent)))
            recent = []
        if (step + 1) % 500 == 0:
            v = evaluate(model, valid_ids, seq, batch)
            log["valid_curve"].append((step + 1, v))
            print(f"step {step + 1}: train {log['train_curve'][-1][1]:.3f}, held-out {v:.3f}, "
                  f"{time.time() - t_train:.0f} s", flush=True)
        if time.time() - t_start > a.max_seconds:
            print(f"stopping at step {step + 1}: --max-seconds {a.max_seconds} reached", flush=True)
            break
    steps_done = step + 1
    final_valid = evaluate(model, valid_ids, seq, batch, n_batches=64)
    log["valid_curve"].append((steps_done, final_valid))

    model = model.to(torch.bfloat16)
    model.generation_config.do_sample = True
    model.generation_config.temperature = 0.7
    model.generation_config.top_k = 40
    model.generation_config.top_p = 0.95
    model.generation_config.eos_token_id = eot
    model.generation_config.bos_token_id = None
    model.generation_config.pad_token_id = eot
    model.save_pretrained(a.out, max_shard_size="15MB")
    log.update(dict(
        packages=[p for p, _ in package_dirs()], corpus_bytes=corpus_bytes, train_files=len(train_texts),
        valid_files=len(valid_texts), train_tokens=int(len(train_ids)), valid_tokens=int(len(valid_ids)), vocab=tok.get_vocab_size(),
        params=n_params, steps=steps_done, seq=seq, batch=batch, tokens_seen=steps_done * seq * batch,
        train_seconds=time.time() - t_train, total_seconds=time.time() - t_start, heldout_loss=final_valid,
        heldout_ppl=math.exp(final_valid), device=torch.cuda.get_device_name(), torch=torch.__version__, seed=a.seed))
    os.makedirs(a.log_dir, exist_ok=True)
    with open(os.path.join(a.log_dir, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    plot_loss(log, os.path.join(a.log_dir, "loss.png"))
    print(f"done: {n_params / 1e6:.2f}M params, {steps_done} steps, {log['tokens_seen'] / 1e6:.0f}M tokens seen, "
          f"held-out loss {final_valid:.3f}, {log['total_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
