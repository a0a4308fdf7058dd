"""Benchmark: what a compiled Q8_0 kernel reaches, beside qkv's NumPy one and gguf-py's, on the same tensors.

    python bench/dequant_c.py                        # 576 x 1536 and 4096 x 1024, 31 alternating calls each
    python bench/dequant_c.py --shapes 4096x4096 --repeats 15

A reference point for docs/performance.md, not part of qkv (whose core is NumPy, with no compiled code): the plain
C loop of ggml's reference dequantize_row_q8_0 (each block's fp16 scale converted, then its 32 products) is
written to a temporary folder, built with `cc -O3 -march=native -shared` and called through ctypes. Each shape's
random Q8_0 tensor (bench/dequant.py's) is dequantized by the C loop, by qkv into a reused buffer (`out=`) and by
gguf.quants.dequantize, all three checked equal bit for bit, then timed alternating by the calling thread's CPU
time; printed: the medians and the ratios to gguf-py. Needs a C compiler (cc), an x86-64 processor with F16C
(the fp16 conversion, _cvtsh_ss) and gguf-py.
"""

from __future__ import annotations

import sys

from machine import without_openblas_env

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import ctypes  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from dequant import tensor  # noqa: E402

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
void q8_0(const uint8_t *b, float *out, long nblocks) {  /* [nblocks, 34] -> [nblocks, 32]: d * q */
    for (long i = 0; i < nblocks; i++) {
        const uint8_t *block = b + 34 * i;
        uint16_t h;
        memcpy(&h, block, 2);
        const float d = _cvtsh_ss(h);
        const int8_t *q = (const int8_t *)(block + 2);
        for (int j = 0; j < 32; j++) out[32 * i + j] = (float)q[j] * d;
    }
}
"""


def build(folder: Path) -> ctypes.CDLL:
    (folder / "q8.c").write_text(SOURCE)
    cmd = ["cc", "-O3", "-march=native", "-shared", "-fPIC", str(folder / "q8.c"), "-o", str(folder / "q8.so")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"the C kernel did not build: {done.stderr.strip()}")
    return ctypes.CDLL(str(folder / "q8.so"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["576x1536", "4096x1024"])
    ap.add_argument("--repeats", type=int, default=31)
    args = ap.parse_args()
    try:
        import gguf.quants
        from gguf.constants import GGMLQuantizationType
    except ImportError:
        sys.exit("gguf-py is not installed: pip install gguf")
    from qkv_cli.models.quants.dequantize import dequantize

    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    print("| shape | C loop | qkv, out= | gguf-py | C / gguf-py | qkv / gguf-py |\n|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        lib = build(Path(folder))
        for text in args.shapes:
            shape = tuple(int(x) for x in text.split("x"))
            raw = tensor("Q8_0", *shape, np.random.default_rng(0))
            ours, theirs = np.empty(shape, np.float32), np.empty(shape, np.float32)
            blocks = ctypes.c_long(raw.size // 34)

            def compiled(raw=raw, theirs=theirs, blocks=blocks):
                lib.q8_0(raw.ctypes.data_as(ctypes.c_void_p), theirs.ctypes.data_as(ctypes.c_void_p), blocks)

            def qkv(raw=raw, ours=ours, shape=shape):
                dequantize(raw, "Q8_0", shape, out=ours)

            def gguf_py(raw=raw, shape=shape):
                return gguf.quants.dequantize(raw.reshape(shape[0], -1), GGMLQuantizationType.Q8_0)

            compiled(), qkv()
            want = np.asarray(gguf_py(), np.float32).view(np.uint32)
            if not (np.array_equal(theirs.view(np.uint32), want) and np.array_equal(ours.view(np.uint32), want)):
                sys.exit(f"{text}: the C loop, qkv and gguf-py differ")
            times = {"c": [], "qkv": [], "gguf": []}
            for _ in range(args.repeats):  # alternating, so that a burst of other load hits all three
                for name, fn in (("c", compiled), ("qkv", qkv), ("gguf", gguf_py)):
                    t = time.thread_time()
                    fn()
                    times[name].append(time.thread_time() - t)
            c, q, g = (statistics.median(times[k]) for k in ("c", "qkv", "gguf"))
            print(f"| {text} | {c * 1e3:.3f} ms | {q * 1e3:.3f} ms | {g * 1e3:.3f} ms | {g / c:.1f}x | {g / q:.2f}x |")
    print(f"CPU time of the calling thread, median of {args.repeats}")
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
