#!/usr/bin/env python3
"""What a JSON Schema request costs a server, and the streams already running on it (issue #17).

Starts `BINARY serve` on PORT with the default model (or `$NEXTOK_MODEL`), opens one streamed
greedy request of 300 tokens, and once it has streamed 30 chunks sends a chat request whose
`response_format` is the schema of a real-world case (`n` completions, `max_tokens: 3`) twice,
one after the other. Prints each schema request's wall time and, for the running stream, its
median gap between chunks and its worst gap while each schema request was in flight: a schema
compiled on the scheduler's thread, or once per completion, shows there. Nothing but the
standard library; run one binary after the other in the same hour to compare builds:

  tools/schema-admission-latency.py target/release/nextok 18431 web-types.json
  tools/schema-admission-latency.py OLD/nextok 18431 web-types.json --n 4

Options: --n (completions of the schema request, default 4), --corpus (default
conformance/real-world/schemastore), --extra (more arguments for `serve`, e.g.
"--grammar-cache 0").
"""

import argparse
import http.client
import json
import os
import shlex
import statistics
import subprocess
import threading
import time


def request(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    return c.getresponse()


def wait_ready(port, server):
    for _ in range(1200):
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the server did not become ready in 120 s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("binary")
    p.add_argument("port", type=int)
    p.add_argument("case", help="a file of the real-world corpus, e.g. web-types.json")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--corpus", default="conformance/real-world/schemastore")
    p.add_argument("--extra", default="")
    a = p.parse_args()
    with open(os.path.join(a.corpus, a.case)) as f:
        schema = json.load(f)["schema"]
    cmd = [a.binary, "serve", "--port", str(a.port)] + shlex.split(a.extra)
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(a.port, server)
        request(a.port, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).read()
        chunks = []

        def stream():
            r = request(a.port, {
                "messages": [{"role": "user", "content": "Write a long story about the sea."}],
                "max_tokens": 300, "ignore_eos": True, "stream": True, "temperature": 0,
            })
            while True:
                line = r.readline()
                if not line:
                    break
                if line.startswith(b"data:"):
                    chunks.append(time.perf_counter())

        running = threading.Thread(target=stream)
        running.start()
        while len(chunks) < 30:
            if not running.is_alive():
                raise SystemExit("the running stream ended before 30 chunks")
            time.sleep(0.005)
        body = {
            "messages": [{"role": "user", "content": "Give an example."}],
            "max_tokens": 3, "n": a.n, "temperature": 0.7, "seed": 1,
            "response_format": {"type": "json_schema", "json_schema": {"name": "case", "schema": schema}},
        }
        spans = []
        for _ in range(2):
            t0 = time.perf_counter()
            r = request(a.port, body)
            data = r.read()
            spans.append((t0, time.perf_counter()))
            if r.status != 200:
                raise SystemExit(f"the schema request failed: {r.status} {data[:300]!r}")
            time.sleep(0.3)
        running.join()
    finally:
        server.terminate()
        server.wait()
    gaps = [(b - a_, a_) for a_, b in zip(chunks, chunks[1:])]
    median = statistics.median(g for g, _ in gaps)

    def worst(t0, t1):
        return max((g for g, at in gaps if t0 - 0.05 <= at <= t1), default=0.0)

    ms = lambda s: f"{1e3 * s:.1f} ms"
    print(f"{a.binary} {a.case} n={a.n}: request 1 {ms(spans[0][1] - spans[0][0])}, "
          f"request 2 {ms(spans[1][1] - spans[1][0])}; running stream: median gap {ms(median)}, "
          f"worst gap during request 1 {ms(worst(*spans[0]))}, during request 2 {ms(worst(*spans[1]))}")


if __name__ == "__main__":
    main()
