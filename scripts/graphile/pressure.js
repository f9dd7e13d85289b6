#!/usr/bin/env node
// Graphile Worker as the peer in `skiplock-devtools bench --pressure`: a worker that runs no-op jobs
// while the benchmark enqueues them at a fixed rate and pins the vacuum horizon.
//
//   DATABASE_URL=postgres://... node scripts/graphile/pressure.js [--concurrency 50]
//        [--local-queue 500] [--sample-ms 1000]
//
// 1. installs Graphile Worker's schema (`graphile_worker`) in the database of DATABASE_URL;
// 2. prints {"ready":true,"graphile_worker":"<version>"} and starts a worker with
//    `concurrentJobs` --concurrency, `localQueue.size` --local-queue and
//    `completeJobBatchDelay` 0 (its documented throughput options) and a task `noop` that
//    reads `t` (the enqueuer's clock, ms since the epoch) from its payload;
// 3. every --sample-ms prints {"done": n, "pickup_ms": [...]}: the jobs whose task ran since
//    the last line and, for each, the ms from `t` to the task's start (the benchmark's
//    producer runs on the same machine, so the clocks agree);
// 4. stops the worker and exits 0 when stdin closes or says "stop".
// Everything on stdout is JSON lines; graphile's own log lines go to stderr.
"use strict";

// graphile-worker's version, from its package.json (since 0.18 its package exports no
// `graphile-worker/package.json` subpath, so the file is read from where it is installed).
function graphileVersion() {
  const fs = require("fs");
  const path = require("path");
  const file = path.join(__dirname, "node_modules", "graphile-worker", "package.json");
  return JSON.parse(fs.readFileSync(file, "utf8")).version;
}

const { run, runMigrations, Logger } = require("graphile-worker");

function parseArgs(argv) {
  const o = { url: process.env.DATABASE_URL || null, concurrency: 50, localQueue: 500, sampleMs: 1000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    const positive = (name, v) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${v}`);
      return n;
    };
    if (a === "--concurrency") o.concurrency = positive(a, next());
    else if (a === "--local-queue") o.localQueue = positive(a, next());
    else if (a === "--sample-ms") o.sampleMs = positive(a, next());
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.url) throw new Error("no database: set DATABASE_URL");
  return o;
}

const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") process.stderr.write(`graphile ${level}: ${message}\n`);
});

function say(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  await runMigrations({ connectionString: o.url, logger });
  const version = graphileVersion();
  let pickups = [];
  const runner = await run({
    noHandleSignals: true,
    taskList: {
      noop: async (payload) => {
        const t = payload && typeof payload.t === "number" ? payload.t : null;
        pickups.push(t === null ? -1 : Date.now() - t);
      },
    },
    preset: {
      worker: {
        connectionString: o.url,
        logger,
        concurrentJobs: o.concurrency,
        // Its performance page's fastest settings: a pool of concurrency + 1 connections, a
        // local queue, completions and failures batched with no added delay.
        maxPoolSize: o.concurrency + 1,
        localQueue: { size: o.localQueue },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
        pollInterval: 1000,
      },
    },
  });
  say({ ready: true, graphile_worker: version });
  const timer = setInterval(() => {
    const batch = pickups;
    pickups = [];
    say({ done: batch.length, pickup_ms: batch });
  }, o.sampleMs);
  await new Promise((resolve) => {
    let buf = "";
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (chunk) => {
      buf += chunk;
      if (buf.includes("stop")) resolve();
    });
    process.stdin.once("end", resolve);
  });
  clearInterval(timer);
  await runner.stop();
  say({ done: pickups.length, pickup_ms: pickups, stopped: true });
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`pressure.js: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  },
);
