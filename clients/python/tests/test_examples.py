"""The README's Python examples run unchanged against a real server."""

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.mark.parametrize("example", ["hold_lock.py", "hold_lock_async.py"])
def test_readme_example_holds_the_lock_and_releases_it(server, example):
    run = subprocess.run([sys.executable, os.path.join(EXAMPLES, example)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "LEASEHOLD_SERVER": server})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 3, run.stdout
    assert lines[0].startswith("holding nightly-report, fencing token ")
    assert lines[1:] == ["work done", "released"]
