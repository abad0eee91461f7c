#!/usr/bin/env bash
# tokenpilot[openclaw]'s first use: the README's install line (printed, not written), then the
# proxy itself: start it, ask /health, stop it with SIGTERM as OpenClaw does.
set -euo pipefail
venv=$1
home=$(mktemp -d)
export HOME=$home
"$venv/bin/tokenpilot" openclaw install --upstream https://api.openai.com/v1 --model gpt-5.4-mini --print \
  >"$home/install.json5"
grep -q '"tokenpilot"' "$home/install.json5"
port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$venv/bin/tokenpilot" serve --upstream http://127.0.0.1:9/v1 --port "$port" --no-state >"$home/serve.log" 2>&1 &
pid=$!
"$venv/bin/python" - "$port" <<'PY'
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/health"
for _ in range(100):
    try:
        print(urllib.request.urlopen(url, timeout=2).read().decode())
        break
    except OSError:
        time.sleep(0.2)
else:
    sys.exit(f"no answer from {url}")
PY
kill -TERM "$pid"
wait "$pid"
cat "$home/serve.log"
rm -rf "$home"
