"""The kernels' thread helper: every task runs once, and BLAS is held to one thread exactly when asked."""

from __future__ import annotations

import threading

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from qkv_cli.core import threads


def blas_threads():  # -> the thread counts of the loaded BLAS libraries
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


@pytest.fixture
def two_blas_threads():
    if not blas_threads():
        pytest.skip("no BLAS library that threadpoolctl can see")
    with threadpool_limits(2, user_api="blas"):
        if max(blas_threads()) < 2:
            pytest.skip("BLAS built single-threaded")
        yield


@pytest.mark.parametrize("one_blas, want", [(True, [1]), (False, [2])])
def test_calling_thread_holds_blas_to_one_thread_only_when_asked(two_blas_threads, one_blas, want):
    seen = []
    threads.run_tasks([0, 1, 2], lambda task: seen.append((task, sorted(set(blas_threads())))), False, one_blas)
    assert sorted(task for task, _ in seen) == [0, 1, 2]
    assert all(counts == want for _, counts in seen)
    assert max(blas_threads()) == 2  # lifted afterwards


def test_parallel_tasks_run_once_each_with_blas_at_one_thread(two_blas_threads, monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 2)
    seen, lock = [], threading.Lock()

    def work(task):
        with lock:
            seen.append((task, threading.get_ident(), max(blas_threads())))

    threads.run_tasks(list(range(12)), work, parallel=True)
    assert sorted(task for task, _, _ in seen) == list(range(12))
    assert {count for _, _, count in seen} == {1}
    assert max(blas_threads()) == 2
