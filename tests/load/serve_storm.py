#!/usr/bin/env python3
"""A bounded loopback storm against `kiln serve` (Python standard library only).

Trains a tiny MLP for one step on Fashion-MNIST (`kiln train`), exports it (`kiln export`),
starts `kiln serve` on a free port with short timeouts, then:

1. warm-up: 1,000 mixed requests beside the slow connections, at the storm's full
   concurrency (so that the allocator's per-thread arenas exist); the RSS after it is the
   baseline;
2. storm: MALFORMED malformed and VALID valid requests, shuffled, over CONNECTIONS keep-alive
   connections (a worker opens a new connection when the server closes one), while
   SLOW slow and half-open connections run beside it: half-sent headers, half-sent bodies,
   silent connections, a request followed by a half-close;
3. checks: every malformed request got a 4xx (no 5xx, no connection closed without a
   response), every valid one 200 with exactly the body it gets when sent alone, every
   half-closed request its response, no slow connection open past its timeout (+ the
   server's 2 s lingering close + 3 s slack), `/monitoring/prometheus/metrics` grew by less
   than 8 KiB, the server's RSS came back within 25% of the baseline (polled for up to
   30 s), and two more identical storms did not both take it above the first storm's peak by
   20% of the baseline (a leak grows with every request; allocator arenas and fragmentation
   settle, and peaks vary by several MiB from storm to storm).

Exit code 0 when every check holds, 1 otherwise; one `ok:` / `FAILED:` line per check and a
JSON summary line (`storm: {...}`).

    python3 tests/load/serve_storm.py --kiln target/release/kiln            # full: 30,000 + 6,000
    python3 tests/load/serve_storm.py --kiln target/release/kiln --malformed 3000 --valid 600 --slow 16
"""

import argparse
import gzip
import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

MODEL = "storm"
LIMIT = 64 << 10  # the server's --max-body-bytes (a valid body is about 6 KB)
CONFIG = """name = "storm"
seed = 1
[data]
data_dir = "{data_dir}"
rescale = 0.00392156862745098
[model]
layers = [
  {{ type = "Input", shape = [28, 28, 1] }},
  {{ type = "Flatten" }},
  {{ type = "Dense", units = 16, activation = "relu" }},
  {{ type = "Dense", units = 10, activation = "softmax" }},
]
[compile]
optimizer = "adamw"
loss = "sparse_categorical_crossentropy"
[fit]
epochs = 1
batch_size = 32
steps_per_epoch = 1
"""

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAILED: ") + what, flush=True)
    if not cond:
        failures.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ---- requests ------------------------------------------------------------------------------


def image(rng):
    return [[[round(rng.random(), 3)] for _ in range(28)] for _ in range(28)]


def request(method, path, body=b"", headers=()):
    head = f"{method} {path} HTTP/1.1\r\nHost: storm\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers)
    return head.encode() + b"\r\n" + body


def predict(body, headers=(), path=f"/v1/models/{MODEL}:predict"):
    return request("POST", path, body, headers)


