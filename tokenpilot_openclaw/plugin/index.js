// TokenPilot for OpenClaw (dependency-free ESM; OpenClaw never runs `npm install` here).
//
// The work happens in `tokenpilot serve`, the OpenAI-compatible proxy OpenClaw uses as
// its model provider: it keeps the prompt prefix byte-stable and shrinks big tool
// outputs, keeping every original. This plugin adds what only OpenClaw can do:
//   - the `recall_artifact` tool, which fetches an original from the proxy, scoped to
//     the current session;
//   - a context engine that passes OpenClaw's messages through unchanged (so OpenClaw
//     does not rewrite history behind the proxy's back) and leaves compaction to
//     OpenClaw's runtime.
// Every path returns its input unchanged, or a readable message, on any error.

import { readFileSync } from "node:fs";

const PLUGIN_ID = "tokenpilot";
const DEFAULT_PROXY_URL = "http://127.0.0.1:8787";
const DEFAULT_TIMEOUT_MS = 15000;
const MAX_COMMITTED_KEYS = 4096;

// The tool's definition is tokenpilot.stabilize.RECALL_TOOL["function"], written to
// recall_tool.json next to this file (a test keeps them identical): the proxy registers
// the same schema when OpenClaw does not, so the cached tool list never changes.
const RECALL_TOOL = JSON.parse(readFileSync(new URL("./recall_tool.json", import.meta.url), "utf8"));

function settingsOf(api) {
  const cfg = (api && api.pluginConfig) || {};
  const proxyUrl = typeof cfg.proxyUrl === "string" && cfg.proxyUrl ? cfg.proxyUrl : DEFAULT_PROXY_URL;
  return {
    proxyUrl: proxyUrl.replace(/\/+$/, "").replace(/\/v1$/, ""),
    authToken: typeof cfg.authToken === "string" && cfg.authToken ? cfg.authToken : undefined,
    timeoutMs: Number.isInteger(cfg.timeoutMs) && cfg.timeoutMs > 0 ? cfg.timeoutMs : DEFAULT_TIMEOUT_MS,
  };
}

function textResult(text, details) {
  return { content: [{ type: "text", text }], details: details || {} };
}

function warn(api, message) {
  try {
    api?.logger?.warn?.(`[tokenpilot] ${message}`);
  } catch {
    // logging must never break a tool call
  }
}

// -- recall_artifact -------------------------------------------------------------
// A query value in UTF-8 percent-encoding, a lone surrogate as its surrogate-pass bytes
// (U+D800 -> %ED%A0%80), which the proxy reads back as that surrogate. URLSearchParams
// writes U+FFFD instead, and encodeURIComponent throws: either would lose the session.
export function encodeQueryValue(text) {
  let out = "";
  for (const ch of String(text)) {
    const cp = ch.codePointAt(0);
    if (cp >= 0xd800 && cp <= 0xdfff) {
      out += [0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)]
        .map((b) => `%${b.toString(16).toUpperCase()}`)
        .join("");
    } else {
      out += encodeURIComponent(ch);
    }
  }
  return out;
}

export function artifactUrl(settings, sessionId, params) {
  const id = String(params?.artifact_id ?? "").trim();
  const url = new URL(`${settings.proxyUrl}/tokenpilot/artifacts/${encodeURIComponent(id)}`);
  const rest = new URLSearchParams();
  for (const name of ["start_line", "end_line"]) {
    if (Number.isInteger(params?.[name])) rest.set(name, String(params[name]));
  }
  if (typeof params?.pattern === "string" && params.pattern) rest.set("pattern", params.pattern);
  const more = rest.toString();
  url.search = `session=${encodeQueryValue(sessionId)}${more ? `&${more}` : ""}`;
  return url;
}

async function recall(api, settings, sessionId, params, signal) {
  if (!sessionId) {
    return textResult("[tokenpilot: OpenClaw gave this tool no session id, so the artifact cannot be looked up.]", {
      found: false,
    });
  }
  let url;
  try {
    url = artifactUrl(settings, sessionId, params);
  } catch (err) {
    return textResult(`[tokenpilot: invalid proxy URL ${settings.proxyUrl}: ${err?.message ?? err}]`, { found: false });
  }
  // the agent's own recall: counted in the proxy's stats (a curl of the same URL is not)
  const headers = { Accept: "application/json", "X-TokenPilot-Recall": "agent" };
  if (settings.authToken) headers.Authorization = `Bearer ${settings.authToken}`;
  const signals = [AbortSignal.timeout(settings.timeoutMs)];
  if (signal) signals.push(signal);
  try {
    const res = await fetch(url, { headers, signal: AbortSignal.any(signals) });
    const body = await res.json().catch(() => null);
    if (body && typeof body.content === "string") {
      return textResult(body.content, {
        found: body.found === true,
        artifactId: body.artifact_id,
        totalLines: body.total_lines,
      });
    }
    const reason = body?.error?.message ?? res.statusText;
    return textResult(`[tokenpilot: the proxy answered HTTP ${res.status}: ${reason}]`, { found: false });
  } catch (err) {
    warn(api, `recall_artifact failed: ${err?.message ?? err}`);
    return textResult(`[tokenpilot: cannot reach the TokenPilot proxy at ${settings.proxyUrl}: ${err?.message ?? err}]`, {
      found: false,
    });
  }
}

function recallTool(api, settings, ctx) {
  const sessionId = ctx?.sessionId || undefined;
  return {
    name: RECALL_TOOL.name,
    label: "Recall artifact",
    description: RECALL_TOOL.description,
    parameters: RECALL_TOOL.parameters,
    // Tool Search (on by default in 2026.9) would hide the tool from the request;
    // it must stay listed, byte-identical, from the first call.
    catalogMode: "direct-only",
    async execute(_toolCallId, params, signal) {
      return recall(api, settings, sessionId, params, signal);
    },
  };
}

