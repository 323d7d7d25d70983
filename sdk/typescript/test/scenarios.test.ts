/** The twelve scenarios of SDK.md, against a real `turnstile serve` and `redis-server`. */
import assert from "node:assert/strict";
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { after, afterEach, before, test } from "node:test";

import { Backoff, Client, Fail, InvalidArgument, LeaseLost, NotFound, Retry, TaskFailed, Unauthenticated, type LockState, type Task } from "@turnstile/client";

import { Redis, Server, eventually } from "./harness.js";

const PROGRAMS = join(dirname(fileURLToPath(import.meta.url)), "programs.js");
let redis: Redis;
const servers: Server[] = [];
const clients: Client[] = [];
const children: ChildProcess[] = [];

before(async () => {
  redis = await Redis.start();
});
after(async () => {
  await redis.close();
});
afterEach(async () => {
  for (const c of clients.splice(0)) await c.close().catch(() => undefined);
  for (const p of children.splice(0)) p.kill("SIGKILL");
  for (const s of servers.splice(0)) await s.kill();
});

async function server(...extra: string[]): Promise<Server> {
  const s = await Server.start(redis, ...extra);
  servers.push(s);
  return s;
}

function client(url: string, token?: string): Client {
  const c = new Client({ server: url, token });
  clients.push(c);
  return c;
}

function program(url: string, args: string[], env: Record<string, string> = {}): ChildProcess {
  const child = spawn(process.execPath, [PROGRAMS, ...args], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, TURNSTILE_SERVER: url, ...env },
  });
  children.push(child);
  return child;
}

function firstLine(child: ChildProcess): Promise<string> {
  return new Promise((done) => createInterface({ input: child.stdout! }).once("line", done));
}

function readLog(path: string): string[] {
  return existsSync(path) ? readFileSync(path, "utf8").split("\n").filter(Boolean) : [];
}

async function fill(c: Client, queue: string, n: number): Promise<Set<string>> {
  const ids = new Set<string>();
  for (let start = 0; start < n; start += 250) {
    const specs = Array.from({ length: Math.min(250, n - start) }, (_, i) => ({ payload: { n: start + i } }));
    for (const e of await c.queue(queue).enqueueMany(specs)) ids.add(e.id);
  }
  return ids;
}

test("1: lock sections never overlap and fencing tokens increase", async () => {
  const s = await server();
  let inside = 0;
  const entries: bigint[] = [];
  await Promise.all(
    Array.from({ length: 8 }, async (_, n) => {
      const c = client(s.url);
      for (let i = 0; i < 200; i++) {
        const lease = await c.lock("counter", { ttl: "10s", owner: `w${n}` });
        inside++;
        assert.equal(inside, 1);
        entries.push(lease.fencingToken);
        await new Promise((r) => setImmediate(r)); // let the others run while it is held
        inside--;
        await lease.release();
      }
    }),
  );
  assert.equal(entries.length, 1600);
  for (let i = 1; i < entries.length; i++) assert.ok(entries[i - 1] < entries[i], "fencing tokens strictly increase");
});

test("2: a lease whose Redis stops past its TTL is lost and its signal aborts", async () => {
  const s = await server();
  const lease = await client(s.url).lock("doomed", { ttl: "2s" });
  await redis.stop();
  const stopped = Date.now();
  try {
    await eventually("lost", () => lease.lost.aborted, 5000);
    assert.ok(Date.now() - stopped <= 4000);
    assert.throws(() => lease.check(), LeaseLost);
  } finally {
    await redis.start();
  }
});

