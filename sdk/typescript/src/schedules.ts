/** Schedules (`ScheduleService`), typed; `list` walks every page. */
import { duration, instant, payloadBytes, type DurationLike, type Payload } from "./convert.js";
import { InvalidArgument, NotFound } from "./errors.js";
import type { Message, Rpc } from "./rpc.js";
import type { Schedule } from "./types.js";

export interface ScheduleSpec {
  queue: string;
  cron?: string;
  every?: DurationLike;
  timeZone?: string;
  payload?: Payload;
  overlap?: "allow" | "skip";
  catchUp?: DurationLike;
  paused?: boolean;
  maxAttempts?: number;
  priority?: number;
  group?: string;
}

function seconds(d: Message): number {
  return Number(d.seconds) * 1000 + d.nanos / 1e6;
}

function fromWire(s: Message): Schedule {
  return {
    name: s.name,
    queue: s.queue,
    cron: s.cron ?? "",
    every: s.spec === "every" ? seconds(s.every) : undefined,
    timeZone: s.time_zone,
    payload: Buffer.from(s.task?.payload ?? []),
    overlap: s.overlap === "OVERLAP_POLICY_SKIP" ? "skip" : "allow",
    catchUp: s.catch_up_window ? seconds(s.catch_up_window) : undefined,
    paused: s.paused,
    nextFireAt: instant(s.next_fire_at),
    lastFireAt: instant(s.last_fire_at),
  };
}

/** The tenant's schedules. */
export class Schedules {
  constructor(private readonly rpc: Rpc) {}

  /** Creates or replaces the schedule `name` (exactly one of `cron`, `every`). */
  async put(name: string, spec: ScheduleSpec): Promise<Schedule> {
    if ((spec.cron === undefined) === (spec.every === undefined)) {
      throw new InvalidArgument("cron: give exactly one of cron and every");
    }
    const wire: Message = {
      name,
      queue: spec.queue,
      time_zone: spec.timeZone ?? "",
      paused: spec.paused ?? false,
      overlap: spec.overlap === "skip" ? "OVERLAP_POLICY_SKIP" : "OVERLAP_POLICY_ALLOW",
      task: {
        payload: payloadBytes(spec.payload ?? Buffer.alloc(0)),
        max_attempts: spec.maxAttempts ?? 0,
        priority: spec.priority ?? 0,
        group: spec.group ?? "",
      },
    };
    if (spec.cron !== undefined) wire.cron = spec.cron;
    else wire.every = duration(spec.every!, "every");
    if (spec.catchUp !== undefined) wire.catch_up_window = duration(spec.catchUp, "catchUp");
    return this.putWire(wire);
  }

  private async putWire(wire: Message): Promise<Schedule> {
    return fromWire((await this.rpc.call(this.rpc.schedules, "PutSchedule", { schedule: wire })).schedule);
  }

  private async getWire(name: string): Promise<Message> {
    return (await this.rpc.call(this.rpc.schedules, "GetSchedule", { name })).schedule;
  }

  /** The schedule, or undefined when there is none. */
  async get(name: string): Promise<Schedule | undefined> {
    try {
      return fromWire(await this.getWire(name));
    } catch (err) {
      if (err instanceof NotFound) return undefined;
      throw err;
    }
  }

  /** Every schedule whose name starts with `prefix`, by name (all pages). */
  async list(prefix = ""): Promise<Schedule[]> {
    const found: Schedule[] = [];
    let token = "";
    do {
      const reply = await this.rpc.call(this.rpc.schedules, "ListSchedules", { page_size: 1000, page_token: token });
      found.push(...reply.schedules.filter((s: Message) => s.name.startsWith(prefix)).map(fromWire));
      token = reply.next_page_token;
    } while (token);
    return found;
  }

  async delete(name: string): Promise<boolean> {
    return (await this.rpc.call(this.rpc.schedules, "DeleteSchedule", { name })).deleted;
  }

  async pause(name: string): Promise<Schedule> {
    return this.setPaused(name, true);
  }

  async resume(name: string): Promise<Schedule> {
    return this.setPaused(name, false);
  }

  private async setPaused(name: string, paused: boolean): Promise<Schedule> {
    const wire = await this.getWire(name);
    wire.paused = paused;
    return this.putWire(wire);
  }

  /** Enqueues one task now; its id. */
  async trigger(name: string): Promise<string> {
    return (await this.rpc.call(this.rpc.schedules, "TriggerSchedule", { name })).id;
  }
}