def malformed_kinds(valid_body, rng):
    """Generators of malformed requests: each returns (bytes, fresh_connection)."""
    good = valid_body
    deep = b'{"instances": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    bomb = gzip.compress(b" " * (16 * LIMIT), 1)
    return [
        lambda: (predict(good[: rng.randrange(1, len(good) - 1)]), False),
        lambda: (predict(b'{"instances": [[1, 2, 3]]}'), False),
        lambda: (predict(b'{"instances": [["a"]]}'), False),
        lambda: (predict(b'{"instances": [NaNo]}'), False),
        lambda: (predict(b'{"instances": [[1]], "instances": [[1]]}'), False),
        lambda: (predict(b'{"instances": [[1]], "inputs": [[1]]}'), False),
        lambda: (predict(b'{"instances": [{"b64": "aGVsbG8="}]}'), False),
        lambda: (predict(b'{"signature_name": "x"}'), False),
        lambda: (predict(deep), False),
        lambda: (predict(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))), False),
        # Names clients make up (the metrics must not grow with them).
        lambda: (predict(good, path=f"/v1/models/made-up-{rng.randrange(10**9)}:predict"), False),
        lambda: (request("GET", f"/v1/models/made-up-{rng.randrange(10**9)}/metadata"), False),
        lambda: (predict(good, path=f"/v1/models/{MODEL}/versions/{rng.randrange(2, 10**6)}:predict"), False),
        lambda: (predict(good, path=f"/v1/models/{MODEL}/labels/nope:predict"), False),
        lambda: (predict(good, path="/v1/models/..%2F..%2Fetc%2Fpasswd:predict"), False),
        lambda: (predict(good, path=f"/v1/models/{MODEL}:classify"), False),
        lambda: (request("GET", f"/v1/models/{MODEL}:predict"), False),
        lambda: (request("DELETE", f"/v1/models/{MODEL}"), False),
        lambda: (request("GET", "/nope"), False),
        lambda: (predict(good, [("Content-Encoding", "gzip")]), False),
        lambda: (predict(bomb, [("Content-Encoding", "gzip")]), False),
        lambda: (predict(good, [("Content-Encoding", "br")]), False),
        lambda: (predict(b" " * (LIMIT + 1)), False),
        # Broken HTTP: answered (400) and closed by the server.
        lambda: (b"GARBAGE\r\n\r\n", True),
        lambda: (b"POST /v1/models/x:predict HTTP/1.1\r\nContent-Length: zz\r\n\r\n", True),
        lambda: (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", True),
        lambda: (b"GET /\x01 HTTP/1.1\r\n\r\n", True),
    ]


def read_response(sock, buf):
    """One response off `sock` (status, headers dict, body), `buf` holding leftover bytes;
    None when the connection closes first."""
    while b"\r\n\r\n" not in buf[0]:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf[0] += chunk
    head, rest = buf[0].split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0][9:12])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    buf[0] = rest[n:]
    return status, headers, rest[:n]


class Worker(threading.Thread):
    def __init__(self, port, jobs, expected):
        super().__init__(daemon=True)
        self.port, self.jobs, self.expected = port, jobs, expected
        self.sock, self.buf = None, [b""]
        self.counts = {"malformed_4xx": 0, "valid_ok": 0, "reconnects": 0}
        self.errors = []

    def connect(self):
        if self.sock:
            self.sock.close()
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        self.buf = [b""]
        self.counts["reconnects"] += 1

    def send(self, data):
        for attempt in range(2):
            if self.sock is None:
                self.connect()
            try:
                self.sock.sendall(data)
                return read_response(self.sock, self.buf)
            except (BrokenPipeError, ConnectionResetError) as e:
                # The server closed a keep-alive connection it had announced as closing? Then
                # the previous response said so and we reconnected; anything else is a defect.
                self.errors.append(f"send failed on a kept-alive connection: {e!r}")
                self.sock = None
        return None

    def run(self):
        for kind, data, fresh, want in self.jobs:
            if fresh or self.sock is None:
                self.connect()
            try:
                reply = self.send(data)
            except Exception as e:  # noqa: BLE001 - counted as a failure
                reply = None
                self.errors.append(f"{kind}: {e!r}")
            if reply is None:
                self.errors.append(f"{kind}: connection closed without a response ({data[:60]!r})")
                self.sock = None
                continue
            status, headers, body = reply
            if kind == "valid":
                if status == 200 and body == want:
                    self.counts["valid_ok"] += 1
                else:
                    self.errors.append(f"valid: {status} {body[:120]!r}")
            elif 400 <= status < 500:
                self.counts["malformed_4xx"] += 1
            else:
                self.errors.append(f"malformed got {status}: {data[:80]!r} -> {body[:120]!r}")
            if headers.get("connection", "").lower() == "close" or fresh:
                self.sock.close()
                self.sock = None


# ---- slow and half-open connections -----------------------------------------------------------


