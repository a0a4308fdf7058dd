"""Two Python threads for the kernels: NumPy releases the GIL inside BLAS, exp and the row sums.

While the helpers run, BLAS is held to one thread by threadpoolctl (optional: without it everything runs on the
calling thread and BLAS keeps its own threads). A kernel may ask for that even on the calling thread alone
(``one_blas``): its products are small blocks, and OpenBLAS's own threads, which spin between calls, cost many
times the work itself when other processes share the cores (bench/README.md).
"""

from __future__ import annotations

import os
import threading
from contextlib import nullcontext

import numpy as np

THREADS = max(1, min(2, os.cpu_count() or 1))

_lock = threading.Lock()
_blas = None  # threadpoolctl controller, or False without threadpoolctl
_pool = None  # THREADS - 1 helper threads, started on first use


def _one_blas_thread():  # -> context manager holding BLAS to 1 thread, or None without threadpoolctl
    global _blas
    with _lock:
        if _blas is None:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:
                _blas = False
            else:
                _blas = ThreadpoolController()
    return _blas.limit(limits=1, user_api="blas") if _blas else None


def _helpers():
    global _pool
    with _lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor

            _pool = ThreadPoolExecutor(max_workers=THREADS - 1, thread_name_prefix="qkv-kernel")
    return _pool


def run_tasks(tasks, work, parallel, one_blas=False):  # tasks sorted by cost, cheapest first
    """work(task) for every task; on THREADS threads when ``parallel`` (BLAS then held to 1 thread), else on the
    calling thread, with BLAS held to 1 thread if ``one_blas``."""
    threaded = parallel and THREADS > 1 and len(tasks) > 1
    limiter = _one_blas_thread() if threaded or one_blas else None
    if not threaded or limiter is None:  # without threadpoolctl: the calling thread, BLAS as it is
        with limiter or nullcontext():
            for task in tasks:
                work(task)
        return
    from concurrent.futures import wait

    pending = list(tasks)

    def worker():  # NumPy's error state is per thread: helpers ignore overflow like the caller
        with np.errstate(over="ignore", invalid="ignore"):
            work_all()

    def work_all():
        while True:
            try:
                task = pending.pop()  # atomic: the costliest remaining task first
            except IndexError:
                return
            try:
                work(task)
            except BaseException:
                pending.clear()
                raise

    with limiter:
        futures = [_helpers().submit(worker) for _ in range(THREADS - 1)]
        try:
            worker()
        finally:
            wait(futures)  # never lift the BLAS limit while a helper still runs
    for future in futures:
        future.result()
