import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { api } from "../helpers";
import { rentOk, simBody } from "../support/lease";
import { browse, signIn } from "./support";

const rentSim = async (name: string) => (await rentOk(simBody({ name }))).id;

/** Reads a server-sent event stream until `until` appears in it, then lets go of it. */
async function readUntil(res: Response, until: string): Promise<string> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (!text.includes(until)) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  await reader.cancel();
  return text;
}

describe("alarms at the top of every page", () => {
  it("show an unverified teardown and an unresolved rental on every page", async () => {
    const unverified = await rentSim("alarm-unverified");
    const unresolved = await rentSim("alarm-unresolved");
    // The states the keeper and the renting request leave behind (set directly: reaching them
    // through the sim takes minutes of retries).
    await env.DB.prepare("UPDATE leases SET status = 'stopping', error = 'teardown_unverified' WHERE id = ?")
      .bind(unverified)
      .run();
    await env.DB.batch([
      env.DB.prepare(
        "UPDATE leases SET status = 'stopping', provider_ref = NULL, error = 'the rental''s outcome is unknown' WHERE id = ?",
      ).bind(unresolved),
      env.DB.prepare("UPDATE lease_creates SET resolution = 'unresolved', provider_ref = NULL WHERE lease_id = ?").bind(
        unresolved,
      ),
    ]);
    const { cookie } = await signIn();
    for (const path of ["/", "/offers", "/schedules", "/account", "/reaper", "/tokens"]) {
      const html = await (await browse(path, { cookie })).text();
      const alarms = html.slice(html.indexOf('id="alarms"'), html.indexOf('id="main"'));
      expect(alarms, path).toContain("Teardown not verified");
      expect(alarms, path).toContain(`/leases/${unverified}`);
      expect(alarms, path).toContain("Rental unresolved");
      expect(alarms, path).toContain(`/leases/${unresolved}`);
    }
    // The lease's own page lists its creates, the unresolved one said as such.
    const detail = await (await browse(`/leases/${unresolved}`, { cookie })).text();
    const creates = detail.slice(
      detail.indexOf("<dt>Creates</dt>"),
      detail.indexOf("</ol>", detail.indexOf("<dt>Creates</dt>")),
    );
    expect(creates).toContain("sim:");
    expect(creates).toContain("unresolved: gpulease is looking for its machine");
    const rented = await (await browse(`/leases/${unverified}`, { cookie })).text();
    expect(rented).toMatch(/→ machine <code class="small">sim-[^<]+<\/code><span class="muted"> \(the lease/);
    await env.DB.prepare("UPDATE leases SET status = 'stopped' WHERE id IN (?, ?)").bind(unverified, unresolved).run();
    const calm = await (await browse("/", { cookie })).text();
    expect(calm.slice(calm.indexOf('id="alarms"'), calm.indexOf('id="main"'))).not.toContain("Teardown not verified");
  });
});

describe("the live stream", () => {
  it("sends the leases page's rows, with data-lease-id and data-status, to a signed-in session", async () => {
    const leaseId = await rentSim("live-row");
    const { cookie } = await signIn();
    const res = await browse("/live", { cookie });
    expect(res.status).toBe(200);
    expect(res.headers.get("Content-Type")).toContain("text/event-stream");
    const text = await readUntil(res, "event: leases");
    const data = /event: leases\ndata: (.*)\n/.exec(text)?.[1] as string;
    const message = JSON.parse(data) as { target: string; html: string };
    expect(message.target).toBe("live-leases");
    expect(message.html).toMatch(new RegExp(`data-lease-id="${leaseId}" data-status="(provisioning|running)"`));
    await api(`/v1/leases/${leaseId}/stop`, { method: "POST" });
  });

  it("follows one lease's events", async () => {
    const leaseId = await rentSim("live-events");
    const { cookie } = await signIn();
    const text = await readUntil(await browse(`/live?lease=${leaseId}`, { cookie }), "event: event");
    expect(text).toContain("event: lease\n");
    const block = text.slice(text.indexOf("event: event\n")).split("\n\n")[0] as string;
    expect(block).toMatch(/^id: \d+$/m);
    const event = JSON.parse(/^data: (.*)$/m.exec(block)?.[1] as string) as { html: string };
    expect(event.html).toContain("created");
    await api(`/v1/leases/${leaseId}/stop`, { method: "POST" });
  });

  it("ends at once for a visitor without a session", async () => {
    const text = await (await browse("/live")).text();
    expect(text).toContain("event: ended");
  });
});
