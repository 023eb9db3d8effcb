"""The type stubs describe the extension module as it is (mypy's stubtest)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_stubs_match_the_extension_module():
    pytest.importorskip("mypy")
    allowlist = Path(__file__).with_name("stubtest-allowlist.txt")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "ferrite._ferrite",
            "--allowlist",
            str(allowlist),
            "--mypy-config-file",
            os.devnull,
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
