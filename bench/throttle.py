#!/usr/bin/env python3
"""A site's uplink for benchmarks: a TCP proxy from 127.0.0.1:LISTEN to 127.0.0.1:UPSTREAM whose
connections share one token bucket of RATE bytes a second (in both directions together), as a
thin link shares its bandwidth among everyone behind it. Stdlib only.

Usage: throttle.py LISTEN_PORT UPSTREAM_PORT RATE_BYTES_PER_SECOND [RESERVE_SECONDS]
(RESERVE_SECONDS: how many seconds of the rate an idle link saves up for a burst; default 1)"""

import asyncio
import sys
import time

CHUNK = 16 << 10


class Bucket:
    """RATE bytes a second, at most RESERVE seconds' worth saved up."""

    def __init__(self, rate: int, reserve: float = 1.0) -> None:
        self.rate = rate
        self.cap = max(float(CHUNK), rate * reserve)
        self.tokens = self.cap
        self.last = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self, n: int) -> None:
        async with self.lock:
            while True:
                now = time.monotonic()
                self.tokens = min(self.cap, self.tokens + (now - self.last) * self.rate)
                self.last = now
                if self.tokens >= n:
                    self.tokens -= n
                    return
                await asyncio.sleep((n - self.tokens) / self.rate)


async def pipe(reader, writer, bucket: Bucket) -> None:
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            await bucket.take(len(data))
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def main() -> None:
    listen, upstream, rate = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    reserve = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    bucket = Bucket(rate, reserve)

    async def handle(r, w):
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            w.close()
            return
        await asyncio.gather(pipe(r, uw, bucket), pipe(ur, w, bucket))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
