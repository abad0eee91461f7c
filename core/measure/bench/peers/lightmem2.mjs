// LightMem2's Claude Code adapter, driven by the bench: one JSON line in, one out.
//
// Run under Node >= 24 with tsx's loader (`node --import <tsx>/dist/loader.mjs
// lightmem2.mjs <lightmem2 root>`): the adapter's sources are TypeScript that import
// `./x.js` for `x.ts`. Each request is one Anthropic Messages body as Claude Code sends
// it; the reply is that body after the adapter's before-call reduction, exactly as its
// gateway forwards it (the adapter rewrites the body in place), with its summary.
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import path from "node:path";

const root = process.argv[2];
const adapter = path.join(root, "components", "adapters", "claude-code", "src");
const write = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

let reduction;
let config;
try {
  reduction = await import(pathToFileURL(path.join(adapter, "reduction.ts")).href);
  const configModule = await import(pathToFileURL(path.join(adapter, "config.ts")).href);
  const preset = await import(pathToFileURL(path.join(adapter, "preset.ts")).href);
  preset.initializeClaudeCodeTokenPilotPreset(); // as the adapter's gateway does at start
  // the adapter's defaults (no config file), its state under this process's HOME
  config = configModule.normalizeTokenPilotClaudeCodeConfig({});
  write({ ready: true, config: { modules: config.modules, reduction: config.reduction, stateDir: config.stateDir } });
} catch (err) {
  write({ ready: false, error: String(err && err.stack ? err.stack : err) });
  process.exit(1);
}

for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (!line.trim()) continue;
  try {
    const req = JSON.parse(line);
    const payload = req.payload;
    const summary = await reduction.applyBeforeCallReductionToClaudePayload({
      payload,
      sessionId: req.session,
      config,
    });
    write({ payload, changed: summary.changedBlocks ?? 0, skipped: summary.skippedReason ?? null });
  } catch (err) {
    write({ error: String(err && err.stack ? err.stack : err) });
  }
}
