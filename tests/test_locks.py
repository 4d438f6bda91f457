"""tasks/common/locks.py: one writer at a time, and no lock file left behind once the writer is done (nor the
bare folder a failed first run would have left)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from tasks.common.locks import BusyError, exclusive_lock


def test_the_lock_file_is_removed_when_the_block_ends(tmp_path):
    lock = tmp_path / "out" / ".lock"
    (tmp_path / "out").mkdir()
    with exclusive_lock(lock, "out"):
        assert lock.read_text() == f"pid {os.getpid()}"
    assert not lock.exists() and (tmp_path / "out").is_dir()  # a folder that was there stays


def test_a_failed_first_run_leaves_neither_lock_nor_bare_folder(tmp_path):
    out = tmp_path / "new" / "ds"
    with pytest.raises(RuntimeError, match="boom"):
        with exclusive_lock(out / ".lock", "ds"):
            raise RuntimeError("boom")
    assert not out.exists() and (tmp_path / "new").is_dir()  # only the folder the lock made is removed


def test_a_folder_with_something_in_it_stays(tmp_path):
    out = tmp_path / "ds"
    with exclusive_lock(out / ".lock", "ds"):
        (out / "records.duckdb").write_text("x")
    assert sorted(p.name for p in out.iterdir()) == ["records.duckdb"]


def test_a_second_writer_is_refused_while_the_first_holds_it(tmp_path):
    lock = tmp_path / ".lock"
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from tasks.common.locks import exclusive_lock\n"
        f"with exclusive_lock(Path({str(lock)!r}), 'x'):\n    print('held', flush=True); time.sleep(30)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(BusyError, match=rf"being written by another run \(pid {child.pid}\)"):
            with exclusive_lock(lock, "x"):
                pass
        assert lock.exists()  # the refused taker removes nothing
    finally:
        child.kill()
        child.wait()
    with exclusive_lock(lock, "x"):  # the holder died: taken at once (flock), stale file or not
        pass
    assert not lock.exists()


def test_taking_a_lock_its_holder_just_removed_takes_the_new_file(tmp_path, monkeypatch):
    """The race that removing the file opens: B opens the file, A (the holder) removes it and lets go, B locks
    the removed file. B must see that the path no longer names what it locked and take the new file, or a
    third writer C, creating a new file, would hold 'the' lock at the same time as B."""
    import tasks.common.locks as locks

    lock = tmp_path / ".lock"
    real_flock = locks.fcntl.flock
    calls = {"n": 0}

    def flock_after_the_holder_left(fd, op):
        calls["n"] += 1
        if calls["n"] == 1:  # B's first try: meanwhile A removes the file it held
            lock.unlink()
        return real_flock(fd, op)

    lock.write_text("pid 1")
    monkeypatch.setattr(locks.fcntl, "flock", flock_after_the_holder_left)
    with exclusive_lock(lock, "x"):
        held = os.stat(lock).st_ino
        # the file at the path is the one this writer locked: a third writer is refused
        monkeypatch.setattr(locks.fcntl, "flock", real_flock)
        errors: list[BaseException] = []

        def third() -> None:
            try:
                with exclusive_lock(lock, "x"):
                    pass
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        t = threading.Thread(target=third)
        t.start()
        t.join()
        assert len(errors) == 1 and isinstance(errors[0], BusyError)
        assert os.stat(lock).st_ino == held
    assert calls["n"] >= 2  # it tried again on the new file
    assert not lock.exists()
