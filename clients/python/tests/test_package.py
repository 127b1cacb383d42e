"""The package as users get it: the tests run against the installed package (not the source
tree), whose stubs are what the .proto generates and whose dependency floors are their
generators'; it imports in many processes at once, beside an application module named
``locks``, and from a read-only directory, which it never writes to."""

import importlib.metadata
import importlib.util
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig

import pytest

import locks_client
from conftest import BOUND, PACKAGE_SOURCE

INSTALLED = os.path.dirname(os.path.realpath(locks_client.__file__))


def _generator():
    """clients/python/generate.py, loaded from its file (the source tree stays off sys.path)."""
    path = os.path.join(PACKAGE_SOURCE, "generate.py")
    spec = importlib.util.spec_from_file_location("locks_client_generate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_under_test_is_the_installed_one():
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    assert INSTALLED.startswith(site + os.sep), (INSTALLED, site)
    assert not INSTALLED.startswith(os.path.realpath(PACKAGE_SOURCE) + os.sep)
    assert locks_client.__version__ == importlib.metadata.version("locks-client")
    for name in ("py.typed", "_proto/locks_pb2.pyi", "_proto/locks_pb2_grpc.pyi"):
        assert os.path.exists(os.path.join(INSTALLED, name)), name


def test_the_stubs_are_what_the_proto_generates():
    generate = _generator()
    made = generate.generate()
    assert generate.differences(made, os.path.join(INSTALLED, "_proto")) == [], (
        "the installed stubs are not the .proto's: rebuild and reinstall the package"
    )
    assert generate.differences(made) == [], (
        "the checked-in stubs are not the .proto's: run clients/python/generate.py"
    )


def test_the_dependency_floors_are_the_versions_of_the_stubs_generators():
    from locks_client._proto import locks_pb2_grpc

    requires = importlib.metadata.requires("locks-client") or []
    assert f"grpcio>={locks_pb2_grpc.GRPC_GENERATED_VERSION}" in requires, requires
    with open(os.path.join(INSTALLED, "_proto", "locks_pb2.py"), encoding="utf-8") as f:
        gencode = re.search(r"Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", f.read())
    assert gencode is not None
    major, minor, patch = gencode.groups()
    (protobuf,) = [r for r in requires if r.startswith("protobuf")]
    assert f">={major}.{minor}.{patch}" in protobuf, protobuf
    assert f"<{int(major) + 2}" in protobuf, protobuf  # this major and the next read it


IMPORT = """
import sys
sys.stdin.readline()  # all at once
import locks_client, locks_client.aio
from locks_client._proto import locks_pb2, locks_pb2_grpc
print(locks_client.__file__)
"""


@pytest.mark.parametrize("where", ["installed", "fresh copy"])
def test_eight_processes_import_the_package_at_once(tmp_path, where):
    env = dict(os.environ)
    expected = os.path.join(INSTALLED, "__init__.py")
    if where == "fresh copy":
        # No bytecode yet: every process compiles and writes it at the same time.
        site = tmp_path / "site"
        bytecode = shutil.ignore_patterns("__pycache__")
        shutil.copytree(INSTALLED, site / "locks_client", ignore=bytecode)
        env["PYTHONPATH"] = str(site)
        expected = str(site / "locks_client" / "__init__.py")
    procs = []
    try:
        for _ in range(8):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", IMPORT],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=tmp_path,
                    env=env,
                )
            )
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outcomes = [proc.communicate(timeout=BOUND) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=BOUND)
    for proc, (out, err) in zip(procs, outcomes):
        assert proc.returncode == 0, err
        assert os.path.realpath(out.strip()) == os.path.realpath(expected)


def test_an_application_module_named_locks_does_not_break_the_import(tmp_path):
    (tmp_path / "locks.py").write_text("APP = True\n")
    script = """
import locks  # the application's own module, imported first
import locks_client, locks_client.aio
from locks_client._proto import locks_pb2
assert locks.APP and list(locks_pb2.Lock(id=["db", "x"]).id) == ["db", "x"]
locks_client.Client("127.0.0.1:1").close()
print("ok")
"""
    # Run in tmp_path: its locks.py comes first on sys.path.
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=BOUND
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"]


def _snapshot(top):
    """Every file and directory under ``top``, with its size and modification time."""
    seen = {}
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            seen[os.path.relpath(path, top)] = (st.st_size, st.st_mtime_ns)
    return seen


def _chmod_tree(top, writable):
    for root, dirs, files in os.walk(top):
        for name in [root] + [os.path.join(root, f) for f in files]:
            mode = os.lstat(name).st_mode
            bits = stat.S_IWUSR if writable else 0
            os.chmod(name, (mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) | bits)


def test_a_read_only_installed_package_imports_and_writes_nothing(tmp_path):
    before = _snapshot(INSTALLED)
    script = """
import locks_client, locks_client.aio
from locks_client._proto import locks_pb2, locks_pb2_grpc
print(locks_client.__file__)
"""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    _chmod_tree(INSTALLED, writable=False)  # chmod -R a-w
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=BOUND,
        )
    finally:
        _chmod_tree(INSTALLED, writable=True)
    assert done.returncode == 0, done.stderr
    assert os.path.dirname(os.path.realpath(done.stdout.strip())) == INSTALLED
    assert _snapshot(INSTALLED) == before, "importing the package wrote to it"
    assert list(tmp_path.iterdir()) == [], "importing the package wrote to the working directory"
