"""The docker backend's warm containers: runs take pre-started containers, each serves one
run only (nothing carries over), other memory limits get a fresh container, and `close`
removes every warm one. Real docker engine; skipped without it."""

from __future__ import annotations

import time

import pytest

from agentrl.sandboxes import ExecRequest

pytestmark = pytest.mark.docker


@pytest.fixture()
def docker_backend():
    from agentrl.sandboxes.docker_backend import DockerBackend, docker_status

    ok, why = docker_status()
    if not ok:
        pytest.skip(why)

    backend = DockerBackend(pool_size=2)
    yield backend
    backend.close()


def _wait_warm(backend, n: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while backend.pool._ready.qsize() < n:
        assert time.monotonic() < deadline, "warm pool never filled"
        time.sleep(0.05)


def _ours(backend) -> set[str]:
    return {
        c.id for c in backend.client.containers.list(all=True, filters={"ancestor": backend.image})
    }


def test_warm_runs_are_fresh_and_pool_refills(docker_backend) -> None:
    _wait_warm(docker_backend, 2)
    warm = set(_ours(docker_backend))
    first = docker_backend.run(
        ExecRequest("open('/tmp/leak', 'w').write('x'); print('wrote')", timeout_s=20)
    )
    assert (first.status, first.stdout.strip()) == ("ok", "wrote"), first.stderr
    assert len(warm - _ours(docker_backend)) == 1  # a warm container served and was removed
    _wait_warm(docker_backend, 2)
    second = docker_backend.run(
        ExecRequest("import os; print(os.path.exists('/tmp/leak'))", timeout_s=20)
    )
    assert (second.status, second.stdout.strip()) == ("ok", "False")


def test_other_memory_limits_get_a_fresh_container(docker_backend) -> None:
    _wait_warm(docker_backend, 2)
    res = docker_backend.run(ExecRequest("print(6 * 7)", memory_mb=256, timeout_s=20))
    assert (res.status, res.stdout.strip()) == ("ok", "42"), res.stderr
    assert docker_backend.pool._ready.qsize() == 2  # the warm ones were left alone


def test_close_removes_warm_containers(docker_backend) -> None:
    _wait_warm(docker_backend, 2)
    warm = {launched.box.id for launched in list(docker_backend.pool._ready.queue)}
    assert len(warm) == 2 and warm <= _ours(docker_backend)
    docker_backend.close()
    assert not (warm & _ours(docker_backend))


def test_a_timeout_that_races_the_program_exit_is_no_sandbox_error(docker_backend) -> None:
    """A program that ends right at its deadline has exited by the time the backend kills its
    container: the engine answers 409, which must not turn the run into a sandbox error."""
    from agentrl.sandboxes.docker_backend import kill

    launched = docker_backend._launch(256)
    try:
        launched.box.kill()
        launched.box.wait(timeout=30)
        kill(launched.box)  # already stopped: no APIError
    finally:
        launched.discard()
    kill(launched.box)  # already removed: no APIError
