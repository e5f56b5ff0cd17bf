"""server_harness.py - starts `tessera serve` on a free loopback port for the
server tests (tests/test_server*.py) and the load test (bench/serve_load.py),
and speaks plain HTTP to it with http.client (no third-party client).

    srv = Server(tessera_bin, model_path, ["--parallel", "2"], log_path)
    status, headers, body = srv.request("GET", "/health")
    srv.stop()            # SIGTERM; the exit status must be 0
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time


def need_model(models_dir, name="SmolLM2-135M-Instruct.Q4_1.gguf"):
    path = os.path.join(models_dir, name)
    if not os.path.exists(path):
        print(f"FAIL: {path} is missing: run tools/fetch_models.sh")
        sys.exit(1)
    return path


class Server:
    def __init__(self, binary, model, args=(), log_path="server.log", timeout=120):
        self.log_path = log_path
        self.logf = open(log_path, "wb")
        cmd = [binary, "serve", "-m", model, "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)
        self.host, self.port = "127.0.0.1", None
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            m = re.search(r"listening on http://([0-9.]+):(\d+)/", self.log())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                break
            time.sleep(0.05)
        if not self.port:
            self.kill()
            raise RuntimeError("server did not start listening in time:\n" + self.log())
        while time.time() < deadline:  # and answers /health
            try:
                if self.request("GET", "/health", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError("server does not answer /health:\n" + self.log())

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def conn(self, timeout=120):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def post(self, path, obj, key=None, timeout=120):
        """POST a JSON object (or raw bytes); returns (status, parsed JSON or raw bytes)."""
        body = obj if isinstance(obj, (bytes, bytearray)) else json.dumps(obj).encode()
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = "Bearer " + key
        status, hdrs, data = self.request("POST", path, body, headers, timeout)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data

    def stream(self, path, obj, key=None, timeout=120):
        """POST with stream: true; returns (status, list of parsed events, saw [DONE])."""
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = "Bearer " + key
        c = self.conn(timeout)
        try:
            c.request("POST", path, body=json.dumps(obj).encode(), headers=headers)
            r = c.getresponse()
            raw = r.read().decode("utf-8")
        finally:
            c.close()
        if r.status != 200:
            return r.status, json.loads(raw), False
        events, done = [], False
        for block in raw.split("\n\n"):
            if not block.strip():
                continue
            assert block.startswith("data: "), f"not an SSE data line: {block!r}"
            data = block[6:]
            if data == "[DONE]":
                done = True
                continue
            assert not done, "events after [DONE]"
            events.append(json.loads(data))
        return r.status, events, done

    def get_json(self, path, key=None):
        h = {"Authorization": "Bearer " + key} if key else {}
        status, _, data = self.request("GET", path, headers=h)
        return status, json.loads(data)

    def metrics(self, key=None):
        h = {"Authorization": "Bearer " + key} if key else {}
        status, _, data = self.request("GET", "/metrics", headers=h)
        assert status == 200, status
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return -1

    def stop(self, timeout=60):
        """SIGTERM and wait: returns the exit status (0 after a clean shutdown)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.logf.close()


def chat_text(resp):
    return resp["choices"][0]["message"]["content"]


def stream_text(events, chat=True):
    out = []
    for ev in events:
        for ch in ev.get("choices", []):
            out.append(ch["delta"].get("content", "") if chat else ch["text"])
    return "".join(out)


def stream_finish(events):
    fin = [ch["finish_reason"] for ev in events for ch in ev.get("choices", []) if ch.get("finish_reason")]
    return fin[-1] if fin else None


class Checks:
    """ok:/FAIL: lines and the list of failures, for the server tests."""

    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        print(("ok: " if cond else "FAIL: ") + what)
        if not cond:
            self.failures.append(what)
        return cond

    def run(self, srv, fn, tail=30):
        """fn() with the server; an exception fails; then SIGTERM must exit 0,
        and on failure the server log's tail is printed."""
        try:
            fn()
        except Exception as e:  # keep the log visible
            self.failures.append(repr(e))
            print("FAIL: exception", repr(e))
            raise
        finally:
            rc = srv.stop()
            self(rc == 0, f"server exits 0 on SIGTERM (got {rc})")
            if self.failures:
                print("---- server log (tail) ----")
                print("\n".join(srv.log().splitlines()[-tail:]))

    def exit(self):
        print(f"{len(self.failures)} failure(s)")
        sys.exit(1 if self.failures else 0)


# A JSON schema the constrained-output tests and bench/constrained.py share.
ANIMAL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "legs": {"type": "integer"},
        "habitat": {"enum": ["land", "sea", "air"]},
        "colors": {"type": "array", "items": {"type": "string", "maxLength": 15}, "maxItems": 4},
    },
    "required": ["name", "legs", "habitat"],
    "additionalProperties": False,
}
