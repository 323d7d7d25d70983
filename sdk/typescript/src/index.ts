/**
 * turnstile's client library: locks, semaphores, leader election, queues, workers and
 * schedules, correct by default. `protos()` gives the raw generated services.
 */
export { Client, defaultOwner, type LockOptions, type SemaphoreOptions } from "./client.js";
export { Backoff, type DurationLike, type Payload } from "./convert.js";
export * from "./errors.js";
export { Lease } from "./lease.js";
export { Queue } from "./queue.js";
export { protos, type ClientOptions } from "./rpc.js";
export { Schedules, type ScheduleSpec } from "./schedules.js";
export * from "./types.js";
export { MAX_RESULT_BYTES, Worker, defaultWorkerId, type Handler, type WorkerHooks, type WorkerOptions } from "./worker.js";
