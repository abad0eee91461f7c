// OpenClaw's own contextPruning (mode "cache-ttl"), run from its installed dist for the bench.
//
// Usage: node openclaw_pruning.mjs OPENCLAW_PACKAGE_DIR
// The dist's chunk file names are hashed and its chunks export minified aliases, so the
// functions are found by their source names in the `export { name as alias }` lists.
// First line out: {"ready": true, "version", "modules"} or {"error"}. Then one JSON line in,
// one out: {"session", "messages", "now", "lastCacheTouchAt", "contextWindowTokens",
// "config"} -> {"messages", "changed", "pruned"}; {"close": session} -> {"closed": session}.

import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

// source name -> the chunk-name prefix to scan first (the whole dist is the fallback)
const WANTED = {
  pruneExpiredCacheTtlToolResults: "tool-result-truncation-",
  resolveCacheTtlPruningSettings: "tool-result-truncation-",
  createToolResultPromptProjectionState: "session-prompt-state-",
};

function exportAlias(text, name) {
  for (const block of text.matchAll(/export\s*\{([^}]*)\}/g)) {
    for (const item of block[1].split(",")) {
      const [local, alias] = item.trim().split(/\s+as\s+/);
      if (local === name) return alias ?? local;
    }
  }
  return undefined;
}

async function resolveFunction(dist, files, name, prefix) {
  const ordered = [...files.filter((f) => f.startsWith(prefix)), ...files.filter((f) => !f.startsWith(prefix))];
  for (const file of ordered) {
    const text = readFileSync(join(dist, file), "utf8");
    if (!text.includes(name)) continue;
    const alias = exportAlias(text, name);
    if (alias === undefined) continue;
    const mod = await import(pathToFileURL(join(dist, file)).href);
    if (typeof mod[alias] === "function") return { fn: mod[alias], file };
  }
  throw new Error(
    `no module of ${dist} exports a function named ${name}: OpenClaw's layout changed ` +
      `(this driver knows the 2026.9 dist)`,
  );
}

async function load(pkgDir) {
  const dist = join(pkgDir, "dist");
  const version = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")).version;
  const files = readdirSync(dist).filter((f) => f.endsWith(".mjs")).sort();
  const found = {};
  for (const [name, prefix] of Object.entries(WANTED)) found[name] = await resolveFunction(dist, files, name, prefix);
  return { version, found };
}

function write(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

const pkgDir = process.argv[2];
let api;
try {
  if (!pkgDir) throw new Error("usage: node openclaw_pruning.mjs OPENCLAW_PACKAGE_DIR");
  api = await load(pkgDir);
} catch (err) {
  write({ error: String(err?.message ?? err) });
  process.exit(2);
}
const prune = api.found.pruneExpiredCacheTtlToolResults.fn;
const resolveSettings = api.found.resolveCacheTtlPruningSettings.fn;
const createState = api.found.createToolResultPromptProjectionState.fn;
write({
  ready: true,
  version: api.version,
  modules: Object.fromEntries(Object.entries(api.found).map(([k, v]) => [k, v.file])),
});

// per session, what OpenClaw keeps across calls: the tool-result projection state
const states = new Map();
const settingsByConfig = new Map();

function handle(req) {
  if (req.close !== undefined) {
    states.delete(req.close);
    return { closed: req.close };
  }
  const key = JSON.stringify(req.config);
  let settings = settingsByConfig.get(key);
  if (settings === undefined) {
    settings = resolveSettings(req.config);
    if (!settings) throw new Error(`contextPruning config ${key} does not enable mode "cache-ttl"`);
    settingsByConfig.set(key, settings);
  }
  let state = states.get(req.session);
  if (state === undefined) states.set(req.session, (state = createState()));
  let pruned = false;
  const out = prune({
    messages: req.messages,
    settings,
    contextWindowTokens: req.contextWindowTokens,
    lastCacheTouchAt: req.lastCacheTouchAt,
    dropThinkingBlocksForEstimate: false,
    now: req.now,
    projectionState: state,
    pruneNewRounds: true, // false only when the provider clears tool results server-side
    onPruned: () => {
      pruned = true;
    },
  });
  const changed = [];
  out.forEach((m, i) => {
    if (m !== req.messages[i]) changed.push(i);
  });
  return { messages: out, changed, pruned };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  try {
    write(handle(JSON.parse(line)));
  } catch (err) {
    write({ error: String(err?.stack ?? err) });
  }
}