def slow_connection(port, kind, body, limit_s, results):
    """Opens one slow connection; records (kind, seconds until the server closed it or None,
    response status)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=limit_s)
    start = time.monotonic()
    status = None
    try:
        if kind == "partial-headers":
            s.sendall(b"POST /v1/models/storm:predict HTTP/1.1\r\nHost: storm\r\n")
        elif kind == "partial-body":
            s.sendall(predict(body)[: -len(body) // 2])
        elif kind == "half-close":
            s.sendall(predict(body))
            s.shutdown(socket.SHUT_WR)
        # "silent": nothing at all.
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        if data:
            status = int(data[9:12])
        results.append((kind, time.monotonic() - start, status))
    except (socket.timeout, TimeoutError):
        results.append((kind, None, status))
    except ConnectionResetError:
        results.append((kind, time.monotonic() - start, status))
    finally:
        s.close()


# ---- main ------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True, help="the kiln binary")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--malformed", type=int, default=30000)
    ap.add_argument("--valid", type=int, default=6000)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--slow", type=int, default=64, help="slow and half-open connections")
    ap.add_argument("--timeout", type=float, default=2.0,
                    help="the server's --header-read-timeout-seconds and --body-read-timeout-seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default="", help="only these malformed kinds (comma-separated indices; to bisect)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    kiln = os.path.abspath(args.kiln)
    work = tempfile.mkdtemp(prefix="kiln-serve-storm-")
    server = None
    try:
        cfg = os.path.join(work, "storm.toml")
        with open(cfg, "w") as f:
            f.write(CONFIG.format(data_dir=args.data_dir))
        for cmd in ([kiln, "train", cfg, "--run-dir", os.path.join(work, "run")],
                    [kiln, "export", os.path.join(work, "run"), "--out", os.path.join(work, "exports")]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
        port = free_port()
        server = subprocess.Popen(
            [kiln, "serve", "--model-name", MODEL, "--model-base-path",
             os.path.join(work, "exports", MODEL), "--rest-api-port", str(port),
             "--max-body-bytes", str(LIMIT),
             "--header-read-timeout-seconds", str(args.timeout),
             "--body-read-timeout-seconds", str(args.timeout)],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "serve.log"), "w"))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/v2/health/ready", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    sys.exit("FAILED: kiln serve did not become ready")
                time.sleep(0.1)
        rss_start = rss_kib(server.pid)

        def metrics():
            return urllib.request.urlopen(base + "/monitoring/prometheus/metrics", timeout=30).read()

        # Distinct valid bodies and their answers alone (batching is off: deterministic).
        bodies = [json.dumps({"instances": [image(rng)]}).encode() for _ in range(8)]
        answers, alone_ok = [], True
        for b in bodies:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", f"/v1/models/{MODEL}:predict", b, {"Content-Type": "application/json"})
            r = conn.getresponse()
            answers.append(r.read())
            conn.close()
            probs = json.loads(answers[-1])["predictions"][0]
            alone_ok &= r.status == 200 and len(probs) == 10 and abs(sum(probs) - 1) < 1e-4
        check(alone_ok, f"{len(bodies)} valid requests alone: 200 and 10 probabilities summing to 1")
        kinds = malformed_kinds(bodies[0], rng)
        if args.kinds:
            kinds = [kinds[int(i)] for i in args.kinds.split(",")]

        def jobs(n_malformed, n_valid):
            out = []
            for _ in range(n_malformed):
                data, fresh = rng.choice(kinds)()
                out.append(("malformed", data, fresh, None))
            for _ in range(n_valid):
                i = rng.randrange(len(bodies))
                out.append(("valid", predict(bodies[i]), False, answers[i]))
            rng.shuffle(out)
            return out

        def storm(all_jobs):
            workers = [Worker(port, all_jobs[i :: args.connections], None)
                       for i in range(args.connections)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            return workers

        slow_kinds = ["partial-headers", "partial-body", "silent", "half-close"]
        limit = args.timeout + 2 + 3 + 5  # the timeout, the lingering close, slack; socket limit

        def storm_round(n_malformed, n_valid):
            """One round: the storm beside SLOW slow connections. Returns the workers, the
            slow results and the seconds of the storm alone and with the slow connections."""
            results = []
            threads = [threading.Thread(
                target=slow_connection,
                args=(port, slow_kinds[i % 4], bodies[0], limit, results), daemon=True)
                for i in range(args.slow)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            done = storm(jobs(n_malformed, n_valid))
            storm_s = time.monotonic() - t0
            for t in threads:
                t.join()
            return done, results, storm_s, time.monotonic() - t0

        # Warm-up at the full concurrency (storm and slow connections), so that the server's
        # threads and the allocator's per-thread arenas exist before the baseline.
        storm_round(800, 200)
        metrics_before = len(metrics())
        rss_base = rss_kib(server.pid)

        workers, slow_results, storm_s, slow_s = storm_round(args.malformed, args.valid)
        rss_peak = rss_kib(server.pid)

        errors = [e for w in workers for e in w.errors]
        n_4xx = sum(w.counts["malformed_4xx"] for w in workers)
        n_ok = sum(w.counts["valid_ok"] for w in workers)
        for e in errors[:10]:
            print("  ", e)
        check(n_4xx == args.malformed, f"{n_4xx} of {args.malformed} malformed requests got a 4xx")
        check(n_ok == args.valid, f"{n_ok} of {args.valid} valid requests got their exact answer")
        check(not errors, f"{len(errors)} connection errors or wrong answers")

        worst = {}
        for kind, secs, _ in slow_results:
            worst[kind] = max(worst.get(kind, 0), secs if secs is not None else float("inf"))

        def count(kind, status=None):
            return sum(1 for k, _, s in slow_results if k == kind and status in (None, s))

        check(len(slow_results) == args.slow, f"{len(slow_results)} of {args.slow} slow connections ended")
        check(count("half-close", 200) == count("half-close"),
              f"{count('half-close', 200)} of {count('half-close')} half-closed requests got their 200")
        check(count("partial-body", 408) == count("partial-body"),
              f"{count('partial-body', 408)} of {count('partial-body')} stalled bodies got a 408")
        bound = args.timeout + 2 + 3
        check(all(v <= bound for v in worst.values()),
              f"no slow connection open past {bound:.0f} s (longest: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(worst.items())) + ")")

        metrics_after = len(metrics())
        check(metrics_after < metrics_before + 8192,
              f"/metrics {metrics_before} -> {metrics_after} bytes (bounded)")
        deadline = time.monotonic() + 30
        rss_after = rss_kib(server.pid)
        while rss_after > rss_base * 1.25 and time.monotonic() < deadline:
            time.sleep(0.5)
            rss_after = rss_kib(server.pid)
        check(rss_after <= rss_base * 1.25,
              f"RSS {rss_base / 1024:.1f} MiB after warm-up -> peak {rss_peak / 1024:.1f} MiB -> "
              f"{rss_after / 1024:.1f} MiB after the storm (within 25%: allocator arenas settle)")
        # A leak grows with every request; arena growth and fragmentation settle. Peaks of
        # identical storms vary by several MiB with how the threads meet the allocator's
        # arenas, so one storm against the next is noise: two more storms must stay within the
        # envelope of the peaks before them (a leak adds to every one of them).
        envelope = max(rss_peak, rss_after)
        seconds = []
        for _ in range(2):
            storm_round(args.malformed, args.valid)
            seconds.append(rss_kib(server.pid))
        rss_second = seconds[-1]
        grew = all(r > envelope + rss_base * 0.20 for r in seconds)
        check(not grew,
              f"two more storms: RSS {' -> '.join(f'{r / 1024:.1f}' for r in seconds)} MiB against "
              f"the first storm's peak {envelope / 1024:.1f} MiB (not both above it by 20% of the "
              f"baseline: no per-request leak)")
        check(server.poll() is None, "the server is still running")
        total = args.malformed + args.valid
        print("storm: " + json.dumps({
            "malformed": args.malformed, "valid": args.valid, "connections": args.connections,
            "slow": args.slow, "storm_s": round(storm_s, 1), "with_slow_s": round(slow_s, 1),
            "requests_per_s": round(total / storm_s), "metrics_bytes": [metrics_before, metrics_after],
            "rss_mib": {"start": round(rss_start / 1024, 1), "baseline": round(rss_base / 1024, 1),
                        "peak": round(rss_peak / 1024, 1), "after": round(rss_after / 1024, 1),
                        "second": round(rss_second / 1024, 1)},
            "slow_longest_s": {k: round(v, 2) for k, v in worst.items()},
            "reconnects": sum(w.counts["reconnects"] for w in workers),
        }), flush=True)
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


if __name__ == "__main__":
    main()
