"""A process's age from the kernel's start tick and uptime (a fork counts from the fork)."""

import os
import time

import psutil

from presdep.runtime.process_age import process_age_s


def test_a_forked_child_is_young_and_a_long_lived_parent_is_not():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, repr(process_age_s()).encode())
        os._exit(0)
    os.close(w)
    child_age = float(os.read(r, 64))
    os.waitpid(pid, 0)
    os.close(r)
    assert 0.0 <= child_age < 0.1  # psutil's create_time, on whole-second boot time, is off by up to 1 s
    parent = process_age_s()
    by_psutil = time.time() - psutil.Process().create_time()
    assert abs(parent - by_psutil) < 1.05 and parent > 0.05
