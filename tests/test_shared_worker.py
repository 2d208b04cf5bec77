"""shared_worker.SerialWorker: jobs of many threads run on one thread, each caller gets its own result or error."""
from __future__ import annotations

import threading

import pytest

from inferstream import shared_worker as shared_worker_module
from inferstream.shared_worker import SerialWorker, priority, shared_worker


def _worker(name: str, users: int = 2) -> SerialWorker:
    worker = SerialWorker(name)
    for _ in range(users):
        worker.acquire()
    return worker


def test_jobs_of_many_threads_run_on_the_worker_thread_and_return_their_own_results() -> None:
    worker = _worker("test-serial")
    results: dict[int, list[tuple[int, str]]] = {}

    def submit(k: int) -> None:
        results[k] = [worker.run(lambda i=i: (k * 1000 + i, threading.current_thread().name)) for i in range(50)]

    threads = [threading.Thread(target=submit, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(results) == list(range(8))
    for k, got in results.items():
        assert [v for v, _ in got] == [k * 1000 + i for i in range(50)]  # in order, nobody else's result
        assert {name for _, name in got} == {"test-serial"}


def test_a_failing_job_raises_in_its_caller_and_the_worker_goes_on() -> None:
    worker = _worker("test-serial-errors")

    def boom() -> None:
        raise ValueError("bad frame")

    with pytest.raises(ValueError, match="bad frame"):
        worker.run(boom)
    assert worker.run(lambda: 42) == 42


def test_a_job_submitting_a_job_runs_it_in_place() -> None:
    worker = _worker("test-serial-nested")
    assert worker.run(lambda: worker.run(lambda: "inner") + "+outer") == "inner+outer"


def test_with_one_user_jobs_run_in_the_callers_thread() -> None:
    worker = _worker("test-serial-alone", users=1)
    assert worker.run(lambda: threading.current_thread()) is threading.current_thread()
    worker.acquire()
    assert worker.run(lambda: threading.current_thread().name) == "test-serial-alone"
    worker.release()
    assert worker.run(lambda: threading.current_thread()) is threading.current_thread()


def test_shared_worker_is_one_per_name() -> None:
    assert shared_worker("a-name") is shared_worker("a-name") and shared_worker("a-name") is not shared_worker("b")


@pytest.mark.parametrize("max_hold_s", [30.0, 0.2])
def test_a_priority_section_holds_jobs_back_until_it_closes_or_for_max_hold(max_hold_s: float,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_worker_module, "MAX_HOLD_S", max_hold_s)
    worker = _worker(f"test-serial-priority-{max_hold_s}")
    ran = threading.Event()
    with priority():
        submitter = threading.Thread(target=worker.run, args=(ran.set,))
        submitter.start()
        if max_hold_s > 1:
            assert not ran.wait(0.3)  # queued, held back
        else:
            assert ran.wait(5)  # the section never closed: held back for max_hold_s only
    assert ran.wait(5)  # and at the latest once the section closed, long before a 30 s MAX_HOLD_S
    submitter.join(5)
