import { env } from "cloudflare:workers";
import { beforeEach, describe, expect, it } from "vitest";
import { simCloud } from "../../src/sim/cloud";
import { issueToken } from "../auth/tokens-helper";
import { api } from "../helpers";
import { browse, signIn } from "./support";

beforeEach(async () => {
  await simCloud(env.SIM_CLOUD).reset();
  await env.DB.prepare("UPDATE leases SET status = 'stopped' WHERE status != 'stopped'").run();
});

describe("the lease page shows what was asked", () => {
  it("image, command, ports, disk and env names; never an env value, for any token", async () => {
    const res = await api("/v1/leases", {
      method: "POST",
      json: {
        provider: "sim",
        gpu: "4090",
        template: "custom",
        image: "ghcr.io/you/batch:2026-11-12",
        cmd: "python /app/run.py --nightly",
        ports: [8000],
        disk_gb: 60,
        max_minutes: 30,
        env: { HF_TOKEN: "hf_dashboard_secret_value" },
      },
    });
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    const reader = await issueToken(["read"]);
    for (const token of [undefined, reader.token]) {
      const { cookie } = await signIn(token);
      const page = await (await browse(`/leases/${id}`, { cookie })).text();
      expect(page).toContain("Asked for");
      expect(page).toContain("ghcr.io/you/batch:2026-11-12");
      expect(page).toContain("python /app/run.py --nightly");
      expect(page).toMatch(/ports 8000(, 22)? · 60 GB disk · env HF_TOKEN=\*\*\*/);
      expect(page).not.toContain("hf_dashboard_secret_value");
    }
  });
});
