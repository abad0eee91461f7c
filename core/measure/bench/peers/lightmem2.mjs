// LightMem2's host adapters, driven by the bench: one JSON line in, one out.
//
// Run under Node >= 24 with tsx's loader (`node --import <tsx>/dist/loader.mjs
// lightmem2.mjs <lightmem2 root>`): the adapters' sources are TypeScript that import
// `./x.js` for `x.ts`, and the OpenClaw adapter is CommonJS.
//
// Each request names a host and carries the body that host's agent sends to the
// adapter's local proxy; the reply is the body the proxy would forward upstream:
//   claude   Anthropic Messages body -> the Claude Code gateway's before-call chain
//            (decode, stable prefix, recovery protocol, `applyBeforeCallReductionToClaudePayload`,
//            encode, or the raw body when encoding throws, as `encodeRequestOrBypass` does)
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

async function claudeHost() {
  const src = ["adapters", "claude-code", "src"];
  const reduction = await load(...src, "reduction.ts");
  const configModule = await load(...src, "config.ts");
  const preset = await load(...src, "preset.ts");
  const codecs = await load(...src, "messages-codec.ts");
  const stable = await load(...src, "stable-prefix.ts");
  const pipeline = await load("packages", "foundation", "host-adapter", "src", "pipeline", "before-call-shared.ts");
  const bypass = await load(...src, "context-rewrite", "encode-bypass.ts");
  preset.initializeClaudeCodeTokenPilotPreset(); // as the gateway does at start
  const config = configModule.normalizeTokenPilotClaudeCodeConfig({});
  const codec = codecs.createClaudeMessagesPayloadCodec();
  return {
    config: { modules: config.modules, eviction: config.eviction, reduction: config.reduction },
    async call(req) {
      const rawBody = JSON.stringify(req.payload);
      const envelope = codec.decodeRequest(req.payload, { headers: { "x-session-id": req.session } });
      const prepared = await pipeline.prepareBeforeCallWithReductionSummary({
        envelope,
        codec,
        config: { mode: "normal" },
        prepareStablePrefix: (next) => stable.prepareClaudeStablePrefix(next, config),
        applyBeforeCallReduction: (args) => reduction.reduceClaudeRequestEnvelope({ ...args, config }),
      });
      // the gateway forwards the raw body when encoding throws (a structured `system` whose
      // text changed: its recovery protocol appended to Claude Code's system blocks)
      const encoded = bypass.encodeRequestOrBypass({ codec, envelope: prepared.envelope, rawBody });
      return { payload: encoded.payload, summary: prepared.reductionSummary, bypassed: encoded.bypassed };
    },
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

const makers = { claude: claudeHost, codex: codexHost, openclaw: openclawHost };
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
    const { payload, summary, bypassed } = await host.call(req);
    write({
      payload,
      bypassed: Boolean(bypassed),
      changed: summary?.changedBlocks ?? 0,
      skipped: summary?.skippedReason ?? summary?.diagnostics?.skippedReason ?? null,
    });
  } catch (err) {
    write({ error: String(err && err.stack ? err.stack : err) });
  }
}