test("3: a lease survives a restart of its replica", async () => {
  const a = await server();
  const b = await server();
  const c = client(`http://${a.addr},${b.addr}`);
  const lease = await c.lock("kept", { ttl: "3s" });
  await a.restart();
  await b.restart();
  const end = Date.now() + 6000;
  while (Date.now() < end) {
    assert.ok(!lease.lost.aborted, lease.lostReason);
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(await c.checkFence("kept", lease.fencingToken));
  assert.ok(await lease.release());
});

test("4: a killed leader is followed within the TTL and watchers see both", async () => {
  const s = await server();
  const c = client(s.url);
  const seen: LockState[] = [];
  const stop = new AbortController();
  const watching = (async () => {
    for await (const state of c.watch("leader", stop.signal)) {
      seen.push(state);
      if (seen.filter((x) => x.held).length >= 2) return;
    }
  })();
  const first = program(s.url, ["candidate", "leader", "node-a", "2s"]);
  assert.match(await firstLine(first), /^leading/);
  const second = program(s.url, ["candidate", "leader", "node-b", "2s"]);
  const secondLeads = firstLine(second);
  await eventually("the watcher sees node-a", () => seen.some((x) => x.owner === "node-a"));
  first.kill("SIGKILL");
  const killed = Date.now();
  assert.match(await secondLeads, /^leading/);
  assert.ok(Date.now() - killed <= 4000);
  await watching;
  const held = seen.filter((x) => x.held);
  assert.equal(held[0].owner, "node-a");
  assert.equal(held.at(-1)!.owner, "node-b");
  assert.ok(held[0].fencingToken < held.at(-1)!.fencingToken);
});

test("5: a semaphore never has more holders than its limit", async () => {
  const s = await server();
  let holders = 0;
  let most = 0;
  await Promise.all(
    Array.from({ length: 20 }, async (_, n) => {
      const c = client(s.url);
      for (let i = 0; i < 5; i++) {
        const permit = await c.semaphore("pool", { limit: 3, ttl: "10s", owner: `c${n}` });
        most = Math.max(most, ++holders);
        await new Promise((r) => setTimeout(r, 10)); // the work done under the permit
        holders--;
        await permit.release();
      }
    }),
  );
  assert.ok(most >= 1 && most <= 3, `at most 3 holders, saw ${most}`);
});

test("6: a worker handles each task once, retries failures and honours Retry", async () => {
  const s = await server();
  const c = client(s.url);
  const queue = c.queue("jobs");
  const ids = await fill(c, "jobs", 1000);
  await queue.enqueue("x", { id: "fails-once" });
  await queue.enqueue("x", { id: "retry-later" });
  const handled = new Map<string, number>();
  const attempts = new Map<string, number[]>();
  const worker = c.worker(
    "jobs",
    async (task: Task) => {
      attempts.set(task.id, [...(attempts.get(task.id) ?? []), Date.now()]);
      if (task.id === "fails-once" && task.attempt === 1) throw new Error("boom");
      if (task.id === "retry-later" && task.attempt === 1) throw new Retry("700ms");
      handled.set(task.id, (handled.get(task.id) ?? 0) + 1);
    },
    { concurrency: 8, backoff: new Backoff(300), handleSignals: false },
  );
  const running = worker.run();
  await eventually("every task handled", () => handled.size === 1002, 60_000);
  await eventually("every ack landed", async () => (await queue.stats()).inFlight === 0);
  await worker.close();
  await running;
  const stats = await queue.stats();
  assert.deepEqual([stats.ready, stats.delayed, stats.inFlight, stats.dead], [0, 0, 0, 0]);
  for (const id of ids) assert.equal(handled.get(id), 1);
  const failed = attempts.get("fails-once")!;
  assert.ok(failed.length === 2 && failed[1] - failed[0] >= 300 * 0.8);
  const later = attempts.get("retry-later")!;
  assert.ok(later.length === 2 && later[1] - later[0] >= 700);
});

test("a failure's text is the task's last error, and Fail gives up", async () => {
  const s = await server();
  const c = client(s.url);
  const queue = c.queue("outcomes");
  await queue.enqueue("x", { id: "broken" });
  await queue.enqueue("x", { id: "hopeless" });
  const seen = new Map<string, string[]>();
  const worker = c.worker(
    "outcomes",
    async (task: Task) => {
      seen.set(task.id, [...(seen.get(task.id) ?? []), task.lastError]);
      if (task.id === "broken" && task.attempt === 1) throw new Error("the disk is full");
      if (task.id === "hopeless") throw new Fail("no such customer");
    },
    { backoff: new Backoff(100), handleSignals: false },
  );
  const running = worker.run();
  await eventually("both ended", async () => seen.get("broken")?.length === 2 && (await queue.stats()).dead === 1);
  await worker.close();
  await running;
  // The retry saw why the first try failed: the error and its stack.
  const broken = seen.get("broken")!;
  assert.equal(broken[0], "");
  assert.ok(broken[1].startsWith("Error: the disk is full\n    at "), broken[1]);
  // Fail: DEAD on its first of 25 attempts, saying why.
  const dead = await queue.peek("dead", 10);
  assert.deepEqual(
    dead.map((t) => [t.id, t.attempt, t.lastError]),
    [["hopeless", 1, "no such customer"]],
  );
});

test("progress rides on the extension and a retry resumes from it", async () => {
  const s = await server();
  const c = client(s.url);
  const queue = c.queue("resumable");
  await queue.enqueue("x", { id: "job" });
  const seen: string[] = [];
  const worker = c.worker(
    "resumable",
    async (task: Task) => {
      seen.push(task.lastProgress.toString());
      if (task.attempt > 1) return;
      task.progress("step 3 of 5");
      // Fails once the server has it (the next extension carried it).
      await eventually("the progress kept", async () =>
        (await queue.peek("in_flight", 1)).some((t) => t.lastProgress.toString() === "step 3 of 5"),
      );
      throw new Retry(0);
    },
    { visibility: 600, handleSignals: false },
  );
  const running = worker.run();
  await eventually("the retry done", async () => seen.length === 2 && (await queue.stats()).inFlight === 0);
  await worker.close();
  await running;
  assert.deepEqual(seen, ["", "step 3 of 5"]);
});

test("7: a handler running three visibilities is not delivered twice", async () => {
  const s = await server();
  const c = client(s.url);
  await c.queue("long").enqueue("slow", { id: "slow" });
  let deliveries = 0;
  let done = false;
  const worker = c.worker(
    "long",
    async () => {
      deliveries++;
      await new Promise((r) => setTimeout(r, 3000)); // three times the visibility
      done = true;
    },
    { visibility: "1s", handleSignals: false },
  );
  const running = worker.run();
  await eventually("handled", () => done);
  await eventually("acked", async () => {
    const st = await c.queue("long").stats();
    return st.inFlight === 0 && st.ready === 0;
  });
  await worker.close();
  await running;
  assert.equal(deliveries, 1);
});

test("8: SIGTERM drains a worker process", async () => {
  const s = await server();
  const c = client(s.url);
  const ids = await fill(c, "drain", 40);
  const log = join(mkdtempSync(join(tmpdir(), "turnstile-ts-")), "log");
  const worker = program(s.url, ["worker", "drain", log, "500"]);
  await eventually("four handlers run", () => readLog(log).filter((l) => l.startsWith("start")).length >= 4);
  const exited = new Promise<number | null>((r) => worker.once("exit", (code) => r(code)));
  worker.kill("SIGTERM");
  const sent = Date.now();
  assert.equal(await exited, 0);
  assert.ok(Date.now() - sent <= 10_000);
  const lines = readLog(log);
  const started = new Set(lines.filter((l) => l.startsWith("start")).map((l) => l.split(" ")[1]));
  const done = new Set(lines.filter((l) => l.startsWith("done")).map((l) => l.split(" ")[1]));
  assert.deepEqual(started, done, "every running handler finished");
  assert.equal(lines.at(-1), "exited");
  const left = new Set((await c.queue("drain").peek("ready", 100)).map((t) => t.id));
  assert.deepEqual(left, new Set([...ids].filter((id) => !done.has(id))));
  assert.equal((await c.queue("drain").stats()).inFlight, 0);
});

test("9: a killed worker's tasks reach another worker", async () => {
  const s = await server();
  const c = client(s.url);
  const ids = await fill(c, "crash", 1000);
  const log = join(mkdtempSync(join(tmpdir(), "turnstile-ts-")), "log");
  const doomed = program(s.url, ["worker", "crash", log, "10"], { CONCURRENCY: "8" });
  await eventually("the doomed worker handles some", () => readLog(log).length >= 100);
  const gone = new Promise((r) => doomed.once("exit", r));
  doomed.kill("SIGKILL");
  await gone;
  const handled = new Set<string>();
  const worker = c.worker("crash", (task: Task) => void handled.add(task.id), { concurrency: 8, handleSignals: false });
  const running = worker.run();
  const byDoomed = new Set(readLog(log).filter((l) => l.startsWith("done")).map((l) => l.split(" ")[1]));
  await eventually("all 1,000 handled at least once", () => [...ids].every((id) => handled.has(id) || byDoomed.has(id)), 60_000);
  await worker.close();
  await running;
});

test("10: producer and worker through a server restart", async () => {
  const s = await server();
  const c = client(s.url);
  const handled = new Set<string>();
  const worker = c.worker("restart", (task: Task) => void handled.add(task.id), { concurrency: 4, handleSignals: false });
  const running = worker.run();
  const enqueued: string[] = [];
  const producing = (async () => {
    for (let i = 0; i < 400; i++) enqueued.push((await c.queue("restart").enqueue({ n: i })).id);
  })();
  await eventually("some tasks are in", () => enqueued.length >= 100);
  await s.kill();
  await s.start();
  await producing;
  assert.equal(enqueued.length, 400);
  assert.equal(new Set(enqueued).size, 400);
  await eventually("every task handled", () => enqueued.every((id) => handled.has(id)), 60_000);
  await eventually("the queue is empty", async () => {
    const st = await c.queue("restart").stats();
    return st.inFlight + st.ready === 0;
  });
  await worker.close();
  await running;
  assert.deepEqual(new Set(handled), new Set(enqueued), "none enqueued twice");
});

function authFile(token: string): string {
  const path = join(mkdtempSync(join(tmpdir(), "turnstile-ts-auth-")), "tokens.toml");
  const digest = createHash("sha256").update(token).digest("hex");
  writeFileSync(path, `[[token]]\nsha256 = "${digest}"\ntenant = "t"\npermissions = ["lock", "produce", "consume", "admin"]\n`);
  return path;
}

test("11: errors are typed and name the field", async () => {
  const s = await server("--auth-file", authFile("right-token"));
  const c = client(s.url, "right-token");
  await assert.rejects(c.queue("bad\nname").enqueue("x"), (err: unknown) => err instanceof InvalidArgument && err.details.startsWith("queue"));
  await assert.rejects(c.tryLock("", { ttl: "1s" }), (err: unknown) => err instanceof InvalidArgument && err.details.startsWith("name"));
  await assert.rejects(client(s.url, "wrong-token").queue("q").stats(), Unauthenticated);
});

test("12: TLS with a private CA and a token from the environment", async () => {
  const dir = mkdtempSync(join(tmpdir(), "turnstile-ts-pki-"));
  const f = (n: string) => join(dir, n);
  const openssl = (...a: string[]) => execFileSync("openssl", a, { stdio: "ignore" });
  openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f("ca.key"), "-out", f("ca.pem"), "-days", "1", "-subj", "/CN=turnstile test CA");
  openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f("s.key"), "-out", f("s.csr"), "-subj", "/CN=127.0.0.1");
  writeFileSync(f("ext.cnf"), "subjectAltName=IP:127.0.0.1\n");
  openssl("x509", "-req", "-in", f("s.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial", "-out", f("s.pem"), "-days", "1", "-extfile", f("ext.cnf"));
  const s = await server("--tls-cert", f("s.pem"), "--tls-key", f("s.key"), "--auth-file", authFile("s3cret"));
  const saved = { ...process.env };
  Object.assign(process.env, { TURNSTILE_SERVER: `https://${s.addr}`, TURNSTILE_TOKEN: "s3cret", TURNSTILE_CA_CERT: f("ca.pem") });
  try {
    const c = new Client();
    clients.push(c);
    const lease = await c.lock("over-tls", { ttl: "5s" });
    assert.ok(lease.fencingToken > 0n);
    await lease.release();
    assert.ok((await c.queue("tls").enqueue("x")).created);
    delete process.env.TURNSTILE_TOKEN;
    const anonymous = new Client();
    clients.push(anonymous);
    await assert.rejects(anonymous.queue("tls").stats(), Unauthenticated);
  } finally {
    process.env = saved;
  }
});

