"""The README's Python examples run unchanged against a real server."""

import os
import subprocess
import sys

import pytest

from conftest import free_port

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.mark.parametrize("example", ["hold_lock.py", "hold_lock_async.py"])
@pytest.mark.parametrize("servers", ["one", "a list"])
def test_readme_example_holds_the_lock_and_releases_it(server, example, servers):
    if servers == "a list":  # LEASEHOLD_SERVER lists several; the first is down
        server = f"127.0.0.1:{free_port()},{server}"
    run = subprocess.run([sys.executable, os.path.join(EXAMPLES, example)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "LEASEHOLD_SERVER": server})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 3, run.stdout
    assert lines[0].startswith("holding nightly-report, fencing token ")
    assert lines[1:] == ["work done", "released"]
