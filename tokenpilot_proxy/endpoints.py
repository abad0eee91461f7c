"""The proxy's endpoints beside the model APIs: models, health, stats, artifacts, tool results.

`/tokenpilot/artifacts/{id}` serves OpenClaw's `recall_artifact` tool the original behind
a reduced output, and `/tokenpilot/tool-result` reduces a tool output before the host
keeps it (the plugin's middleware); both for the session that owns it only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any

import aiohttp
from aiohttp import web

from tokenpilot_proxy import wire
from tokenpilot_proxy.errors import busy_error, foreign_derived, json_error
from tokenpilot_proxy.memtrim import read_body
from tokenpilot_proxy.pools import PoolBusy
from tokenpilot_proxy.request_path import RequestPath
from tokenpilot_proxy.sessions import COUNTERS, NOT_TOTALS, SessionStats, query_session, summarize
from tokenpilot_proxy.upstream import UpstreamTimeout, UpstreamUnreachable, response_headers

log = logging.getLogger("tokenpilot.openclaw")


def add_routes(app: web.Application, path: RequestPath, started: float) -> None:
    e = Endpoints(path, started)
    app.router.add_get("/v1/models", e.models)
    app.router.add_get("/health", e.health)
    app.router.add_get("/tokenpilot/stats", e.stats_view)
    app.router.add_get("/tokenpilot/artifacts/{artifact_id}", e.artifact)
    app.router.add_post("/tokenpilot/tool-result", e.tool_result)


# The header the OpenClaw plugin's `recall_artifact` sends: only such a GET counts as a recall
# in the stats and the dashboard; a person or a script reading an original (curl) does not.
AGENT_RECALL_HEADER = "X-TokenPilot-Recall"


class Endpoints:
    """The handlers; `started` is when the proxy started (for `uptime_s`)."""

    def __init__(self, path: RequestPath, started: float) -> None:
        self.path = path
        self.keeper = path.keeper
        self.started = started

    async def models(self, request: web.Request) -> web.Response:
        if self.path.settings.models:
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "tokenpilot"}
                for m in self.path.settings.models
            ]
            return web.json_response({"object": "list", "data": data})
        headers = self.path.upstream.headers(
            request.headers, forward_authorization=self.path.auth_token is None
        )
        try:
            resp = await self.path.upstream.request("GET", "/models", headers=headers)
            try:
                payload = await resp.read()
            finally:
                resp.release()
        except (UpstreamTimeout, asyncio.TimeoutError) as exc:
            return json_error(
                504, str(exc) or "upstream timed out", type_="upstream_timeout", code="upstream_timeout"
            )
        except (UpstreamUnreachable, aiohttp.ClientError) as exc:
            return json_error(502, str(exc), type_="upstream_error", code="upstream_unreachable")
        return web.Response(status=resp.status, body=payload, headers=response_headers(resp))

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "sessions": len(self.keeper.stats),
                "in_memory": len(self.keeper.pilot.session_ids),  # the rest wait in the state store
                "uptime_s": round(time.time() - self.started, 1),
                "pid": os.getpid(),  # which worker of `serve --workers` answered
            }
        )

    async def stats_view(self, request: web.Request) -> web.Response:
        """Usage totals and a summary; the per-session stats, keyed by session id, only
        behind `--auth-token-env` or with `--list-sessions`: a session's id is all a recall
        needs, so listing ids to any local caller would hand out every session's originals."""
        fleet = await asyncio.to_thread(self.keeper.fleet_stats)
        # the time series stays out (the dashboard draws it): 120 points a session would weigh here
        sessions = {
            sid: {k: v for k, v in st.to_dict().items() if k != "series"} for sid, st in sorted(fleet.items())
        }
        totals = SessionStats()
        for st in fleet.values():
            for name in (*COUNTERS, "prefix_breaks"):
                setattr(totals, name, getattr(totals, name) + getattr(st, name))
        tot = {k: v for k, v in totals.to_dict().items() if not k.startswith("last_") and k not in NOT_TOTALS}
        listed = self.path.auth_token is not None or self.path.settings.list_sessions
        body: dict[str, Any] = {"summary": summarize(sessions), "totals": tot, "sessions_listed": listed}
        if listed:
            body["sessions"] = sessions
        return web.json_response({**body, "uptime_s": round(time.time() - self.started, 1)})

    async def artifact(self, request: web.Request) -> web.Response:
        """The original behind an artifact id, for the session that owns it only."""
        q = request.query
        session = query_session(request.rel_url.raw_query_string)
        session = (q.get("session", "") if session is None else session).strip()
        if not session:
            return json_error(
                400,
                "the 'session' query parameter is required",
                type_="invalid_request_error",
                param="session",
            )
        lines: dict[str, int | None] = {}
        for name in ("start_line", "end_line"):
            value = q.get(name)
            try:
                lines[name] = int(value) if value not in (None, "") else None
            except ValueError:
                return json_error(
                    400,
                    f"'{name}' must be an integer, got {value!r}",
                    type_="invalid_request_error",
                    param=name,
                )
        pattern = q.get("pattern") or None
        sid = self.keeper.recall_session(session, by_id=True)
        if (refused := foreign_derived(sid, request.headers)) is not None:
            return refused
        aid = request.match_info["artifact_id"]
        try:
            result = await self.path.pools.recall.run(
                lambda: self.keeper.in_session(
                    sid,
                    lambda: self.keeper.pilot.recall(
                        aid, lines["start_line"], lines["end_line"], pattern, session_id=sid
                    ),
                )
            )
        except PoolBusy as exc:  # every recall worker busy, the queue full: come back later
            return busy_error(exc)
        except OSError as exc:  # the store (Redis) is down: say so, the agent may retry
            self.path.metrics.store_error("artifact_read")
            log.error("tokenpilot: session %s: could not read artifact %s: %s", sid, aid[:40], exc)
            return json_error(503, f"the artifact store cannot be read: {exc}", type_="server_error",
                              code="store_unavailable")  # fmt: skip
        body = {
            "artifact_id": result.artifact_id,
            "session": sid,
            "found": result.found,
            "text": result.text,
            "note": result.note,
            "total_lines": result.total_lines,
            "content": result.for_model(),
        }
        if not result.found:
            body["error"] = {"message": result.note, "type": "not_found", "code": "artifact_not_found"}
            return web.json_response(body, status=404)
        if request.headers.get(AGENT_RECALL_HEADER, "").lower() == "agent":
            self.keeper.note_recall(sid)  # the agent's own recall (the OpenClaw plugin says so), not a look
        return web.json_response(body)

    async def tool_result(self, request: web.Request) -> web.Response:
        """Reduce a tool output before the host keeps it (the plugin's tool-result middleware).

        Body: `{"session": <OpenClaw sessionId>, "tool": name, "arguments": object or str,
        "text": the whole output}`. Answers `{"reduced", "content", "artifact_id"}`; the host
        stores `content` in place of the output, so its replays never differ from the live
        call, and the original it had not cut yet is what `recall_artifact` returns.
        """
        try:
            body = wire.parse_body(
                await read_body(
                    request, self.path.settings.max_body_bytes, self.path.settings.client_timeout_s
                )
            )
        except wire.BadRequest as exc:
            return json_error(400, str(exc), type_="invalid_request_error", code=exc.code)
        if not isinstance(body, dict):
            return json_error(400, "the body must be a JSON object", type_="invalid_request_error")
        session, text, tool = body.get("session"), body.get("text"), body.get("tool", "")
        for name, value in (("session", session), ("text", text), ("tool", tool)):
            if not isinstance(value, str) or (name == "session" and not value.strip()):
                return json_error(
                    400, f"'{name}' must be a non-empty string" if name == "session" else f"'{name}' must be a string",
                    type_="invalid_request_error", param=name,
                )  # fmt: skip
        args = body.get("arguments")
        arguments = (
            args if isinstance(args, str) else json.dumps(args if args is not None else {}, sort_keys=True)
        )
        sid = self.keeper.recall_session(session)
        if (refused := foreign_derived(sid, request.headers)) is not None:
            return refused
        try:
            got = await self.path.pools.prepare(
                lambda: self.keeper.in_session(
                    sid, lambda: self.keeper.pilot.reduce_tool_output(text, tool, arguments, session_id=sid)
                )
            )
        except OSError as exc:  # a full disk: the host keeps its own handling of the output
            log.error("tokenpilot: session %s: could not store a tool output: %s", sid, exc)
            return json_error(503, f"the artifact store cannot keep the output: {exc}", type_="server_error",
                              code="store_unavailable")  # fmt: skip
        self.keeper.dirty.add(sid)
        return web.json_response(
            {
                "session": sid,
                "reduced": got.artifact_id is not None,
                "content": got.text,
                "artifact_id": got.artifact_id,
            }
        )
