"""The Python examples of the documentation: each one is a file of clients/python/examples/
(which CI checks with mypy --strict), and they run as written against real nodes, the
README's quickstart first."""

import os
import re
import subprocess
import sys

import pytest

from conftest import BOUND, PACKAGE_SOURCE, REPO, TOKEN, wait_connected
from locks_client import Client

README = os.path.join(PACKAGE_SOURCE, "README.md")
EXAMPLES = os.path.join(PACKAGE_SOURCE, "examples")
DOCS = [README, os.path.join(REPO, "docs", "grpc.md"), os.path.join(REPO, "README.md")]


def python_examples(markdown):
    """The Python programs of a Markdown text: its ``python`` blocks, and what its shell
    blocks feed to ``python3 - <<'PY'``."""
    blocks = re.findall(r"^```python\n(.*?)^```$", markdown, re.MULTILINE | re.DOTALL)
    blocks += re.findall(r"<<'PY'\n(.*?)^PY$", markdown, re.MULTILINE | re.DOTALL)
    return blocks


def section(heading):
    """The Python program of the README's section ``## heading`` (its only one)."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    body = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    (program,) = python_examples(body)
    return program


def run_program(program, tmp_path, nodes=""):
    """Runs ``program`` in a Python process of its own, in ``tmp_path``, with the nodes'
    addresses and token in the environment as the examples read them; its output. Fails the
    test if it fails or takes longer than two bounds (it is killed then)."""
    env = {**os.environ, "LOCKS_NODES": nodes, "LOCKS_TOKEN": TOKEN}
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=2 * BOUND,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: os.path.relpath(path, REPO))
def test_every_python_example_of_the_docs_is_a_file_of_the_examples(doc):
    files = {}
    for name in os.listdir(EXAMPLES):
        if name.endswith(".py"):
            with open(os.path.join(EXAMPLES, name), encoding="utf-8") as f:
                files[name] = f.read()
    with open(doc, encoding="utf-8") as f:
        programs = python_examples(f.read())
    assert programs, f"{doc} shows no Python"
    for program in programs:
        same = [name for name, text in files.items() if text.strip() == program.strip()]
        assert same, f"{doc}: this example is not a file of {EXAMPLES}:\n{program}"


def test_the_readme_quickstart_runs_as_written(nodes, tmp_path):
    a = nodes("a")
    out = run_program(section("Quickstart"), tmp_path, a.client_addr)
    assert re.search(r"^holding db/x with tokens a@\d+$", out, re.MULTILINE), out
    assert "writing under the lock" in out
    assert "status: have_all_locks" in out and "held: ['db/a', 'db/b']" in out
    assert re.search(r"^leading in term \d+$", out, re.MULTILINE), out


def test_the_readme_asyncio_example_runs_as_written(nodes, tmp_path):
    a = nodes("a")
    out = run_program(section("asyncio"), tmp_path, a.client_addr)
    assert re.search(r"^holding db/x with tokens a@\d+$", out, re.MULTILINE), out
    assert "gave up waiting: no_locks" in out
    assert re.search(r"^leading in term \d+$", out, re.MULTILINE), out


def test_the_readme_fencing_example_runs_as_written(tmp_path):
    out = run_program(section("Fencing"), tmp_path)
    assert "stored first" in out and "stored second" in out
    refused = "refused: FAILED_PRECONDITION fenced: a newer holder has written (a@1041 < a@1043)"
    assert refused in out, out


def test_the_readme_example_of_several_nodes_runs_as_written(nodes, tmp_path):
    a = nodes("a")
    b = nodes("b", [a.listen])
    c = nodes("c", [a.listen, b.listen])
    addresses = ",".join(n.client_addr for n in (a, b, c))
    with Client(addresses, token=TOKEN) as client:
        wait_connected(client)
    out = run_program(section("Errors, several addresses, abort on deadlock"), tmp_path, addresses)
    held = re.search(r"^jobs/7 held on \[(.*)\] via a$", out, re.MULTILINE)
    assert held is not None, out
    assert len(held.group(1).split(", ")) >= 2, out  # a majority of a, b, c
