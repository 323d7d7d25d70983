// The TypeScript worker against a hand-written loop on the raw stubs and against
// BullMQ's no-op worker, on one machine and one Redis, in one run (SDK.md's benchmark:
// ratios, never a timed test).
//
//   cd sdk/typescript && npm install && npm test    # builds dist/ and the test harness
//   cd bench && npm install && TURNSTILE_BIN=../../../target/release/turnstile node bench.mjs
//
// Each round enqueues TASKS tasks, then drains them with a no-op handler at
// concurrency 8: the raw loop (one Subscribe, an Ack per task as soon as it arrives),
// the library's worker, and BullMQ's Worker (its jobs added with addBulk beforehand).
import { Client, protos } from "@turnstile/client";
import * as grpc from "@grpc/grpc-js";
import { Queue as BullQueue, Worker as BullWorker } from "bullmq";

import { Redis, Server } from "../dist-test/test/harness.js";

const TASKS = Number(process.env.TASKS ?? 20000);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const CONCURRENCY = 8;

async function fill(client, queue) {
  for (let start = 0; start < TASKS; start += 1000) {
    await client.queue(queue).enqueueMany(Array.from({ length: Math.min(1000, TASKS - start) }, () => ({ payload: "x" })));
  }
}

async function raw(server, queue) {
  const { QueueService } = protos();
  const stub = new QueueService(server.addr, grpc.credentials.createInsecure());
  let done = 0;
  const started = performance.now();
  await new Promise((resolve, reject) => {
    const call = stub.Subscribe({ queue, max_in_flight: CONCURRENCY });
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

async function library(server, queue) {
  const client = new Client({ server: server.url });
  let done = 0;
  const started = performance.now();
  const worker = client.worker(queue, async () => {
    if (++done === TASKS) worker.stop();
  }, { concurrency: CONCURRENCY, handleSignals: false });
  await worker.run(); // returns once drained: every ack sent
  const rate = TASKS / ((performance.now() - started) / 1000);
  await client.close();
  return rate;
}

async function bullmq(redis, name) {
  const connection = { host: "127.0.0.1", port: redis.port, maxRetriesPerRequest: null };
  const queue = new BullQueue(name, { connection });
  for (let start = 0; start < TASKS; start += 1000) {
    await queue.addBulk(Array.from({ length: Math.min(1000, TASKS - start) }, (_, i) => ({ name: "noop", data: { i } })));
  }
  let done = 0;
  const started = performance.now();
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const worker = new BullWorker(name, async () => undefined, { connection, concurrency: CONCURRENCY });
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
const rates = { raw: [], library: [], bullmq: [] };
try {
  for (let round = 1; round <= ROUNDS; round++) {
    await fill(filler, `raw-${round}`);
    rates.raw.push(await raw(server, `raw-${round}`));
    await fill(filler, `lib-${round}`);
    rates.library.push(await library(server, `lib-${round}`));
    rates.bullmq.push(await bullmq(redis, `bull-${round}`));
    console.log(`round ${round}: raw ${rates.raw.at(-1).toFixed(0)}, library ${rates.library.at(-1).toFixed(0)}, bullmq ${rates.bullmq.at(-1).toFixed(0)} tasks/s`);
  }
} finally {
  await filler.close();
  await server.kill();
  await redis.close();
}
const [r, l, b] = [median(rates.raw), median(rates.library), median(rates.bullmq)];
console.log(`library worker: ${l.toFixed(0)} tasks/s, ${(l / r).toFixed(2)} of the raw loop (${r.toFixed(0)}), ${(l / b).toFixed(2)} x BullMQ (${b.toFixed(0)})`);
