/**
 * Real processes for the scenarios: a `redis-server` and `turnstile serve` (the binary
 * named by TURNSTILE_BIN, else the repository's target/debug/turnstile) on free loopback
 * ports, killed when the test ends. The same shape as the other languages' harnesses.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { accessSync, constants, mkdtempSync, rmSync } from "node:fs";
import { createServer, Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

export function turnstileBin(): string {
  const path = process.env.TURNSTILE_BIN ?? join(REPO, "target", "debug", "turnstile");
  accessSync(path, constants.X_OK);
  return path;
}

export async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => done(port));
    });
    server.on("error", fail);
  });
}

/** Waits until `check()` holds, polling observable state; fails naming `what`. */
export async function eventually(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function pong(port: number): Promise<boolean> {
  return new Promise((done) => {
    const socket = new Socket();
    socket.setTimeout(500);
    socket.once("data", (data) => {
      done(data.toString().startsWith("+PONG"));
      socket.destroy();
    });
    socket.once("error", () => done(false));
    socket.once("timeout", () => {
      done(false);
      socket.destroy();
    });
    socket.connect(port, "127.0.0.1", () => socket.write("PING\r\n"));
  });
}

export class Redis {
  process: ChildProcess | undefined;
  private constructor(
    readonly port: number,
    readonly dir: string,
  ) {}

  static async start(): Promise<Redis> {
    if (spawnSync("redis-server", ["--version"]).error) throw new Error("redis-server is not installed");
    const redis = new Redis(await freePort(), mkdtempSync(join(tmpdir(), "turnstile-ts-redis-")));
    await redis.start();
    return redis;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    this.process = spawn(
      "redis-server",
      ["--port", String(this.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", this.dir],
      { stdio: "ignore" },
    );
    await eventually("redis answers", () => pong(this.port), 10_000);
  }

  async stop(): Promise<void> {
    await kill(this.process, "SIGKILL");
    this.process = undefined;
  }

  async close(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

async function kill(child: ChildProcess | undefined, signal: NodeJS.Signals): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill(signal);
  await exited;
}

/** `turnstile serve` on `redis`. */
export class Server {
  process: ChildProcess | undefined;
  lines: string[] = [];
  private constructor(
    readonly redis: Redis,
    readonly port: number,
    readonly extra: string[],
  ) {}

  static async start(redis: Redis, ...extra: string[]): Promise<Server> {
    const server = new Server(redis, await freePort(), extra);
    await server.start();
    return server;
  }

  get addr(): string {
    return `127.0.0.1:${this.port}`;
  }

  get url(): string {
    return `${this.extra.includes("--tls-cert") ? "https" : "http"}://${this.addr}`;
  }

  async start(): Promise<void> {
    const env = { ...process.env };
    delete env.TURNSTILE_TOKEN;
    const child = spawn(
      turnstileBin(),
      ["serve", "--listen", this.addr, "--metrics-listen", "127.0.0.1:0", "--dashboard-listen", "off",
        "--redis-url", this.redis.url, "--log-format", "json", "--reattach-grace", "2s", "--shutdown-grace", "5s", ...this.extra],
      { stdio: ["ignore", "ignore", "pipe"], env },
    );
    this.process = child;
    await new Promise<void>((done, fail) => {
      let buffered = "";
      const timer = setTimeout(() => fail(new Error(`no ready line:\n${this.lines.slice(-20).join("\n")}`)), 30_000);
      child.stderr!.on("data", (chunk: Buffer) => {
        buffered += chunk.toString();
        const parts = buffered.split("\n");
        buffered = parts.pop()!;
        for (const line of parts) {
          this.lines.push(line);
          if (line.includes('"ready"')) {
            clearTimeout(timer);
            done();
          }
        }
      });
      child.once("exit", () => fail(new Error(`turnstile serve exited:\n${this.lines.join("\n")}`)));
    });
  }

  async kill(): Promise<void> {
    await kill(this.process, "SIGKILL");
    this.process = undefined;
  }

  async restart(): Promise<void> {
    await kill(this.process, "SIGTERM");
    this.process = undefined;
    await this.start();
  }
}
