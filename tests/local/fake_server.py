"""A stand-in for llama.cpp's server: answers GET /v1/models on loopback, and forks a grandchild.

Usage: python fake_server.py PORT ALIAS [--ignore-term] [--never-ready] [--exit-now]
Prints "grandchild PID" so tests can check that the whole process group is gone afterwards.
"""

import http.server
import json
import signal
import subprocess
import sys

port, alias = int(sys.argv[1]), sys.argv[2]
flags = set(sys.argv[3:])
if "--exit-now" in flags:
    print("fake server: failing on purpose", flush=True)
    sys.exit(3)
if "--ignore-term" in flags:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"grandchild {grandchild.pid}", flush=True)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if "--never-ready" in flags:
            self.send_response(503)
            self.end_headers()
            return
        body = json.dumps({"object": "list", "data": [{"id": alias, "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
