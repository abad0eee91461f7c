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
# the extra brings `tokenpilot mcp` too: the MCP SDK's own client recalls what the proxy stored
"$venv/bin/python" - "$venv/bin/tokenpilot" <<'PY'
import asyncio, re, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from tokenpilot.store.artifacts import ArtifactStore, default_store_dir
sid, aid = next((s, a) for s, _ in ArtifactStore(default_store_dir()).sessions() for a in ArtifactStore(default_store_dir()).artifact_ids(s))
async def main():
    async with stdio_client(StdioServerParameters(command=sys.argv[1], args=["mcp"])) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            got = await s.call_tool("recall_artifact", {"artifact_id": aid, "start_line": 1, "end_line": 2})
            print("mcp: tools", [t.name for t in (await s.list_tools()).tools], "| recall:", got.content[0].text[:100].replace("\n", " / "))
            assert not got.isError and "00000 INFO" in got.content[0].text
asyncio.run(main())
PY
rm -rf "$home"
