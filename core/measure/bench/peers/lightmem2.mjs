// LightMem2's host adapters, driven by the bench: one JSON line in, one out.
//
// Run under Node >= 24 with tsx's loader (`node --import <tsx>/dist/loader.mjs
// lightmem2.mjs <lightmem2 root>`): the adapters' sources are TypeScript that import
// `./x.js` for `x.ts`, and the OpenClaw adapter is CommonJS.
//
// Each request names a host and carries the body that host's agent sends to the
// adapter's local proxy; the reply is the body the proxy would forward upstream:
//   claude   Anthropic Messages body -> the Claude Code gateway itself, on a local port, its
//            upstream replaced (see claudeHost): lifecycle planner, eviction (off by default;
//            `claude_evict` turns it on), stable prefix, recovery protocol,
//            `applyBeforeCallReductionToClaudePayload`, encode or bypass
//   codex    Responses body -> the Codex proxy's before-call chain
//            (decode, stable prefix, recovery protocol, `applyBeforeCallReductionToPayload`, sync)
//   openclaw Responses body -> the OpenClaw plugin proxy's `prepareProxyRequest`
//            (stabiliser, procedural memory, `applyProxyReductionToInput`)
// and `{op: "persist"}` runs the OpenClaw plugin's `tool_result_persist` hook on one
// tool result as it enters the transcript. Every config is the adapter's install
// default ("normal" mode); state and archives live under this process's HOME.
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { homedir } from "node:os";
import { createServer } from "node:net";
import path from "node:path";

const root = process.argv[2];
const components = path.join(root, "components");
const write = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const load = (...parts) => import(pathToFileURL(path.join(components, ...parts)).href);
const quiet = { info() {}, warn() {}, error() {}, debug() {} };

// the OpenClaw installer's "normal" mode (scripts/install_release.sh, MODE_PRESETS.normal)
const OPENCLAW_NORMAL = {
  enabled: true,
  proxyMode: { pureForward: false },
  hooks: { beforeToolCall: true, toolResultPersist: false, dynamicContextTarget: "developer" },
  modules: { stabilizer: true, policy: true, reduction: true, eviction: false },
  eviction: { enabled: false },
  reduction: {
    engine: "layered",
    triggerMinChars: 2200,
    maxToolChars: 1200,
    passes: {
      readStateCompaction: true,
      toolPayloadTrim: true,
      htmlSlimming: true,
      execOutputTruncation: true,
      agentsStartupOptimization: true,
    },
    passOptions: {
      formatSlimming: { enabled: true },
      formatCleaning: { enabled: true },
      pathTruncation: { enabled: true },
      imageDownsample: { enabled: true },
      lineNumberStrip: { enabled: true },
    },
  },
  taskStateEstimator: { enabled: false },
};

