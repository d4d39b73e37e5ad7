"""Service benchmark: load against `masdr serve` on loopback, compared with routing in-process.

Starts the real service (a subprocess, as it runs in production) once with micro-batching and once
without, and sends ``/v1/route`` requests of one query each at concurrency 1, 8 and 32, bounded in
count (``--requests``) and time (``--seconds``). Reports requests/s, p50 and p99 latency and failed
requests, and the ratio to in-process batched routing (``route_batch`` in batches of 64) measured in
the same run on the same queries. The load generator shares the machine's cores with the service,
so on a small machine the ratio is a floor.

    python bench/serve_bench.py --router checkpoints/bbc-router     # after `make demo`
    python bench/serve_bench.py --router DIR --concurrency 1 8 32 --requests 2000 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_service(router: Path, batching: bool, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    import httpx  # readiness polling only

    port = free_port()
    cmd = [sys.executable, "-m", "masdr_router.cli", "serve", "--router", str(router), "--port", str(port),
           "--log-level", "warning", "--batching" if batching else "--no-batching"]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the service exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the service did not become ready in 180 s")


async def load(url: str, queries: list[str], concurrency: int, requests: int, seconds: float) -> dict[str, Any]:
    """``requests`` single-query /v1/route calls (or as many as fit in ``seconds``) from
    ``concurrency`` clients in parallel (aiohttp: a light client, since it shares the cores)."""
    import aiohttp

    latencies: list[float] = []
    failures: list[str] = []
    sent = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(base_url=url, connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as client:
        for q in queries[:concurrency]:  # warm the connections and the model
            async with client.post("/v1/route", json={"query": q}) as r:
                await r.read()

        async def worker() -> None:
            nonlocal sent
            while sent < requests and time.perf_counter() < deadline:
                q = queries[sent % len(queries)]
                sent += 1
                t0 = time.perf_counter()
                try:
                    async with client.post("/v1/route", json={"query": q}) as r:
                        await r.read()
                        if r.status != 200:
                            failures.append(f"HTTP {r.status}")
                except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                    failures.append(type(e).__name__)
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    latencies.sort()
    return {"concurrency": concurrency, "requests": len(latencies), "failed": len(failures),
            "failures": sorted(set(failures)), "rps": round(len(latencies) / wall, 1),
            "p50_ms": round(1000 * latencies[len(latencies) // 2], 2),
            "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 2)}


def in_process(router_dir: Path, queries: list[str], seconds: float) -> dict[str, float]:
    from masdr_router.routers.lora import LoraRouter

    router = LoraRouter.from_pretrained(router_dir)
    router.route_batch(queries[:64])

    def rate(fn, batch: int) -> float:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            chunk = [queries[(n + i) % len(queries)] for i in range(batch)]
            fn(chunk)
            n += batch
        return n / (time.perf_counter() - t0)

    return {"batched_qps": round(rate(router.route_batch, 64), 1),
            "one_by_one_qps": round(rate(lambda b: router.route(b[0]), 1), 1)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--router", type=Path, default=Path("checkpoints/bbc-router"),
                    help="an exported router artifact (make demo writes checkpoints/bbc-router)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests", type=int, default=1500, help="requests per cell, at most")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds per cell, at most")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    if not (args.router / "router_config.json").is_file():
        raise SystemExit(f"{args.router} is not a router artifact: run `make demo` or pass --router DIR")

    from masdr_router.datasets import load_dataset

    queries = [q.query for q in load_dataset("bbc", max_docs_per_scope=200, seed=0).queries]
    args.out.mkdir(parents=True, exist_ok=True)
    base = in_process(args.router, queries, seconds=min(args.seconds, 10.0))
    print(f"in-process: batched {base['batched_qps']} q/s, one by one {base['one_by_one_qps']} q/s", flush=True)
    rows = []
    for batching in (True, False):
        proc, url = start_service(args.router, batching, args.out / f"serve-bench-{'on' if batching else 'off'}.log")
        try:
            for c in args.concurrency:
                row = {"batching": batching, **asyncio.run(load(url, queries, c, args.requests, args.seconds))}
                row["ratio_to_in_process_batched"] = round(row["rps"] / base["batched_qps"], 3)
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=60)

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"/v1/route on loopback, one query per request (in-process batched: {base['batched_qps']} q/s)")
    for col in ("batching", "concurrency", "requests", "failed", "req/s", "p50 ms", "p99 ms", "x in-process"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row("on" if r["batching"] else "off", str(r["concurrency"]), str(r["requests"]), str(r["failed"]),
                  f"{r['rps']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}",
                  f"{r['ratio_to_in_process_batched']:.2f}")
    Console().print(t)
    import torch

    report = {"benchmark": "serve", "router": str(args.router), "in_process": base, "results": rows,
              "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
                          "torch_threads": torch.get_num_threads()}}
    path = args.out / "serve.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")
    failed = sum(r["failed"] for r in rows)
    if failed:
        raise SystemExit(f"{failed} requests failed")
    return report


if __name__ == "__main__":
    main()
