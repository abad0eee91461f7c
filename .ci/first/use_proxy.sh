#!/usr/bin/env bash
# tokenpilot[proxy]'s first use, the demo mode: the proxy in front of its built-in upstream
# (no provider, no key), one request with a large tool output through it, then SIGTERM.
set -euo pipefail
venv=$1
home=$(mktemp -d)
export HOME=$home
port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$venv/bin/tokenpilot" serve --demo --port "$port" >"$home/serve.log" 2>&1 &
pid=$!
"$venv/bin/python" - "$port" <<'PY'
import json, sys, time, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
for _ in range(100):
    try:
        urllib.request.urlopen(base + "/health", timeout=2)
        break
    except OSError:
        time.sleep(0.2)
else:
    sys.exit(f"no answer from {base}/health")
log = "\n".join(f"{i:05d} INFO processed batch {i} status=ok" for i in range(3000))
body = {"model": "demo", "messages": [
    {"role": "user", "content": "look at the log"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": log}]}
req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
reply = json.load(urllib.request.urlopen(req, timeout=30))
print("demo: prompt tokens after TokenPilot:", reply["usage"]["prompt_tokens"], "| the model:", json.dumps(reply["choices"][0]["message"])[:160])
assert reply["usage"]["prompt_tokens"] < 2000, reply["usage"]
PY
kill -TERM "$pid"
wait "$pid"
tail -n 3 "$home/serve.log"
rm -rf "$home"
