"""The serving benchmark's load generator (bench_serving.py runs it as a separate process, so that the
server and the client are two processes on two cores): asyncio over raw sockets, requests prebuilt as
bytes, each response read by its Content-Length, so that one client process keeps 64 connections busy at
several thousand requests a second. Every scenario is bounded in connections, requests and seconds.

    echo '{"scenario": "keepalive", "port": 8080, ...}' | python scripts/benchmarks/serving_load.py

prints one line of JSON: the scenario's figures, and the client's own CPU seconds (``client_cpu_s``): with
the wall time it shows whether the client, not the server, was the limit.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import sys
import time
from collections import Counter

HOST = "127.0.0.1"
LENGTH = re.compile(rb"content-length: *(\d+)", re.I)
BATCH = re.compile(rb"x-batch-size: *(\d+)", re.I)


def post(route: str, body: bytes, close: bool = False) -> bytes:
    head = (
        f"POST {route} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
    )
    return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = LENGTH.search(head)
    body = await reader.readexactly(int(length[1])) if length else b""
    return int(head.split(b" ", 2)[1]), head, body


def quantiles(times: list[float]) -> dict:
    if not times:
        return {"p50_ms": None, "p99_ms": None}
    ordered = sorted(times)
    return {
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
    }


async def keepalive(
    port: int, route: str, body: str, clients: int, seconds: float, warmup: float = 1.0
) -> dict:
    """``clients`` keep-alive connections, each sending the same request one after another for
    ``seconds`` (after ``warmup``): requests/s, latency, statuses, the batch sizes the server reported."""
    request = post(route, body.encode())
    times, statuses, batches = [], Counter(), Counter()
    start = time.perf_counter()
    begin, end = start + warmup, start + warmup + seconds

    async def client():
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            while (now := time.perf_counter()) < end:
                writer.write(request)
                status, head, _ = await read_response(reader)
                done = time.perf_counter()
                if now >= begin:
                    times.append(done - now)
                    statuses[status] += 1
                    found = BATCH.search(head)
                    if found:
                        batches[int(found[1])] += 1
                if b"connection: close" in head.lower():
                    break
        finally:
            writer.close()

    cpu = time.process_time()
    results = await asyncio.gather(*(client() for _ in range(clients)), return_exceptions=True)
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    return {
        "clients": clients,
        "requests": len(times),
        "rps": round(len(times) / seconds, 1),
        **quantiles(times),
        "statuses": dict(statuses),
        "errors": errors[:3],
        "error_count": len(errors),
        "batches": {str(k): v for k, v in sorted(batches.items())},
        "client_cpu_s": round(time.process_time() - cpu, 2),
        "wall_s": round(time.perf_counter() - start, 2),
    }


async def burst(port: int, route: str, body: str, connections: int, timeout: float) -> dict:
    """``connections`` connections at once, each sending one large request: what each got back."""
    request = post(route, body.encode(), close=True)
    outcomes = Counter()
    gate = asyncio.Event()

    async def one():
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            outcomes[f"connect {type(exc).__name__}"] += 1
            return
        try:
            await gate.wait()
            writer.write(request)
            status, _, _ = await asyncio.wait_for(read_response(reader), timeout)
            outcomes[str(status)] += 1
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
            outcomes[type(exc).__name__] += 1
        finally:
            writer.close()

    start = time.perf_counter()
    tasks = [asyncio.ensure_future(one()) for _ in range(connections)]
    await asyncio.sleep(0.5)  # the connections open first, then every body goes at once
    gate.set()
    await asyncio.gather(*tasks)
    return {
        "connections": connections,
        "body_bytes": len(body),
        "outcomes": dict(outcomes),
        "wall_s": round(time.perf_counter() - start, 2),
    }


async def slowloris(port: int, route: str, body: str, connections: int, seconds: float) -> dict:
    """``connections`` connections that send a request's headers one byte a second, while one good client
    sends requests one after another: the good client's latency during the attack, what the attackers got."""
    head = post(route, body.encode())
    attackers = Counter()
    stop = time.perf_counter() + seconds

    async def attacker():
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
        except OSError as exc:
            attackers[f"connect {type(exc).__name__}"] += 1
            return
        try:
            for byte in head:
                if time.perf_counter() > stop:
                    attackers["still trickling at the end"] += 1
                    return
                writer.write(bytes([byte]))
                await writer.drain()
                try:  # an answer (408) ends the attack on this connection
                    status, _, _ = await asyncio.wait_for(read_response(reader), 1.0)
                    attackers[str(status)] += 1
                    return
                except asyncio.TimeoutError:
                    continue
        except (OSError, asyncio.IncompleteReadError) as exc:
            attackers[type(exc).__name__] += 1
        finally:
            writer.close()

    tasks = [asyncio.ensure_future(attacker()) for _ in range(connections)]
    await asyncio.sleep(2.0)  # all connected and trickling
    good = await keepalive(port, route, body, 1, max(1.0, stop - time.perf_counter() - 1), warmup=0)
    await asyncio.gather(*tasks)
    return {"connections": connections, "attackers": dict(attackers), "good_client": good}


async def shutdown(port: int, route: str, body: str, clients: int, pid: int, seconds: float) -> dict:
    """``clients`` keep-alive clients under load; SIGTERM to ``pid`` after 2 s: requests begun more than
    1 s after it that were still answered 200, requests in flight at the signal that failed, and when new
    connections were first refused."""
    import signal

    request = post(route, body.encode())
    after, failed_in_flight, ok_total = [0], [0], [0]
    signalled: list[float] = []
    end = time.perf_counter() + seconds

    async def client():
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
        except OSError:
            return
        try:
            while time.perf_counter() < end:
                sent = time.perf_counter()
                writer.write(request)
                try:
                    status, head, _ = await read_response(reader)
                except (OSError, asyncio.IncompleteReadError):
                    if signalled and sent <= signalled[0] + 0.05:
                        failed_in_flight[0] += 1
                    return
                ok_total[0] += status == 200
                if status == 200 and signalled and sent > signalled[0] + 1:
                    after[0] += 1
                if b"connection: close" in head.lower():
                    # A new connection, as a client does: refused once the listener is closed.
                    writer.close()
                    try:
                        reader, writer = await asyncio.open_connection(HOST, port)
                    except OSError:
                        return
        finally:
            writer.close()

    async def refused_at():
        while time.perf_counter() < end:
            await asyncio.sleep(0.02)
            if not signalled:
                continue
            try:
                _, writer = await asyncio.open_connection(HOST, port)
                writer.close()
            except OSError:
                return time.perf_counter() - signalled[0]
        return None

    tasks = [asyncio.ensure_future(client()) for _ in range(clients)]
    probe = asyncio.ensure_future(refused_at())
    await asyncio.sleep(2)
    signalled.append(time.perf_counter())
    os.kill(pid, signal.SIGTERM)
    await asyncio.gather(*tasks)
    return {
        "clients": clients,
        "ok_requests": ok_total[0],
        "answered_200_begun_over_1s_after": after[0],
        "in_flight_failed": failed_in_flight[0],
        "refused_after_s": await probe,
    }


def main() -> None:
    spec = json.loads(sys.stdin.read())
    scenario = spec.pop("scenario")
    result = asyncio.run(
        {"keepalive": keepalive, "burst": burst, "slowloris": slowloris, "shutdown": shutdown}[scenario](
            **spec
        )
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
