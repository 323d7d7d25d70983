/**
 * Programs the scenarios run as processes of their own (to SIGKILL or SIGTERM them):
 *   node programs.js candidate NAME OWNER TTL   campaign; print "leading <token>"
 *   node programs.js worker QUEUE LOG MS        work the queue, logging start/done
 * The server comes from TURNSTILE_SERVER, as for any user of the library.
 */
import { appendFileSync } from "node:fs";

import { Client, type Task } from "@turnstile/client";

const [mode, ...args] = process.argv.slice(2);
const client = new Client();
if (mode === "candidate") {
  const [name, owner, ttl] = args;
  const lease = await client.campaign(name, owner, ttl);
  console.log(`leading ${lease.fencingToken}`);
  setInterval(() => undefined, 1 << 30);
} else if (mode === "worker") {
  const [queue, log, ms] = args;
  const note = (line: string) => appendFileSync(log, line + "\n");
  const handle = async (task: Task) => {
    note(`start ${task.id}`);
    await new Promise((r) => setTimeout(r, Number(ms))); // the work itself
    note(`done ${task.id}`);
  };
  const concurrency = Number(process.env.CONCURRENCY ?? "4");
  await client.worker(queue, handle, { concurrency, drainTimeout: "10s" }).run();
  await client.close();
  note("exited");
}
