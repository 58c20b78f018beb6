#!/usr/bin/env python3
"""Rogue clients against a real `mxserve serve` on loopback, and a graceful-shutdown check.

  load_test.py load HOST PORT PID     each rogue group for LOAD_SECONDS (30) while a
                                      well-behaved client sends one request a second
  load_test.py good HOST PORT SECONDS  the well-behaved client alone (its own process, so that
                                      the rogues' event loop cannot delay it); prints JSON
  load_test.py sigterm HOST PORT PID MODE
                                      8 streams, then SIGTERM; MODE "finish": every stream
                                      ends complete; "cut": every stream ends with an error event

Only the standard library: raw sockets, so that the rogues can do what no HTTP client would.
"""
import asyncio
import json
import os
import random
import resource
import signal
import sys
import time

SECONDS = float(os.environ.get("LOAD_SECONDS", "30"))
# 0: report memory but hold only that every request ends well (sanitizer builds, whose
# quarantine keeps freed memory).
FIGURES = os.environ.get("LOAD_FIGURES", "1") == "1"
GOOD_BODY = json.dumps({"messages": [{"role": "user", "content": "Hello there"}],
                        "max_tokens": 48, "temperature": 0, "ignore_eos": True}).encode()


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS")


def request_bytes(method, path, body=b"", extra=""):
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n")
    return head.encode() + body


async def fetch(host, port, method, path, body=b"", timeout=60.0):
    """One request on its own connection; returns (status, body)."""
    async def go():
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request_bytes(method, path, body))
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1]) if head else 0
        return status, rest
    return await asyncio.wait_for(go(), timeout)


async def metrics(host, port):
    status, body = await fetch(host, port, "GET", "/metrics")
    assert status == 200, status
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def good_client(host, port, stop, latencies, failures):
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            status, body = await fetch(host, port, "POST", "/v1/chat/completions", GOOD_BODY)
            if status != 200:
                failures.append(f"status {status}: {body[:200]!r}")
            else:
                latencies.append(time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - every failure is counted
            failures.append(f"{type(e).__name__}: {e}")
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))


async def good_alone(host, port, seconds):
    stop = asyncio.Event()
    latencies, failures = [], []
    task = asyncio.ensure_future(good_client(host, port, stop, latencies, failures))
    await asyncio.sleep(seconds)
    stop.set()
    await task
    print(json.dumps({"latencies": latencies, "failures": failures}), flush=True)
    return 0


async def slow_loris(host, port, stop):
    """Sends a header one byte a second; reconnects when the server gives up on it."""
    while not stop.is_set():
        try:
            _, writer = await asyncio.open_connection(host, port)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            while not stop.is_set():
                await writer.drain()
                await asyncio.sleep(1.0)
                writer.write(b"a")
            writer.close()
        except (OSError, asyncio.IncompleteReadError):
            await asyncio.sleep(0.2)