// a free local port for a gateway (it listens on the port its config names)
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// Claude Code's own gateway (`startClaudeCodeGatewayRuntime`), the whole request path,
// on a local port; its forwarder is replaced by one that keeps the body it would send
// upstream and answers with a short canned message. `evict`: its eviction switches on
// (`modules.eviction`, `eviction.enabled`: off in its install default); with no estimator
// configured it plans by its heuristic (tool results over `eviction.minBlockChars`).
async function claudeHost(evict) {
  const src = ["adapters", "claude-code", "src"];
  const configModule = await load(...src, "config.ts");
  const gateway = await load(...src, "gateway-runtime.ts");
  const port = await freePort();
  const raw = { proxyPort: port, stateDir: path.join(homedir(), ".claude", evict ? "tokenpilot-evict" : "tokenpilot") };
  if (evict) Object.assign(raw, { modules: { eviction: true }, eviction: { enabled: true } });
  const config = configModule.normalizeTokenPilotClaudeCodeConfig(raw);
  let forwarded = null;
  const answer = (model) => JSON.stringify({
    id: "msg_bench", type: "message", role: "assistant", model,
    content: [{ type: "text", text: "ok" }], stop_reason: "end_turn", stop_sequence: null,
    usage: { input_tokens: 1, output_tokens: 1 },
  });
  const forwarder = {
    async request({ payload }) {
      forwarded = payload;
      return { status: 200, headers: { "content-type": "application/json" }, text: answer(payload?.model ?? "") };
    },
    async requestStream() {
      throw new Error("the bench sends no streaming requests");
    },
  };
  const runtime = await gateway.startClaudeCodeGatewayRuntime({ config, logger: quiet, forwarder });
  return {
    config: { modules: config.modules, eviction: config.eviction, reduction: config.reduction },
    async call(req) {
      forwarded = null;
      const res = await fetch(`http://127.0.0.1:${port}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-session-id": req.session },
        body: JSON.stringify(req.payload),
      });
      const text = await res.text();
      if (res.status !== 200 || forwarded === null) throw new Error(`gateway answered ${res.status}: ${text.slice(0, 500)}`);
      const same = JSON.stringify(forwarded) === JSON.stringify(req.payload);
      return { payload: forwarded, summary: { changedBlocks: same ? 0 : 1 } };
    },
    close: () => runtime.close(),
  };
}

async function codexHost() {
  const src = ["adapters", "codex", "src"];
  const reduction = await load(...src, "reduction.ts");
  const configModule = await load(...src, "config.ts");
  const preset = await load(...src, "preset.ts");
  const codecs = await load(...src, "responses-codec.ts");
  const stable = await load(...src, "stable-prefix.ts");
  const pipeline = await load("packages", "foundation", "host-adapter", "src", "pipeline", "before-call-shared.ts");
  preset.initializeCodexTokenPilotPreset();
  const config = configModule.normalizeTokenPilotCodexConfig({});
  return {
    config: { modules: config.modules, contextRewrite: { enabled: config.contextRewrite.enabled }, reduction: config.reduction },
    async call(req) {
      // the proxy maps a known thread to its session (by previous_response_id or prompt_cache_key)
      const codec = codecs.createCodexResponsesPayloadCodec(
        codecs.createCodexSessionResolver({ mappedPreviousSessionId: req.session }),
      );
      const payload = req.payload;
      reduction.normalizeResponsesInputForUpstream(payload.input);
      const envelope = codec.decodeRequest(payload);
      const prepared = await pipeline.prepareBeforeCallWithReductionSummary({
        envelope,
        codec,
        config: { mode: "normal" },
        prepareStablePrefix: (next) => stable.prepareCodexStablePrefix(next, config),
        applyBeforeCallReduction: (args) => reduction.reduceCodexRequestEnvelope({ ...args, config }),
      });
      codecs.syncPayloadFromEnvelope(payload, prepared.envelope, codec);
      reduction.normalizeResponsesInputForUpstream(payload.input);
      return { payload, summary: prepared.reductionSummary };
    },
  };
}

async function openclawHost() {
  const src = ["adapters", "openclaw", "src"];
  const support = await load(...src, "plugin-test-support.ts");
  const preset = await load(...src, "preset.ts");
  const persist = await load(...src, "context-stack", "request-preprocessing", "tool-results-persist.ts");
  const tooling = await load(...src, "context-stack", "integration", "runtime-tooling.ts");
  const eventText = await load(...src, "context-stack", "integration", "runtime-event-text.ts");
  const configTypes = await load(...src, "context-stack", "integration", "config-types.ts");
  const artifacts = await load("packages", "foundation", "artifact-store", "src", "index.ts");
  const hostAdapter = await load(...src, "context-stack", "integration", "host-adapter.ts");
  const hooks = support.__testHooks ?? support.default?.__testHooks;
  const helpers = support.proxyRuntimeHelpers ?? support.default?.proxyRuntimeHelpers;
  (preset.initializeOpenClawTokenPilotPreset ?? preset.default.initializeOpenClawTokenPilotPreset)();
  (artifacts.configureStatePathResolver)(
    (hostAdapter.createOpenClawStatePathResolver ?? hostAdapter.default.createOpenClawStatePathResolver)(),
  );
  const stateDir = path.join(homedir(), ".openclaw", "tokenpilot-plugin-state");
  const cfg = hooks.normalizeConfig({ ...OPENCLAW_NORMAL, stateDir });
  const upstream = { providerId: "openai", baseUrl: "http://127.0.0.1:9/v1", apiKey: "", apiFamily: "openai-responses", models: [] };
  const policyModule = helpers.createPolicyModule(helpers.buildPolicyModuleConfigFromPluginConfig(cfg, upstream));
  const pick = (mod, name) => mod[name] ?? mod.default?.[name];
  const persistHelpers = {
    appendTaskStateTrace: helpers.appendTaskStateTrace,
    ensureContextSafeDetails: pick(tooling, "ensureContextSafeDetails"),
    extractOpenClawSessionId: pick(eventText, "extractOpenClawSessionId"),
    extractToolMessageText: pick(tooling, "extractToolMessageText"),
    isToolResultLikeMessage: pick(tooling, "isToolResultLikeMessage"),
    safeId: pick(configTypes, "safeId"),
  };
  return {
    config: { moduleEnablement: cfg.moduleEnablement, hooks: cfg.hooks, reduction: { triggerMinChars: cfg.reduction.triggerMinChars, maxToolChars: cfg.reduction.maxToolChars, passes: cfg.reduction.passes } },
    async call(req) {
      const prepared = await hooks.prepareProxyRequest({
        cfg,
        logger: quiet,
        helpers,
        payload: req.payload,
        upstream,
        resolveSessionIdForPayload: () => req.session,
        policyModule,
        reductionPassOptions: cfg.reduction.passOptions ?? {},
        dynamicContextTarget: cfg.hooks.dynamicContextTarget === "user" ? "user" : "developer",
      });
      return { payload: prepared.payload, summary: prepared.reductionApplied };
    },
    persist(req) {
      // the plugin's tool_result_persist hook, as OpenClaw fires it when a result enters the transcript
      const event = { message: req.message, toolName: req.toolName, toolCallId: req.toolCallId, sessionId: req.session };
      const out = pick(persist, "applyToolResultPersistPolicy")(event, cfg, quiet, persistHelpers);
      return { message: out?.message ?? req.message };
    },
  };
}

const makers = { claude: () => claudeHost(false), claude_evict: () => claudeHost(true), codex: codexHost, openclaw: openclawHost };
const hosts = {};
let hello;
try {
  for (const name of (process.argv[3] ?? "claude,codex,openclaw").split(",")) hosts[name] = await makers[name]();
  hello = Object.fromEntries(Object.entries(hosts).map(([k, v]) => [k, v.config]));
  write({ ready: true, config: hello });
} catch (err) {
  write({ ready: false, error: String(err && err.stack ? err.stack : err) });
  process.exit(1);
}

for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (!line.trim()) continue;
  try {
    const req = JSON.parse(line);
    const host = hosts[req.host];
    if (!host) throw new Error(`unknown host ${req.host}`);
    if (req.op === "persist") {
      write(host.persist(req));
      continue;
    }
    const { payload, summary } = await host.call(req);
    write({
      payload,
      changed: summary?.changedBlocks ?? 0,
      skipped: summary?.skippedReason ?? summary?.diagnostics?.skippedReason ?? null,
    });
  } catch (err) {
    write({ error: String(err && err.stack ? err.stack : err) });
  }
}
for (const host of Object.values(hosts)) await host.close?.();
process.exit(0); // a gateway's server would keep the loop alive
