"""A small OpenAI-compatible server for the API engine's tests (tests/test_api_engine.py): GET /v1/models and
POST /v1/chat/completions on 127.0.0.1, with faults chosen per request: an HTTP status (with Retry-After), a
slow answer, a body that is not JSON, a reset connection, or a server that drops every connection."""

import http.server
import json
import socket
import struct
import threading
import time


class FakeOpenAI:
    """answer(body) -> the assistant's text, or a fault: ("status", code, headers), ("slow", seconds, text),
    ("malformed",), ("reset",). `down` makes every request (models included) a reset connection; `silent`, an
    accepted connection that is never answered; `key`: every request without "Bearer <key>" gets a 401."""

    def __init__(self, answer, models=("tiny-model",), port=0, key=None):
        self.answer, self.models, self.down, self.silent, self.key = answer, list(models), False, False, key
        self.requests = []  # (path, Authorization header, body) of every chat completion
        self.lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if fake.down:
                    return self.reset()
                if fake.silent:
                    time.sleep(60)  # (a daemon thread: the test's end stops it)
                    return self.reset()
                if fake.key and self.headers.get("Authorization") != f"Bearer {fake.key}":
                    return self.send_json(401, {"error": {"message": "invalid api key"}})
                if self.path.rstrip("/") != "/v1/models":
                    return self.send_json(404, {"error": {"message": "not found"}})
                self.send_json(200, {"object": "list", "data": [{"id": m, "object": "model", "created": 0,
                                                                 "owned_by": "test"} for m in fake.models]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if fake.down:
                    return self.reset()
                with fake.lock:
                    fake.requests.append((self.path, self.headers.get("Authorization"), body))
                reply = fake.answer(body)
                if isinstance(reply, tuple) and reply[0] == "status":
                    return self.send_json(reply[1], {"error": {"message": f"status {reply[1]}"}}, reply[2])
                if isinstance(reply, tuple) and reply[0] == "malformed":
                    return self.send_raw(200, b'{"choices": [ {"message": ')
                if isinstance(reply, tuple) and reply[0] == "reset":
                    return self.reset()
                if isinstance(reply, tuple) and reply[0] == "slow":
                    time.sleep(reply[1])
                    reply = reply[2]
                message = reply if isinstance(reply, dict) else {"role": "assistant", "content": reply}
                self.send_json(200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                                     "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                     "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}})

            def send_json(self, code, data, headers=None):
                self.send_raw(code, json.dumps(data).encode(), headers)

            def send_raw(self, code, raw, headers=None):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def reset(self):  # RST instead of an answer: a connection the client sees dropped
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
