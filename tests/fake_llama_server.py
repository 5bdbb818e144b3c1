#!/usr/bin/env python3
"""A stand-in for llama-server (tests): /health, /completion, /tokenize, /detokenize on
--port; with -m die.gguf it prints an error and exits 3, as llama-server does on a bad file."""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

ARGS = sys.argv[1:]


def arg(flag: str, default: str = "") -> str:
    return ARGS[ARGS.index(flag) + 1] if flag in ARGS else default


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        print("request", *args, flush=True)

    def reply(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.reply({"status": "ok"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            self.reply({"tokens": [ord(c) for c in body["content"]]})
        elif self.path == "/detokenize":
            self.reply({"content": "".join(chr(t) for t in body["tokens"])})
        else:  # /completion: echo the prompt's ids, counting drafts as accepted with -md
            n = body["n_predict"]
            tokens = (body["prompt"] * n)[:n]
            timings = {
                "prompt_n": len(body["prompt"]),
                "prompt_ms": 1.0,
                "predicted_n": n,
                "predicted_ms": 2.0 * n,
            }
            if "-md" in ARGS:
                timings |= {"draft_n": n, "draft_n_accepted": n - 1}
            self.reply({"tokens": tokens, "timings": timings, "stop_type": "limit", "echo": body})


if __name__ == "__main__":
    print("fake llama-server", " ".join(ARGS), flush=True)
    if arg("-m").endswith("die.gguf"):
        print("error: failed to load model 'die.gguf'", flush=True)
        sys.exit(3)
    HTTPServer(("127.0.0.1", int(arg("--port"))), Handler).serve_forever()
