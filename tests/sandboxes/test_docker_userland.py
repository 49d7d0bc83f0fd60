"""docker's ``image_userland`` mode against an adversary with full Python: the moved host
folders are read-only and show nothing the default mode does not, and what the runner
executes runs on the image's own loader and libraries. (Every ``backend`` test of this folder
also runs on this mode: ``docker-userland`` in ``conftest.py``.)"""

from __future__ import annotations

import json

import pytest

from agentrl.sandboxes import ExecRequest, get_backend
from agentrl.sandboxes._userland import HOST, elf_interpreter
from agentrl.sandboxes.docker_backend import DockerBackend, docker_status

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def pair(userland_image: str):
    ok, why = docker_status()
    if not ok:
        pytest.skip(why)
    plain = DockerBackend(pool_size=0)
    moved = DockerBackend(image=userland_image, image_userland=True, pool_size=0)
    yield plain, moved
    plain.close()
    moved.close()


def test_the_knob_is_a_bool() -> None:
    with pytest.raises(ValueError, match="image_userland must be true or false, got 'false'"):
        get_backend("docker", image_userland="false")


def test_elf_interpreter_is_the_loader_of_this_python() -> None:
    import sys

    assert elf_interpreter(sys.executable).startswith("/")
    with pytest.raises(ValueError, match="not a 64-bit ELF"):
        elf_interpreter(__file__)


WRITE = r"""
import ctypes, json, os
root = os.environ["HOST"]
done = []
def attempt(what, fn, *args):
    try:
        fn(*args)
        done.append(what + " " + repr(args[0]))
    except OSError:
        pass
for d, subs, files in os.walk(root):
    if d.count("/") > 7:
        subs[:] = []
    attempt("mkdir", os.mkdir, os.path.join(d, ".x"))
    attempt("create", os.open, os.path.join(d, ".x"), os.O_WRONLY | os.O_CREAT, 0o777)
    attempt("symlink", os.symlink, "/tmp", os.path.join(d, ".y"))
    attempt("chmod", os.chmod, d, 0o777)
    for name in files[:5]:
        p = os.path.join(d, name)
        attempt("open for writing", os.open, p, os.O_WRONLY | os.O_APPEND)
        attempt("truncate", os.truncate, p, 0)
        attempt("rename", os.rename, p, p + ".z")
        attempt("utime", os.utime, p, (0, 0))
        attempt("unlink", os.unlink, p)
for p in json.loads(os.environ["FILES"]):  # the loader, the interpreter, libc
    attempt("open for writing", os.open, p, os.O_WRONLY)
    attempt("unlink", os.unlink, p)
libc = ctypes.CDLL(None, use_errno=True)
for target in [root, root + "/usr"]:  # MS_REMOUNT | MS_BIND, read-write
    if libc.mount(None, target.encode(), None, 32 | 4096, None) == 0:
        done.append("remount " + target)
print(json.dumps(done))
"""


def test_a_program_cannot_write_the_moved_host_folders(pair) -> None:
    _, moved = pair
    files = [moved.runner[0], moved.runner[4]]
    env = {"HOST": HOST, "FILES": json.dumps(files)}
    res = moved.run(ExecRequest(WRITE, env=env, timeout_s=60))
    assert res.status == "ok", res.stderr[-2000:]
    assert json.loads(res.stdout) == [], res.stdout


MOUNTS = r"""
import json
out = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    fstype = f[f.index("-") + 1]
    if fstype not in ("proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "overlay"):
        out.append([f[3], f[4]])  # the host path it shows, where
print(json.dumps(out))
"""


def _host_mounts(backend) -> dict[str, str]:
    res = backend.run(ExecRequest(MOUNTS, timeout_s=30))
    assert res.status == "ok", res.stderr[-2000:]
    # docker's per-container /etc/hosts, hostname, resolv.conf: one folder per container
    return {
        ("docker:" + src.rsplit("/", 1)[-1] if "/containers/" in src else src): at
        for src, at in json.loads(res.stdout)
    }


def test_the_host_shows_nothing_more_than_in_the_default_mode(pair) -> None:
    plain, moved = pair
    before, after = _host_mounts(plain), _host_mounts(moved)
    assert set(after) <= set(before), (after, before)
    for src, at in after.items():  # each at its private path, docker's own /etc files aside
        assert at == (HOST + src if not src.startswith("docker:") else at), (src, at)
    assert "/usr" in after and after["/usr"] == HOST + "/usr"
    listing = "import json, os; print(json.dumps([os.listdir(p) for p in {!r}]))"
    res = moved.run(ExecRequest(listing.format(moved.masked), timeout_s=30))
    assert moved.masked and json.loads(res.stdout) == [[] for _ in moved.masked], res


CHILD = r"""
import subprocess
maps = subprocess.run(["cat", "/proc/self/maps"], capture_output=True, text=True).stdout
env = subprocess.run(["cat", "/proc/self/environ"], capture_output=True).stdout
print(int("agentrl-host" in maps), int(b"LD_" in env), int("agentrl-host" in open("/proc/self/maps").read()))
"""


def test_what_the_runner_executes_runs_on_the_images_libraries(pair) -> None:
    _, moved = pair
    res = moved.run(ExecRequest(CHILD, timeout_s=30))
    assert res.status == "ok", res.stderr[-2000:]
    assert res.stdout.split() == ["0", "0", "1"]  # the child: image only; the runner: host