// -- tool results, before OpenClaw cuts them ------------------------------------------
// OpenClaw hands a middleware at most this many chars per text block (it cuts, with no
// marker) and refuses a result with a longer block.
export const MIDDLEWARE_TEXT_CAP = 100000;
// Smaller outputs stay as they are: OpenClaw does not cut them, and the proxy would not.
export const SEND_OVER_CHARS = 2000;

export async function reduceToolResult(api, settings, event, ctx) {
  if (!event || event.toolName === RECALL_TOOL.name) return undefined; // recalled text reaches the model as is
  const blocks = event.result?.content;
  if (!Array.isArray(blocks) || blocks.length === 0) return undefined;
  if (!blocks.every((b) => b?.type === "text" && typeof b.text === "string")) return undefined; // images: the proxy
  const sessionId = ctx?.sessionId;
  if (!sessionId) return undefined;
  const text = blocks.length === 1 ? blocks[0].text : blocks.map((b) => b.text).join("\n");
  if (text.length <= SEND_OVER_CHARS) return undefined;
  const details = event.result.details;
  const cutByOpenClaw = text.length >= MIDDLEWARE_TEXT_CAP || details?.truncated === true;
  const headers = { "Content-Type": "application/json", Accept: "application/json" };
  if (settings.authToken) headers.Authorization = `Bearer ${settings.authToken}`;
  const res = await fetch(`${settings.proxyUrl}/tokenpilot/tool-result`, {
    method: "POST",
    headers,
    body: JSON.stringify({ session: sessionId, tool: event.toolName ?? "", arguments: event.args ?? {}, text }),
    signal: AbortSignal.timeout(settings.timeoutMs),
  });
  const body = await res.json().catch(() => null);
  if (!res.ok) {
    warn(api, `the proxy did not reduce a ${event.toolName} output: HTTP ${res.status} ${body?.error?.message ?? ""}`);
    return undefined;
  }
  if (!body?.reduced || typeof body.content !== "string") return undefined;
  let content = body.content;
  if (cutByOpenClaw) {
    content += `\n[tokenpilot: OpenClaw passed on only the first ${MIDDLEWARE_TEXT_CAP.toLocaleString("en-US")} chars of this output; the rest was not kept]`;
  }
  if (content.length > MIDDLEWARE_TEXT_CAP) return undefined;
  const kept = details && typeof details === "object" && !Array.isArray(details) ? { ...details } : {};
  delete kept.aggregated; // exec repeats its whole output there
  return {
    result: {
      content: [{ type: "text", text: content }],
      details: { ...kept, tokenpilot: { artifactId: body.artifact_id, originalChars: text.length, cutByOpenClaw } },
    },
  };
}

function registerToolResultMiddleware(api, settings) {
  if (typeof api.registerAgentToolResultMiddleware !== "function") return; // an OpenClaw without it
  try {
    api.registerAgentToolResultMiddleware(
      async (event, ctx) => {
        try {
          return await reduceToolResult(api, settings, event, ctx);
        } catch (err) {
          warn(api, `tool-result middleware: ${err?.message ?? err}; OpenClaw keeps the output its own way`);
          return undefined;
        }
      },
      { runtimes: ["openclaw"] },
    );
  } catch (err) {
    warn(api, `cannot register the tool-result middleware: ${err?.message ?? err}`);
  }
}

// -- context engine ----------------------------------------------------------------
function estimateTokens(messages) {
  try {
    return Math.ceil(JSON.stringify(messages).length / 4);
  } catch {
    return 0;
  }
}

let sdkCore;
async function loadSdkCore() {
  if (sdkCore === undefined) {
    sdkCore = await import("openclaw/plugin-sdk/core").catch(() => null);
  }
  return sdkCore;
}

export function createEngine(api) {
  const committed = new Set();
  return {
    info: {
      id: PLUGIN_ID,
      name: "TokenPilot (pass-through; the proxy manages context)",
      version: "0.1.0",
      ownsCompaction: false,
      transcriptSemantics: {
        currentTurnFence: "before-current-turn-entry-v1",
        turnAdvancementIdempotency: "atomic-idempotent-v1",
      },
    },
    async ingest() {
      return { ingested: false };
    },
    async assemble(params) {
      const messages = Array.isArray(params?.messages) ? params.messages : [];
      return { messages, estimatedTokens: estimateTokens(messages) };
    },
    async commitTurn(params) {
      const key = String(params?.advancementKey ?? "");
      if (key && committed.has(key)) return { status: "duplicate" };
      committed.add(key);
      if (committed.size > MAX_COMMITTED_KEYS) committed.delete(committed.values().next().value);
      return { status: "committed" };
    },
    async afterTurn() {},
    async compact(params) {
      try {
        const core = await loadSdkCore();
        if (typeof core?.delegateCompactionToRuntime === "function") {
          return await core.delegateCompactionToRuntime(params);
        }
        warn(api, "openclaw/plugin-sdk/core is not importable; compaction skipped");
        return { ok: false, compacted: false, reason: "tokenpilot: runtime compaction unavailable to the plugin" };
      } catch (err) {
        warn(api, `runtime compaction failed: ${err?.message ?? err}`);
        return { ok: false, compacted: false, reason: `tokenpilot: runtime compaction failed: ${err?.message ?? err}` };
      }
    },
  };
}

// -- entry -------------------------------------------------------------------------
export default function register(api) {
  const settings = settingsOf(api);
  registerToolResultMiddleware(api, settings);
  api.registerTool((ctx) => recallTool(api, settings, ctx), { name: RECALL_TOOL.name });
  api.registerContextEngine(PLUGIN_ID, () => createEngine(api));
}
