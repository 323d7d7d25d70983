// The TypeScript worker against a hand-written loop on the raw stubs and against
// BullMQ's no-op worker, on one machine and one Redis, in one run (SDK.md's benchmark:
// ratios, never a timed test).
//
//   cd sdk/typescript && npm install && npm test    # builds dist/ and the test harness
//   cd bench && npm install && TURNSTILE_BIN=../../../target/release/turnstile node bench.mjs
//
// Each round enqueues TASKS tasks, then drains them with a no-op handler at the same
// concurrency for each (8 and 256 unless CONCURRENCY lists others): the raw loop (one
// Subscribe, an Ack per task as soon as it arrives), the library's worker, and BullMQ's
// Worker (its jobs added with addBulk beforehand).
import { Client, protos } from "@turnstile/client";
import * as grpc from "@grpc/grpc-js";
import { Queue as BullQueue, Worker as BullWorker } from "bullmq";

import { Redis, Server } from "../dist-test/test/harness.js";

const TASKS = Number(process.env.TASKS ?? 20000);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const CONCURRENCIES = (process.env.CONCURRENCY ?? "8,256").split(",").map(Number);

async function fill(client, queue) {
  for (let start = 0; start < TASKS; start += 1000) {
    await client.queue(queue).enqueueMany(Array.from({ length: Math.min(1000, TASKS - start) }, () => ({ payload: "x" })));
  }
}

async function raw(server, queue, concurrency) {
  const { QueueService } = protos();
  const stub = new QueueService(server.addr, grpc.credentials.createInsecure());
  let done = 0;
  const started = performance.now();
  await new Promise((resolve, reject) => {
    const call = stub.Subscribe({ queue, max_in_flight: concurrency });
    call.on("data", (message) => {
      if (message.event !== "task") return;
      stub.Ack({ queue, receipts: [message.task.receipt] }, (err) => {
        if (err) return reject(err);
        if (++done === TASKS) {
          call.cancel();
          resolve();
        }
      });
    });
    call.on("error", (err) => err.code !== grpc.status.CANCELLED && reject(err));
  });
  const rate = TASKS / ((performance.now() - started) / 1000);
  stub.close();
  return rate;
}

async function library(server, queue, concurrency) {
  const client = new Client({ server: server.url });
  let done = 0;
  const started = performance.now();
  const worker = client.worker(queue, async () => {
    if (++done === TASKS) worker.stop();
  }, { concurrency, handleSignals: false });
  await worker.run(); // returns once drained: every ack sent
  const rate = TASKS / ((performance.now() - started) / 1000);
  await client.close();
  return rate;
}

async function bullmq(redis, name, concurrency) {
  const connection = { host: "127.0.0.1", port: redis.port, maxRetriesPerRequest: null };
  const queue = new BullQueue(name, { connection });
  for (let start = 0; start < TASKS; start += 1000) {
    await queue.addBulk(Array.from({ length: Math.min(1000, TASKS - start) }, (_, i) => ({ name: "noop", data: { i } })));
  }
  let done = 0;
  const started = performance.now();
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const worker = new BullWorker(name, async () => undefined, { connection, concurrency });
  worker.on("completed", () => ++done === TASKS && finish());
  await finished;
  const rate = TASKS / ((performance.now() - started) / 1000);
  await worker.close();
  await queue.close();
  return rate;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const redis = await Redis.start();
const server = await Server.start(redis);
const filler = new Client({ server: server.url });
const rates = new Map(CONCURRENCIES.map((c) => [c, { raw: [], library: [], bullmq: [] }]));
try {
  for (let round = 1; round <= ROUNDS; round++) {
    for (const c of CONCURRENCIES) {
      const r = rates.get(c);
      await fill(filler, `raw-${c}-${round}`);
      r.raw.push(await raw(server, `raw-${c}-${round}`, c));
      await fill(filler, `lib-${c}-${round}`);
      r.library.push(await library(server, `lib-${c}-${round}`, c));
      r.bullmq.push(await bullmq(redis, `bull-${c}-${round}`, c));
      console.log(`round ${round}, concurrency ${c}: raw ${r.raw.at(-1).toFixed(0)}, library ${r.library.at(-1).toFixed(0)}, bullmq ${r.bullmq.at(-1).toFixed(0)} tasks/s`);
    }
  }
} finally {
  await filler.close();
  await server.kill();
  await redis.close();
}
for (const [c, r] of rates) {
  const [raw, lib, bull] = [median(r.raw), median(r.library), median(r.bullmq)];
  console.log(`concurrency ${c}: library worker ${lib.toFixed(0)} tasks/s, ${(lib / raw).toFixed(2)} of the raw loop (${raw.toFixed(0)}), ${(lib / bull).toFixed(2)} x BullMQ (${bull.toFixed(0)})`);
}