test("watch is reopened after its server restarts", async () => {
  const s = await server();
  const c = client(s.url);
  const stop = new AbortController();
  const states = c.watch("watched", stop.signal);
  assert.equal((await states.next()).value?.held, false);
  await s.restart();
  const lease = await c.lock("watched", { ttl: "5s", owner: "after-restart" });
  const state = (await states.next()).value!;
  assert.ok(state.held && state.owner === "after-restart", JSON.stringify(state, (_, v) => (typeof v === "bigint" ? String(v) : v)));
  assert.equal(state.fencingToken, lease.fencingToken);
  await lease.release();
  stop.abort();
  await states.return(undefined);
});

test("a call returns the handler's result, and a failed one rejects with its reason", async () => {
  const s = await server();
  const c = client(s.url);
  const worker = c.worker(
    "squares",
    async (task: Task) => {
      const { n } = task.json<{ n: number }>();
      if (n === 13) throw new Fail("unlucky");
      return { square: n * n };
    },
    { concurrency: 2, handleSignals: false },
  );
  const running = worker.run();
  const queue = c.queue("squares");
  assert.equal((await queue.call({ n: 7 }, "30s", { id: "seven" })).toString(), '{"square":49}');
  await assert.rejects(queue.call({ n: 13 }, "30s", { id: "thirteen" }), (err: unknown) => {
    assert.ok(err instanceof TaskFailed);
    assert.deepEqual([err.state, err.lastError], ["dead", "unlucky"]);
    return true;
  });
  const story = await queue.get("thirteen");
  assert.deepEqual(
    story.history.map((a) => [a.number, a.outcome, a.error]),
    [[1, "gave_up", "unlucky"]],
  );
  // A finished task that is not kept is gone; waiting for it runs out.
  await assert.rejects(queue.get("seven"), NotFound);
  assert.equal(await queue.wait("seven", "200ms"), undefined);
  await worker.close();
  await running;
});

test("a running task cancelled aborts its handler's signal and ends cancelled", async () => {
  const s = await server();
  const c = client(s.url);
  const queue = c.queue("endless");
  // Kept once ended, so a wait begun after the end still finds it.
  await queue.configure({ keepCompleted: { count: 10 } });
  let started = false;
  let aborted = false;
  const worker = c.worker(
    "endless",
    async (task: Task) => {
      started = true;
      await new Promise<void>((resolve) => task.signal.addEventListener("abort", () => resolve(), { once: true }));
      aborted = true;
    },
    { handleSignals: false },
  );
  const running = worker.run();
  await queue.enqueue("x", { id: "forever" });
  await eventually("the handler started", async () => started);
  assert.deepEqual(await queue.cancel(["forever"], { running: true }), ["forever"]);
  const ended = await queue.wait("forever", "30s");
  assert.equal(ended?.state, "cancelled");
  assert.deepEqual(
    ended?.history.map((a) => [a.outcome, a.workerId]),
    [["cancelled", worker.workerId]],
  );
  await eventually("the handler's signal aborted", async () => aborted);
  const stats = await queue.stats();
  assert.deepEqual([stats.ready, stats.inFlight, stats.dead], [0, 0, 0]);
  await worker.close();
  await running;
});
