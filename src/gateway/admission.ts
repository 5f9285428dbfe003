import type { LeaseRow } from "../leases/ledger";
import type { LeaseStatus } from "../leases/schema";
import { secretsEqual } from "../lib/crypto";
import type { ProviderName } from "../providers/types";

/**
 * What the gateway needs to know to let a request through to a lease's machine. The lease's keeper
 * holds it (it writes the row: the key's rotation, `running`, the stop), so the gateway asks the
 * keeper once per request instead of reading D1 (docs/architecture.md, "LLM gateway").
 */
export interface AdmissionFacts {
  status: LeaseStatus;
  /** a model lease (Ollama with a model): the only kind the gateway serves */
  model: boolean;
  /** SHA-256 of the lease's current inference key */
  keyHash: string | null;
  provider: ProviderName | null;
  /** the machine's base URL, once it has one */
  url: string | null;
  /** the context the model was sized for: a request may not ask the runner for more */
  contextLength: number | null;
}

export function admissionFacts(row: LeaseRow): AdmissionFacts {
  return {
    status: row.status,
    model: row.template === "ollama" && !!row.spec.model,
    keyHash: row.inference_key_hash,
    provider: row.provider,
    url: row.access?.urls[0]?.replace(/\/+$/, "") ?? null,
    contextLength: row.spec.model?.context_length ?? null,
  };
}

/**
 * Who is asking: the holder of an inference key (its SHA-256, compared here), an API token the
 * caller has already checked (`allowed`: it holds the infer scope), or no usable credential.
 */
export type Credential = { kind: "key"; hash: string } | { kind: "token"; allowed: boolean } | { kind: "none" };

export type LeaseAdmission =
  | { ok: true; url: string; provider: ProviderName }
  | { ok: false; code: "not_found" | "unauthorized" | "lease_not_running"; message: string };

/**
 * The decision, in the order the gateway answers: no such model lease (404), then the credential
 * (401), then a lease that is not running or has no address yet (409).
 */
export async function admitCaller(facts: AdmissionFacts | null, credential: Credential): Promise<LeaseAdmission> {
  if (!facts?.model) return { ok: false, code: "not_found", message: "no such model lease" };
  const allowed =
    credential.kind === "key"
      ? facts.keyHash !== null && (await secretsEqual(credential.hash, facts.keyHash))
      : credential.kind === "token" && credential.allowed;
  if (!allowed)
    return {
      ok: false,
      code: "unauthorized",
      message: "this lease's inference key, or a token with the infer scope, is needed",
    };
  if (facts.status !== "running")
    return { ok: false, code: "lease_not_running", message: `the lease is ${facts.status}` };
  if (!facts.url || !facts.provider)
    return { ok: false, code: "lease_not_running", message: "the lease's machine has no address yet" };
  return { ok: true, url: facts.url, provider: facts.provider };
}

/**
 * A keeper's copy of its lease's admission facts, in memory: loaded from the row once, then set
 * by the keeper itself whenever it writes the row. A load that began before a write never
 * overwrites what the write set (a rotated key is refused from the rotation's answer on).
 */
export class AdmissionCache {
  private facts: AdmissionFacts | undefined;
  private generation = 0;

  async get(load: () => Promise<LeaseRow | null>): Promise<AdmissionFacts | null> {
    if (this.facts) return this.facts;
    const at = this.generation;
    const row = await load();
    const facts = row ? admissionFacts(row) : null;
    // An unknown lease is not remembered: its row may be written yet.
    if (facts && at === this.generation) this.facts = facts;
    return facts;
  }

  /** The keeper wrote the row: the row as written, or null to read it again at the next request. */
  written(row: LeaseRow | null): void {
    this.generation += 1;
    this.facts = row ? admissionFacts(row) : undefined;
  }
}
