/**
 * A cloud's machine lifecycle without any wire format: the simulated cloud (SimCloud) and the
 * test fakes of RunPod, Vast.ai and VRAMfarm all keep their machines in one of these, so they
 * agree on how machines boot, run, die and linger after terminate.
 */

export type ModelState =
  | "booting" // accepted and billed (RunPod/Vast), container not up yet
  | "running"
  | "failed" // start failed (OCI error, bad image): the provider reports an error
  | "exited" // died on its own, or stopped without being asked
  | "terminating" // terminate accepted, machine still there (lingering)
  | "gone";

export interface ModelMachine {
  id: string;
  label: string | null;
  /** which catalogue entry it was rented from */
  offerKey: string;
  gpuCount: number;
  pricePerHour: number;
  createdAt: number;
  /** the container is up at createdAt + bootMs; Infinity = stuck booting forever */
  bootMs: number;
  /** how long it lingers after an honoured terminate */
  lingerMs: number;
  /** this many terminate calls are answered "ok" and ignored */
  ignoreTerminates: number;
  terminateRequestedAt: number | null;
  /** set when the start fails: the provider's reason */
  failStart: string | null;
  exitedAt: number | null;
  exitReason: string | null;
  /** whatever the wire format needs to echo back (image, env, ports, ...) */
  meta: Record<string, unknown>;
}

export interface CloudModelOptions {
  now: () => number;
  bootMs?: number;
  lingerMs?: number;
}

export interface CreateMachine {
  id?: string;
  label: string | null;
  offerKey: string;
  gpuCount: number;
  pricePerHour: number;
  bootMs?: number;
  lingerMs?: number;
  ignoreTerminates?: number;
  failStart?: string | null;
  meta?: Record<string, unknown>;
}

export type TerminateOutcome = "accepted" | "ignored" | "already_gone";

let counter = 0;

export class CloudModel {
  readonly machines = new Map<string, ModelMachine>();
  readonly now: () => number;
  bootMs: number;
  lingerMs: number;

  constructor(options: CloudModelOptions) {
    this.now = options.now;
    this.bootMs = options.bootMs ?? 0;
    this.lingerMs = options.lingerMs ?? 0;
  }

  create(input: CreateMachine): ModelMachine {
    const machine: ModelMachine = {
      id: input.id ?? `m${Date.now().toString(36)}${(counter++).toString(36)}`,
      label: input.label,
      offerKey: input.offerKey,
      gpuCount: input.gpuCount,
      pricePerHour: input.pricePerHour,
      createdAt: this.now(),
      bootMs: input.bootMs ?? this.bootMs,
      lingerMs: input.lingerMs ?? this.lingerMs,
      ignoreTerminates: input.ignoreTerminates ?? 0,
      terminateRequestedAt: null,
      failStart: input.failStart ?? null,
      exitedAt: null,
      exitReason: null,
      meta: input.meta ?? {},
    };
    this.machines.set(machine.id, machine);
    return machine;
  }

  get(id: string): ModelMachine | undefined {
    return this.machines.get(id);
  }

  state(id: string): ModelState {
    const m = this.machines.get(id);
    if (!m) return "gone";
    const now = this.now();
    if (m.terminateRequestedAt !== null) {
      return now >= m.terminateRequestedAt + m.lingerMs ? "gone" : "terminating";
    }
    if (m.exitedAt !== null && now >= m.exitedAt) return "exited";
    if (now < m.createdAt + m.bootMs) return "booting";
    return m.failStart ? "failed" : "running";
  }

  /** When the container came up, or null while booting / after a failed start. */
  runningSince(id: string): number | null {
    const m = this.machines.get(id);
    if (!m || m.failStart || !Number.isFinite(m.bootMs)) return null;
    const since = m.createdAt + m.bootMs;
    return this.now() >= since ? since : null;
  }

  terminate(id: string): TerminateOutcome {
    const m = this.machines.get(id);
    if (!m || this.state(id) === "gone") return "already_gone";
    if (m.ignoreTerminates > 0) {
      m.ignoreTerminates -= 1;
      return "ignored";
    }
    if (m.terminateRequestedAt === null) m.terminateRequestedAt = this.now();
    return "accepted";
  }

  /** The machine dies on its own (spot outbid, host lost, container exited). */
  exit(id: string, reason: string): void {
    const m = this.machines.get(id);
    if (m) {
      m.exitedAt = this.now();
      m.exitReason = reason;
    }
  }

  /** Removes a machine at once (as if it were never there, or reaped behind our back). */
  remove(id: string): void {
    this.machines.delete(id);
  }

  /** Machines that still exist, in creation order. */
  list(): ModelMachine[] {
    return [...this.machines.values()].filter((m) => this.state(m.id) !== "gone");
  }

  /** Billed hours from `from` (creation or running) until now or until terminate. */
  billedHours(id: string, from: "created" | "running"): number {
    const m = this.machines.get(id);
    if (!m) return 0;
    const start = from === "created" ? m.createdAt : this.runningSince(id);
    if (start === null) return 0;
    const end = Math.min(
      this.now(),
      m.terminateRequestedAt ?? Number.POSITIVE_INFINITY,
      m.exitedAt ?? Number.POSITIVE_INFINITY,
    );
    return Math.max(0, end - start) / 3_600_000;
  }

  snapshot(): ModelMachine[] {
    return [...this.machines.values()].map((m) => ({ ...m, bootMs: Number.isFinite(m.bootMs) ? m.bootMs : -1 }));
  }

  restore(machines: ModelMachine[]): void {
    this.machines.clear();
    for (const m of machines)
      this.machines.set(m.id, { ...m, bootMs: m.bootMs < 0 ? Number.POSITIVE_INFINITY : m.bootMs });
  }
}
