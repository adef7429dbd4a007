"""A webhook for A2A push notifications: every POST it takes is parsed as the official SDK's
`StreamResponse` (a2a-sdk, from the project's venv; unknown fields refused), and told on stdout
as one JSON line: {path, token, authorization, body, parsed} (`parsed`: true, or the parser's
error).

`python push_receiver.py` listens on 127.0.0.1 (a port of its own) and prints
`listening http://127.0.0.1:<port>` first. What it answers depends on the path:
- `/ok…`: 200;
- `/fail…`: 500;
- `/redirect…`: 302 to the cloud's metadata address (a push must never follow it);
- `/hang…`: nothing, for 60 seconds.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format

from a2a.types.a2a_pb2 import StreamResponse

lock = threading.Lock()


def tell(line):
    with lock:
        print(json.dumps(line), flush=True)


class Webhook(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the standard library's name
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode()
        try:
            json_format.Parse(body, StreamResponse())
            parsed = True
        except Exception as e:  # noqa: BLE001 - the test reads why it did not parse
            parsed = f"{type(e).__name__}: {e}"
        tell(
            {
                "path": self.path,
                "token": self.headers.get("X-A2A-Notification-Token"),
                "authorization": self.headers.get("Authorization"),
                "body": json.loads(body) if body else None,
                "parsed": parsed,
            }
        )
        if self.path.startswith("/hang"):
            time.sleep(60)
            return
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
        elif self.path.startswith("/fail"):
            self.send_response(500)
        else:
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    server.daemon_threads = True
    print(f"listening http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
