"""Peak memory of one request meeting a hostile reply body, per transport (docs/reliability.md).

A loopback server answers every request with one of:
  gzip-bomb   a 200 whose body is ~3 MB of gzip holding 3 GiB of zeros (the issue's 3 MB reply)
  endless     a 200 with chunked framing that never ends
and a fresh process per (body, transport) posts one request and reports the error kind and its peak RSS
(ru_maxrss), so one transport's garbage never counts against the next.

    PYTHONPATH=src python bench/hostile_bodies.py
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

BOMB = Path(tempfile.gettempdir()) / "trustmh-bomb-3GiB.gz"
TRANSPORTS = ("http", "aiohttp", "sdk", "anthropic")


def make_bomb() -> bytes:
    if not BOMB.exists():
        squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        block = b"\0" * (64 << 20)
        parts = [squeeze.compress(block) for _ in range(48)] + [squeeze.flush()]  # 48 x 64 MiB = 3 GiB
        BOMB.write_bytes(b"".join(parts))
    return BOMB.read_bytes()


async def serve(kind: str, bomb: bytes) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            if kind == "gzip-bomb":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(bomb) + bomb)
                await writer.drain()
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                block = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
                while True:
                    writer.write(block)
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def one(kind: str, transport: str) -> dict:
    from trustmh.models.anthropic_api import AnthropicModel
    from trustmh.models.openai_api import OpenAIModel
    from trustmh.types import ModelError, Request

    server = await serve(kind, make_bomb() if kind == "gzip-bomb" else b"")
    port = server.sockets[0].getsockname()[1]
    if transport == "anthropic":
        model = AnthropicModel("anthropic/m", "m", api_key="k", base_url=f"http://127.0.0.1:{port}", timeout=60)
    else:
        model = OpenAIModel("openai/m", "m", api_key="k", base_url=f"http://127.0.0.1:{port}/v1", timeout=60,
                            transport=transport)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        await model.generate(Request([{"role": "user", "content": "q"}], {"max_tokens": 8}))
        outcome = "reply"
    except ModelError as e:
        outcome = f"{e.kind}: {e.message[:60]}"
    finally:
        await model.aclose()
        server.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"body": kind, "transport": transport, "outcome": outcome, "peak_rss_mib": round(peak / 1024),
            "rss_before_mib": round(before / 1024)}


def main() -> None:
    if len(sys.argv) == 3:
        print(json.dumps(asyncio.run(one(sys.argv[1], sys.argv[2]))))
        return
    make_bomb()
    print(f"gzip bomb: {BOMB.stat().st_size / 1e6:.1f} MB on the wire, 3 GiB decompressed")
    for kind in ("gzip-bomb", "endless"):
        for transport in TRANSPORTS:
            out = subprocess.run([sys.executable, __file__, kind, transport], capture_output=True, text=True,
                                 env=os.environ, timeout=300)
            print(out.stdout.strip() or out.stderr.strip()[-500:])


if __name__ == "__main__":
    main()
