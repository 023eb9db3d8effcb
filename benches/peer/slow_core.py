#!/usr/bin/env python3
"""Run a command while one core is slowed down: a process pinned to that core alternates
busy and asleep, so that a thread of the command on it runs at about `busy / (busy + idle)`
of its speed, in slices much shorter than a kernel (as a core shared with another process,
or a slow core of a big server, behaves), and the other cores are untouched.

    python3 benches/peer/slow_core.py [--core 1] [--busy-us 100] [--idle-us 100] -- CMD ...

e.g. work stealing in products against one block per thread, two threads, core 1 at half
speed:

    python3 benches/peer/slow_core.py -- python3 benches/peer/ab_profile.py --rounds 3 \\
        OLD NEW -- examples/onnx/resnet18/model.onnx --threads 2 --runs 10

Linux only (`os.sched_setaffinity`). The command's exit status is returned.
"""
import argparse
import os
import subprocess
import sys
import time


def hog(core, busy, idle):
    os.sched_setaffinity(0, {core})
    while True:
        end = time.perf_counter() + busy
        while time.perf_counter() < end:
            pass
        time.sleep(idle)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--core", type=int, default=1, help="the core to slow down (default 1)")
    ap.add_argument("--busy-us", type=float, default=100.0, help="busy slice (default 100 us)")
    ap.add_argument("--idle-us", type=float, default=100.0, help="idle slice (default 100 us)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command given (after --)")
    if a.core not in os.sched_getaffinity(0):
        ap.error(f"core {a.core} is not available to this process")
    pid = os.fork()
    if pid == 0:
        try:
            hog(a.core, a.busy_us * 1e-6, a.idle_us * 1e-6)
        finally:
            os._exit(0)
    try:
        return subprocess.call(cmd)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    sys.exit(main())