async def idle_socket(host, port, stop):
    """Connects and says nothing; reconnects when closed."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port)
            read = asyncio.ensure_future(reader.read(1))
            waiter = asyncio.ensure_future(stop.wait())
            await asyncio.wait([read, waiter], return_when=asyncio.FIRST_COMPLETED)
            read.cancel()
            waiter.cancel()
            writer.close()
        except OSError:
            await asyncio.sleep(0.2)


async def chunked_upload(host, port, stop, total=100 << 20, chunk=64 << 10, rate=2 << 20):
    """A 100 MB chunked body at `rate` bytes a second; again when the server refuses it."""
    payload = b"%x\r\n" % chunk + b"x" * chunk + b"\r\n"
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                         b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n")
            sent = 0
            while sent < total and not stop.is_set() and not reader.at_eof():
                writer.write(payload)
                await writer.drain()
                sent += chunk
                await asyncio.sleep(chunk / rate)
            writer.close()
        except OSError:
            await asyncio.sleep(0.2)


async def disconnecter(host, port, stop, streaming):
    """Starts a long generation and goes away mid-way."""
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 1000, "stream": streaming,
                       "ignore_eos": True}).encode()
    await asyncio.sleep(random.uniform(0, 4))  # clients that arrive together leave together
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request_bytes("POST", "/v1/completions", body))
            await writer.drain()
            try:
                if streaming:
                    await asyncio.wait_for(reader.readuntil(b"data: "), 30)
                else:
                    await asyncio.sleep(0.01)
            finally:
                writer.transport.abort()
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass
        await asyncio.sleep(random.uniform(2, 6))


async def settle(host, port):
    """Waits for the server to drop what the rogues left; returns the last /metrics."""
    m = {}
    for _ in range(20):  # 2 s: far less than the rogues' generations would take to finish
        m = await metrics(host, port)
        if (m["mxserve_num_requests_running"] == 0 and m["mxserve_num_requests_waiting"] == 0
                and m["mxserve_kv_cache_blocks_used"] == 0):
            break
        await asyncio.sleep(0.1)
    return m


async def run_phase(host, port, pid, name, rogues, seconds):
    stop = asyncio.Event()
    peak = [rss_mb(pid)]

    async def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mb(pid))
            await asyncio.sleep(0.2)
    tasks = [asyncio.ensure_future(r(stop)) for r in rogues]
    tasks.append(asyncio.ensure_future(sample()))
    await asyncio.sleep(1.0)  # let the rogues take hold first
    good = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "good", host, str(port), str(seconds),
        stdout=asyncio.subprocess.PIPE)
    out, _ = await good.communicate()
    r = json.loads(out)
    latencies, failures = r["latencies"], r["failures"]
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    m = await settle(host, port)
    return {"name": name, "latencies": latencies, "failures": failures, "peak_rss": peak[0],
            "running": m["mxserve_num_requests_running"],
            "kv_used": m["mxserve_kv_cache_blocks_used"]}


async def measure_group(host, port, pid, name, rogues, base, idle_rss):
    """One phase beside `rogues`; returns whether every request ended well and memory held.
    The latency beside the rogues is reported as a ratio to the idle server, not held: on a
    shared 2-core machine one burst from another tenant lands on a 20-sample p99."""
    r = await run_phase(host, port, pid, name, rogues, SECONDS)
    p99 = percentile(r["latencies"], 0.99) if r["latencies"] else float("inf")
    grew = r["peak_rss"] - idle_rss
    good = not r["failures"] and r["running"] == 0 and r["kv_used"] == 0
    memory = grew <= 200 or not FIGURES
    print(f"{'ok ' if good and memory else 'BAD'} {name}: p99 {p99 * 1000:.1f} ms "
          f"({p99 / base:.2f}x idle) over {len(r['latencies'])} requests, "
          f"{len(r['failures'])} failed, peak RSS +{grew:.0f} MB, then running "
          f"{r['running']:.0f}, KV blocks used {r['kv_used']:.0f}", flush=True)
    if os.environ.get("LOAD_VERBOSE"):
        print("   latencies (ms):", " ".join(f"{x * 1000:.0f}" for x in r["latencies"]))
    for f in r["failures"][:5]:
        print("   failure:", f)
    return good and memory


async def load(host, port, pid):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    await fetch(host, port, "POST", "/v1/chat/completions", GOOD_BODY)  # warm up
    # As long as each group, so that both p99s are over as many requests.
    idle = await run_phase(host, port, pid, "idle", [], SECONDS)
    idle_rss = rss_mb(pid)
    base = percentile(idle["latencies"], 0.99)
    groups = [
        ("200 slow-loris clients", [lambda s: slow_loris(host, port, s)] * 200),
        ("1000 idle sockets", [lambda s: idle_socket(host, port, s)] * 1000),
        ("20 chunked 100 MB uploads", [lambda s: chunked_upload(host, port, s)] * 20),
        ("50 mid-stream disconnects", [lambda s: disconnecter(host, port, s, True)] * 25 +
         [lambda s: disconnecter(host, port, s, False)] * 25),
    ]
    print(f"idle: p99 {base * 1000:.1f} ms over {len(idle['latencies'])} requests, "
          f"RSS {idle_rss:.0f} MB", flush=True)
    ok = not idle["failures"]
    only = os.environ.get("LOAD_GROUPS")  # a comma-separated subset by index, when debugging
    if only:
        groups = [groups[int(i)] for i in only.split(",")]
    for name, rogues in groups:
        ok = await measure_group(host, port, pid, name, rogues, base, idle_rss) and ok
    return 0 if ok else 1


async def read_stream(host, port, max_tokens, started=None):
    """One streaming completion; returns ('complete'|'error'|'broken', tokens seen). Sets
    `started` once the first event has arrived."""
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True, "temperature": 0}).encode()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(request_bytes("POST", "/v1/completions", body))
    await writer.drain()
    data = b""
    while started is not None and b"data: " not in data:
        chunk = await asyncio.wait_for(reader.read(4096), 120)
        if not chunk:
            break
        data += chunk
    if started is not None:
        started.set()
    data += await asyncio.wait_for(reader.read(), 120)
    writer.close()
    events = [line[6:] for line in data.decode(errors="replace").split("\n")
              if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return "broken", 0
    last = json.loads(events[-2]) if len(events) > 1 else {}
    if "error" in last:
        return "error", len(events) - 2
    reasons = [c["finish_reason"] for e in events[:-1] for c in json.loads(e)["choices"]]
    return ("complete" if reasons and reasons[-1] == "length" else "broken"), len(events) - 2


async def sigterm(host, port, pid, mode):
    tokens = 48 if mode == "finish" else 1000
    # SIGTERM once every stream is generating: a cut then always finds them mid-stream, however
    # fast the machine writes 1000 tokens.
    started = [asyncio.Event() for _ in range(8)]
    streams = [asyncio.ensure_future(read_stream(host, port, tokens, e)) for e in started]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 120)
    os.kill(pid, signal.SIGTERM)
    results = await asyncio.gather(*streams)
    want = "complete" if mode == "finish" else "error"
    print("streams:", results, flush=True)
    return 0 if all(r[0] == want for r in results) else 1


def main():
    cmd, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if cmd == "good":
        return asyncio.run(good_alone(host, port, float(sys.argv[4])))
    pid = int(sys.argv[4])
    if cmd == "load":
        return asyncio.run(load(host, port, pid))
    return asyncio.run(sigterm(host, port, pid, sys.argv[5]))


if __name__ == "__main__":
    sys.exit(main())
