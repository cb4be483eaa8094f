"""`serve` prints its banner (the link a person follows) only once the port accepts connections."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.server import ROOT, free_port, server_env

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_the_banners_link_answers_the_moment_it_is_printed(tmp_path):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-cluster", "--port", str(port)], cwd=ROOT,
        env=server_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        lines = []
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, "serve exited:\n" + "".join(lines)
            lines.append(line)
            if line.startswith("Conductor on http://"):
                break
        else:
            pytest.fail("no banner:\n" + "".join(lines))
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # accepted at once: no "connection refused" for whoever follows the link
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=30)
