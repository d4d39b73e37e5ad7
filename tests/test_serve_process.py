"""`masdr serve` as an operator runs it: a real process on loopback, sent signals and killed.

- ``kill -9`` in the middle of a reload: restarted, the service serves the last router that loaded
  (kept atomically in ``--state-file``), never a half-loaded one and not the older configured one;
- SIGHUP reloads the artifact from disk, and a corrupted artifact is refused while the old router
  keeps serving;
- SIGTERM lets an in-flight answer finish before the process exits.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from test_serve import BUSINESS_QUERY, free_port

ADMIN = "admin-key-for-process-tests"


class Served:
    """``masdr serve ARGS`` in a subprocess on a free port, ready when returned."""

    def __init__(self, *args: object, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / f"serve-{self.port}.log", "w")  # noqa: SIM115 (closed in stop)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
        self.proc = subprocess.Popen([sys.executable, "-m", "masdr_router.cli", "serve", "--port", str(self.port),
                                      "--log-level", "warning", *map(str, args)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
        # with --workers N each process loads its own models, and a new connection may reach any of
        # them: ready when 20 fresh connections in a row say so, not when the first worker does
        args_s = [str(a) for a in args]
        needed = 20 if "--workers" in args_s and args_s[args_s.index("--workers") + 1] != "1" else 1
        deadline, in_a_row = time.time() + 180, 0
        while time.time() < deadline:
            assert self.proc.poll() is None, Path(self.log.name).read_text()
            try:
                ok = httpx.get(f"{self.url}/ready", timeout=5).status_code == 200
            except httpx.TransportError:
                ok = False
            in_a_row = in_a_row + 1 if ok else 0
            if in_a_row >= needed:
                return
            if not ok:
                time.sleep(0.2)
        raise TimeoutError(Path(self.log.name).read_text())

    def ready(self) -> dict:
        return httpx.get(f"{self.url}/ready", timeout=10).json()

    def metric(self, line_prefix: str) -> float:
        for line in httpx.get(f"{self.url}/metrics", timeout=10).text.splitlines():
            if line.startswith(line_prefix):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:  # SIGTERM first: uvicorn's supervisor takes its workers down with it
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture
def routers(small_router, tmp_path):
    out = {}
    for name in ("a", "b", "c"):
        out[name] = tmp_path / f"router-{name}"
        shutil.copytree(small_router, out[name])
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - name: ops\n    key_sha256: {hashlib.sha256(ADMIN.encode()).hexdigest()}\n"
                    "    admin: true\n")
    out["keys"] = keys
    return out


def test_kill_9_during_a_reload_restarts_on_the_last_good_router(routers, bbc_index_dir, tmp_path):
    state = tmp_path / "serve-state.json"
    args = ("--router", routers["a"], "--index", bbc_index_dir, "--api-keys", routers["keys"], "--state-file", state)
    srv = Served(*args, tmp=tmp_path)
    try:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        r = httpx.post(f"{srv.url}/admin/reload", json={"router": str(routers["b"])}, headers=headers, timeout=120)
        assert r.status_code == 200, r.text
        # a second reload, killed while it loads the new artifact
        threading.Thread(target=lambda: _quiet_post(f"{srv.url}/admin/reload", {"router": str(routers["c"])},
                                                    headers), daemon=True).start()
        time.sleep(0.3)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(timeout=30)
    finally:
        srv.stop()
    assert json.loads(state.read_text())["router"] in (str(routers["b"]), str(routers["c"]))
    again = Served(*args, tmp=tmp_path)
    try:
        ready = again.ready()
        assert ready["router_spec"] in (str(routers["b"]), str(routers["c"]))  # not the configured router-a
        r = httpx.post(f"{again.url}/v1/route", json={"query": BUSINESS_QUERY}, timeout=60,
                       headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 200 and r.json()["results"][0]["probabilities"]
    finally:
        again.stop()


def _quiet_post(url: str, body: dict, headers: dict) -> None:
    with contextlib.suppress(httpx.TransportError):  # the server is killed under this request: the point
        httpx.post(url, json=body, headers=headers, timeout=60)


def test_sighup_reloads_and_refuses_a_corrupted_artifact(routers, bbc_index_dir, tmp_path):
    srv = Served("--router", routers["a"], "--index", bbc_index_dir, tmp=tmp_path)
    try:
        ok, refused = 'masdr_router_reloads_total{outcome="ok"}', 'masdr_router_reloads_total{outcome="refused"}'
        srv.proc.send_signal(signal.SIGHUP)
        _wait(lambda: srv.metric(ok) == 1.0)
        (routers["a"] / "router_config.json").write_text("{ not json")  # a botched copy over the served artifact
        srv.proc.send_signal(signal.SIGHUP)
        _wait(lambda: srv.metric(refused) == 1.0)
        assert srv.ready()["status"] == "ready" and srv.metric(ok) == 1.0
        r = httpx.post(f"{srv.url}/v1/route", json={"query": BUSINESS_QUERY}, timeout=60)
        assert r.status_code == 200  # the router loaded before the corruption keeps serving
    finally:
        srv.stop()


def test_sigterm_drains_an_in_flight_answer(routers, bbc_index_dir, llm_server, tmp_path):
    srv = Served("--router", routers["a"], "--index", bbc_index_dir, "--llm-url", llm_server.base_url, tmp=tmp_path)
    result: dict = {}

    def ask() -> None:
        r = httpx.post(f"{srv.url}/v1/answer", json={"query": BUSINESS_QUERY}, timeout=300)
        result.update(status=r.status_code, body=r.json(), done=time.monotonic())

    try:
        t = threading.Thread(target=ask)
        t.start()
        time.sleep(1.0)  # the answer is being synthesised (seconds on the embedded model)
        signalled = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        t.join(timeout=300)
        # uvicorn shuts down gracefully, then re-raises the signal it caught: the exit status says SIGTERM
        assert srv.proc.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        srv.stop()
    assert result["done"] > signalled  # the request was still in flight when the signal came ...
    assert result["status"] == 200 and result["body"]["answer"], result  # ... and it was answered


def _wait(cond, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_several_worker_processes_serve_the_same_router(routers, tmp_path):
    srv = Served("--router", routers["a"], "--workers", "2", tmp=tmp_path)
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as client:
            scopes = {client.post("/v1/route", json={"query": BUSINESS_QUERY}).json()["results"][0]["scope"]
                      for _ in range(8)}
        assert len(scopes) == 1  # every worker loaded the same artifact
        workers = [pid for pid in subprocess.run(["pgrep", "-P", str(srv.proc.pid)], capture_output=True,
                                                  text=True).stdout.split()
                   if "masdr_router" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                   or "multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")]
        assert len(workers) >= 2, workers
    finally:
        srv.stop()
