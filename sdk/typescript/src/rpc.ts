/**
 * One channel, the four services' stubs (loaded from the protos the build copied into
 * dist/proto), the caller's metadata, and unary calls retried through UNAVAILABLE with
 * jittered exponential backoff (100 ms doubling to 5 s) for at most the call's deadline.
 */
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { RETRY, sleep } from "./convert.js";
import { InvalidArgument, fromGrpcError } from "./errors.js";

export const DEFAULT_SERVER = "http://127.0.0.1:50051";
/** How long (ms) a unary call keeps retrying through UNAVAILABLE when no deadline was given. */
export const DEFAULT_DEADLINE = 30_000;

/** Codes a long-lived stream will not get past by opening again. */
export const FINAL = new Set<grpc.status>([
  grpc.status.INVALID_ARGUMENT,
  grpc.status.UNAUTHENTICATED,
  grpc.status.PERMISSION_DENIED,
  grpc.status.FAILED_PRECONDITION,
  grpc.status.UNIMPLEMENTED,
]);

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Stub = any;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Message = any;

const PROTO_DIR = join(dirname(fileURLToPath(import.meta.url)), "proto");

let loaded: grpc.GrpcObject | undefined;

/** The generated `turnstile.v1` package (services and message types), loaded once. */
export function protos(): grpc.GrpcObject {
  if (!loaded) {
    const definition = protoLoader.loadSync(
      ["common", "lock", "queue", "schedule", "semaphore"].map((f) => `turnstile/v1/${f}.proto`),
      { includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true },
    );
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    loaded = (grpc.loadPackageDefinition(definition) as any).turnstile.v1 as grpc.GrpcObject;
  }
  return loaded;
}

export interface ClientOptions {
  /** `http://host:port` or `https://host:port`; default TURNSTILE_SERVER, else http://127.0.0.1:50051. */
  server?: string;
  /** The bearer token; default TURNSTILE_TOKEN. */
  token?: string;
  /** A PEM file of the CA to trust; default TURNSTILE_CA_CERT. */
  caCert?: string;
}

/** `http://host:port` (or several IP replicas, comma-separated) into a gRPC target. */
export function parseServer(server: string): { target: string; tls: boolean } {
  let [scheme, rest] = server.includes("://") ? server.split("://", 2) : ["http", server];
  if (scheme !== "http" && scheme !== "https") {
    throw new InvalidArgument(`server: "${server}" must start with http:// or https://`);
  }
  rest = rest.replace(/\/+$/, "");
  const hosts = rest.split(",").map((h) => h.trim()).filter(Boolean);
  if (hosts.length === 0) throw new InvalidArgument(`server: "${server}" names no host`);
  if (hosts.length === 1) return { target: hosts[0], tls: scheme === "https" };
  for (const host of hosts) {
    const name = host.slice(0, host.lastIndexOf(":")).replace(/^\[|\]$/g, "");
    if (!/^[\d.]+$/.test(name) && !name.includes(":")) {
      throw new InvalidArgument(`server: "${host}": a list of replicas takes IP addresses`);
    }
  }
  const family = hosts[0].startsWith("[") ? "ipv6" : "ipv4";
  return { target: `${family}:${hosts.join(",")}`, tls: scheme === "https" };
}

/** The channel's stubs and metadata, shared by everything a Client makes. */
export class Rpc {
  readonly locks: Stub;
  readonly queues: Stub;
  readonly schedules: Stub;
  readonly semaphores: Stub;
  readonly metadata: () => grpc.Metadata;

  constructor(options: ClientOptions = {}) {
    const server = options.server ?? process.env.TURNSTILE_SERVER ?? DEFAULT_SERVER;
    const token = options.token ?? process.env.TURNSTILE_TOKEN ?? "";
    const caCert = options.caCert ?? process.env.TURNSTILE_CA_CERT ?? "";
    const { target, tls } = parseServer(server);
    const credentials = tls
      ? grpc.credentials.createSsl(caCert ? readFileSync(caCert) : null)
      : grpc.credentials.createInsecure();
    const channelOptions: grpc.ChannelOptions = {
      "grpc.max_receive_message_length": 8 * 1024 * 1024,
      "grpc.max_send_message_length": 8 * 1024 * 1024,
    };
    if (target.startsWith("ipv4:") || target.startsWith("ipv6:")) {
      // The default :authority of a list target is the whole list, which HTTP/2
      // servers refuse: name the first replica.
      channelOptions["grpc.default_authority"] = target.slice(5).split(",")[0];
    }
    const v1 = protos() as Record<string, typeof grpc.Client>;
    this.locks = new v1.LockService(target, credentials, channelOptions);
    // The other stubs share the first one's channel.
    const shared = { ...channelOptions, channelOverride: this.locks.getChannel() };
    this.queues = new v1.QueueService(target, credentials, shared);
    this.schedules = new v1.ScheduleService(target, credentials, shared);
    this.semaphores = new v1.SemaphoreService(target, credentials, shared);
    this.metadata = () => {
      const metadata = new grpc.Metadata();
      if (token) metadata.set("authorization", `Bearer ${token}`);
      return metadata;
    };
  }

  /** `stub[method](request)`, retried through UNAVAILABLE for at most `deadline` ms. */
  async call<T = Message>(stub: Stub, method: string, request: Message, deadline?: number): Promise<T> {
    const end = Date.now() + (deadline ?? DEFAULT_DEADLINE);
    for (let attempt = 1; ; attempt++) {
      try {
        return await new Promise<T>((resolve, reject) => {
          const options = deadline === undefined ? {} : { deadline: new Date(end) };
          stub[method](request, this.metadata(), options, (err: grpc.ServiceError | null, reply: T) =>
            err ? reject(err) : resolve(reply),
          );
        });
      } catch (err) {
        const pause = RETRY.delay(attempt);
        if ((err as grpc.ServiceError).code === grpc.status.UNAVAILABLE && Date.now() + pause < end) {
          await sleep(pause);
          continue;
        }
        throw fromGrpcError(err);
      }
    }
  }

  close(): void {
    this.locks.close();
  }
}
