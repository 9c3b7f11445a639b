#!/usr/bin/env python3
"""A bounded load generator for `vlm serve` (Python 3 standard library only, so it runs on the GPU machine too).

N clients (threads, one keep-alive connection each) send streamed chat requests with an image back to back for T
seconds, R rounds. Per round it prints requests/s, generated tokens/s, end-to-end latency and time-to-first-token
p50/p99, errors, and the server's resident memory (VmRSS of --pid, read after the round). Exit 1 on any error, on a
round without requests, or (with --max-rss-growth-mb) when the RSS after the last round exceeds the first round's by
more than that.

  bench/serve/load.py --url http://127.0.0.1:8000 --model NAME --image FILE [--clients 4] [--seconds 5]
      [--rounds 3] [--max-tokens 16] [--pid PID] [--api-key KEY] [--max-rss-growth-mb 16] [--json OUT]
"""
import argparse
import base64
import http.client
import json
import sys
import threading
import time
import urllib.parse

QUESTIONS = ["what color is the square?", "how many shapes are there?", "describe the image.", "is there a circle?"]


def request_body(args, image_url, i):
    content = [{"type": "text", "text": QUESTIONS[i % len(QUESTIONS)]}]
    if image_url:
        content.insert(0, {"type": "image_url", "image_url": {"url": image_url}})
    return json.dumps({"model": args.model, "messages": [{"role": "user", "content": content}],
                       "max_tokens": args.max_tokens, "temperature": 0.8, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})


def one(conn, headers, body):
    """One streamed request: (latency s, time to first content delta s, generated tokens)."""
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:200].decode(errors='replace')}")
    ttft, tokens, done = None, 0, False
    while True:
        line = res.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(f"stream error: {chunk['error']['message']}")
        # The first chunk after the role's: the server sends one per batch of tokens, text or not.
        if ttft is None and any("content" in c.get("delta", {}) and "role" not in c.get("delta", {})
                                for c in chunk.get("choices", [])):
            ttft = time.perf_counter() - t0
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    if not done:
        raise RuntimeError("the stream ended without [DONE]")
    latency = time.perf_counter() - t0
    return latency, ttft if ttft is not None else latency, tokens


def quantile(xs, q):
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def rss_mb(pid):
    if not pid:
        return float("nan")
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run_round(args, host, port, headers, image_url, number):
    lock = threading.Lock()
    stats = {"latency": [], "ttft": [], "tokens": 0, "errors": 0, "first_error": None}
    end = time.perf_counter() + args.seconds

    def client(c):
        conn = http.client.HTTPConnection(host, port, timeout=600)
        i = c
        while time.perf_counter() < end:
            try:
                latency, ttft, tokens = one(conn, headers, request_body(args, image_url, i))
                with lock:
                    stats["latency"].append(latency)
                    stats["ttft"].append(ttft)
                    stats["tokens"] += tokens
            except Exception as e:  # noqa: BLE001 - every failure counts as an error of the round
                with lock:
                    stats["errors"] += 1
                    stats["first_error"] = stats["first_error"] or repr(e)
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=600)
            i += args.clients
        conn.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    n = len(stats["latency"])
    r = {"round": number, "clients": args.clients, "requests": n, "errors": stats["errors"],
         "requests_per_s": n / wall, "tokens_per_s": stats["tokens"] / wall,
         "latency_p50_ms": 1000 * quantile(stats["latency"], 0.5), "latency_p99_ms": 1000 * quantile(stats["latency"], 0.99),
         "ttft_p50_ms": 1000 * quantile(stats["ttft"], 0.5), "ttft_p99_ms": 1000 * quantile(stats["ttft"], 0.99),
         "rss_mb": rss_mb(args.pid)}
    print(f"[load] round {number}: {n} requests, {r['errors']} errors, {r['requests_per_s']:.1f} req/s, "
          f"{r['tokens_per_s']:.0f} tokens/s, latency p50 {r['latency_p50_ms']:.1f} ms p99 {r['latency_p99_ms']:.1f} ms, "
          f"TTFT p50 {r['ttft_p50_ms']:.1f} ms p99 {r['ttft_p99_ms']:.1f} ms, server RSS {r['rss_mb']:.1f} MiB",
          flush=True)
    if stats["first_error"]:
        print(f"[load] first error: {stats['first_error']}", flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="")
    ap.add_argument("--image", help="a JPEG, PNG or WebP sent with every request")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--pid", type=int, help="the server's process id (its RSS is reported)")
    ap.add_argument("--api-key")
    ap.add_argument("--max-rss-growth-mb", type=float)
    ap.add_argument("--json", help="write the rounds' figures here")
    args = ap.parse_args()
    u = urllib.parse.urlparse(args.url)
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    image_url = None
    if args.image:
        mime = "image/png" if args.image.endswith(".png") else "image/webp" if args.image.endswith(".webp") else "image/jpeg"
        with open(args.image, "rb") as f:
            image_url = f"data:{mime};base64,{base64.b64encode(f.read()).decode()}"
    results = [run_round(args, u.hostname, u.port or 80, headers, image_url, r + 1) for r in range(args.rounds)]
    failed = any(r["errors"] > 0 or r["requests"] == 0 for r in results)
    if args.max_rss_growth_mb is not None and len(results) > 1:
        growth = results[-1]["rss_mb"] - results[0]["rss_mb"]
        print(f"[load] server RSS growth from round 1 to {len(results)}: {growth:.1f} MiB "
              f"(limit {args.max_rss_growth_mb:g} MiB)")
        failed |= not (growth <= args.max_rss_growth_mb)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
