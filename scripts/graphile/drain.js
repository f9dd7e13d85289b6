#!/usr/bin/env node
// Graphile Worker as the peer in `skiplock-devtools bench` (docs/performance.md): the same no-op drain, on the same
// database server, in the same run.
//
//   DATABASE_URL=postgres://... node scripts/graphile/drain.js --jobs 50000 [--concurrency 24]
//        [--local-queue 500] [--no-wait] [--url postgres://...]
//
// (the URL from the environment keeps a password out of the process list)
// 1. installs Graphile Worker's schema (`graphile_worker`) in the database of --url;
// 2. empties its jobs table and pre-inserts --jobs no-op jobs with graphile's own
//    `graphile_worker.add_jobs` in batches of 1,000, then VACUUM ANALYZE (not timed);
// 3. closes its setup connections, prints {"ready":true} and waits for one line on stdin
//    (so the caller can take its "before" readings with nothing of ours connected; the line
//    also names graphile-worker's version);
//    --no-wait skips the wait;
// 4. runs a worker with `concurrentJobs` --concurrency, `maxPoolSize` --concurrency + 1,
//    `localQueue.size` --local-queue, `completeJobBatchDelay` and `failJobBatchDelay` 0
//    (batched fetch and batched completion, as its performance page's fastest run) and a
//    no-op task,
//    until every job ran and graphile deleted every completed row (graphile deletes a job
//    when it completes, so "done" is an empty jobs table);
// 5. prints {"jobs", "seconds", "jobs_per_s", "polls"} on one line and exits 0.
// `seconds` runs from the worker's start (as skiplock's drain, from its worker's start) to the
// empty table. `polls` is the number of "is it empty yet" queries, each one committed
// transaction in the bench database, so the caller can take them out of its commit count.
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

const { Pool } = require("pg");
const { run, runMigrations, Logger } = require("graphile-worker");

function parseArgs(argv) {
  const o = { url: process.env.DATABASE_URL || null, jobs: 50000, concurrency: 24, localQueue: 500, wait: true };
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
    if (a === "--url") o.url = next();
    else if (a === "--jobs") o.jobs = positive(a, next());
    else if (a === "--concurrency") o.concurrency = positive(a, next());
    else if (a === "--local-queue") o.localQueue = positive(a, next());
    else if (a === "--no-wait") o.wait = false;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.url) throw new Error("no database: set DATABASE_URL or pass --url");
  return o;
}

// Graphile's log lines (info and up) to stderr; stdout carries only our JSON.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") process.stderr.write(`graphile ${level}: ${message}\n`);
});

function say(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

function waitForLine() {
  return new Promise((resolve, reject) => {
    let buf = "";
    const onData = (chunk) => {
      buf += chunk;
      if (buf.includes("\n")) {
        process.stdin.off("data", onData);
        process.stdin.pause();
        resolve();
      }
    };
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", onData);
    process.stdin.once("end", () => reject(new Error("stdin closed before the go line")));
  });
}

async function prepare(o) {
  await runMigrations({ connectionString: o.url, logger });
  const pool = new Pool({ connectionString: o.url, max: 1 });
  try {
    await pool.query("TRUNCATE graphile_worker._private_jobs");
    for (let left = o.jobs; left > 0; left -= 1000) {
      const k = Math.min(left, 1000);
      // graphile_worker.add_jobs(specs job_spec[]): identifier, payload, and the rest null.
      await pool.query(
        `SELECT count(*) FROM graphile_worker.add_jobs(
           ARRAY(SELECT ('noop', '{}'::json, null, null, null, null, null, null)::graphile_worker.job_spec
                 FROM generate_series(1, $1::int)))`,
        [k],
      );
    }
    await pool.query("VACUUM ANALYZE graphile_worker._private_jobs");
  } finally {
    await pool.end();
  }
}

async function drain(o) {
  let ran = 0;
  let allRan;
  const allRanP = new Promise((resolve) => (allRan = resolve));
  const started = process.hrtime.bigint();
  const runner = await run({
    noHandleSignals: true,
    taskList: {
      noop: async () => {
        if (++ran === o.jobs) allRan();
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
      },
    },
  });
  await allRanP;
  // Every task ran; wait until every completion is written (the row deleted).
  const poll = new Pool({ connectionString: o.url, max: 1 });
  let polls = 0;
  try {
    for (;;) {
      polls++;
      const r = await poll.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs");
      if (r.rows[0].n === 0) break;
      await new Promise((res) => setTimeout(res, 2));
    }
  } finally {
    await poll.end();
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await runner.stop();
  await runner.promise;
  return { jobs: o.jobs, seconds, jobs_per_s: o.jobs / seconds, polls };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  await prepare(o);
  say({ ready: true, jobs: o.jobs, graphile_worker: graphileVersion() });
  if (o.wait) await waitForLine();
  say(await drain(o));
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`graphile drain: ${e && e.message ? e.message : e}\n`);
    process.exit(1);
  },
);
