import { describe, expect, it } from "vitest";
import type { Offer } from "../../src/offers/schemas";
import { installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { api } from "../helpers";
import { browse, signIn } from "./support";

// The rent form with an offer picked from the offers list: the offer is pinned, and editing the
// provider, GPU or VRAM releases the pin (the page says so) instead of the old pin silently winning.

/** What a browser would submit from the form on `html`: every input and selected option, with `edits` on top. */
function submitted(html: string, edits: Record<string, string>): Record<string, string> {
  const form = /<form method="post" action="\/rent"[\s\S]*?<\/form>/.exec(html)?.[0] ?? "";
  const values: Record<string, string> = {};
  for (const m of form.matchAll(/<input([^>]*)>/g)) {
    const name = /name="([^"]+)"/.exec(m[1]!)?.[1];
    if (name) values[name] = /value="([^"]*)"/.exec(m[1]!)?.[1] ?? "";
  }
  for (const m of form.matchAll(/<select[^>]*name="([^"]+)"[^>]*>([\s\S]*?)<\/select>/g)) {
    values[m[1]!] = /<option value="([^"]*)" selected/.exec(m[2]!)?.[1] ?? "";
  }
  return { ...values, ...edits };
}

/**
 * The number inputs of the rent form a browser would refuse to submit (its constraint validation:
 * below min, or off the step from min), with their values: a refused form sends nothing and the
 * page shows no reason of ours.
 */
function unsubmittable(html: string): string[] {
  const form = /<form method="post" action="\/rent"[\s\S]*?<\/form>/.exec(html)?.[0] ?? "";
  const refused: string[] = [];
  for (const m of form.matchAll(/<input([^>]*type="number"[^>]*)>/g)) {
    const attr = (name: string) => new RegExp(`${name}="([^"]*)"`).exec(m[1]!)?.[1];
    const value = attr("value");
    if (!value) continue;
    const min = Number(attr("min") ?? 0);
    const step = attr("step") ?? "1";
    const off = step !== "any" && Math.abs(((Number(value) - min) / Number(step)) % 1) > 1e-9;
    if (Number(value) < min || off) refused.push(`${attr("name")}=${value} (min ${min}, step ${step})`);
  }
  return refused;
}

async function offer(gpu: string, provider = "sim"): Promise<Offer> {
  const offers = ((await (await api(`/v1/offers?provider=${provider}&gpu=${gpu}`)).json()) as { offers: Offer[] })
    .offers;
  const found = offers.find((o) => o.gpu_count === 1);
  if (!found) throw new Error(`no ${provider} ${gpu} offer`);
  return found;
}

async function pinnedForm(cookie: string, picked: Offer): Promise<string> {
  const q = new URLSearchParams({
    offer_id: picked.offer_id,
    provider: picked.provider,
    gpu: picked.gpu,
    vram_gb: String(picked.vram_gb),
  });
  const res = await browse(`/rent?${q}`, { cookie });
  expect(res.status).toBe(200);
  return res.text();
}

describe("the rent form's pinned offer", () => {
  it("is released when the GPU is changed: the review shows the new choice and says the pin was let go", async () => {
    const picked = await offer("4090");
    const { cookie } = await signIn();
    const form = await pinnedForm(cookie, picked);
    expect(form).toContain(picked.offer_id);

    const res = await browse("/rent", { cookie, form: submitted(form, { gpu: "H100", vram_gb: "" }) });
    const html = await res.text();
    expect(res.status, html.slice(0, 2000)).toBe(200);
    expect(html).toContain("Confirm the rental");
    // The review is for what the user chose now, not the offer picked before.
    expect(html).not.toContain(`value="${picked.offer_id}"`);
    expect(html).toMatch(/H100 SXM at sim/);
    expect(html).toMatch(/released the offer you picked/i);
    expect(form).toMatch(/changing the provider, GPU or VRAM releases it/i);
  });

  it("is released when the provider is changed: no 'no longer available' for an offer that is", async () => {
    const fakes = installFakes(new RunpodFake(), new VastFake());
    try {
      const picked = await offer("4090");
      const { cookie } = await signIn();
      const form = await pinnedForm(cookie, picked);
      const res = await browse("/rent", { cookie, form: submitted(form, { provider: "runpod" }) });
      const html = await res.text();
      expect(html).not.toContain("no longer available");
      expect(res.status, html.slice(0, 2000)).toBe(200);
      expect(html).toMatch(/RTX 4090 at runpod/);
      expect(html).toMatch(/released the offer you picked/i);
    } finally {
      fakes.restore();
    }
  });

  it("is released when the provider is changed to best value", async () => {
    const picked = await offer("4090");
    const { cookie } = await signIn();
    const form = await pinnedForm(cookie, picked);
    const res = await browse("/rent", { cookie, form: submitted(form, { provider: "", gpu: "L40S", vram_gb: "" }) });
    const html = await res.text();
    expect(res.status, html.slice(0, 2000)).toBe(200);
    expect(html).toMatch(/L40S/);
    expect(html).toMatch(/released the offer you picked/i);
  });

  it("stays pinned while the choice is left as it was (only the caps edited)", async () => {
    const picked = await offer("4090");
    const { cookie } = await signIn();
    const form = await pinnedForm(cookie, picked);
    const res = await browse("/rent", { cookie, form: submitted(form, { max_minutes: "30" }) });
    const html = await res.text();
    expect(res.status, html.slice(0, 2000)).toBe(200);
    expect(html).toContain(`name="offer_id" value="${picked.offer_id}"`);
    expect(html).not.toMatch(/released the offer/i);
  });

  it("does not carry the picked offer's VRAM into a new provider and GPU: the new choice is rented", async () => {
    const fakes = installFakes(new RunpodFake(), new VastFake());
    try {
      // A RunPod A40 has 48 GB; the sim's RTX 4090 has 24. (Offers give the size the cards are sold as,
      // so a Vast.ai RTX 4090 is 24 GB like the sim's, no longer the 24.6 of its driver's MiB.)
      const picked = await offer("A40", "runpod");
      expect(picked.vram_gb).toBeGreaterThan(24);
      const { cookie } = await signIn();
      const form = await pinnedForm(cookie, picked);
      expect(form).toContain(`value="${picked.vram_gb}"`);
      // The browser must be able to send the form as it was prefilled.
      expect(unsubmittable(form)).toEqual([]);
      // The user picks another provider and GPU and leaves the prefilled VRAM as it was.
      const review = await browse("/rent", { cookie, form: submitted(form, { provider: "sim", gpu: "4090" }) });
      const html = await review.text();
      expect(review.status, html.slice(0, 2000)).toBe(200);
      // One RTX 4090 (24 GB) at sim: the 48 GB of the RunPod offer is no floor for the new choice.
      expect(html).toMatch(/Machine\s*(<[^>]+>\s*)*RTX 4090 at sim/);
      expect(html).toMatch(/released the offer you picked/i);
      expect(unsubmittable(html)).toEqual([]);
      const rented = await browse("/rent", { cookie, form: submitted(html, {}) });
      expect(rented.status, (await rented.text()).slice(0, 2000)).toBe(303);
      expect(rented.headers.get("Location")).toMatch(/^\/leases\/lse_/);
      const lease = (await (await api(rented.headers.get("Location")!.replace("/leases/", "/v1/leases/"))).json()) as {
        provider: string;
        gpu_count: number;
      };
      expect(lease).toMatchObject({ provider: "sim", gpu_count: 1 });
      await api(`${rented.headers.get("Location")!.replace("/leases/", "/v1/leases/")}/stop`, { method: "POST" });
    } finally {
      fakes.restore();
    }
  });

  it("says which choices matched nothing, on the page", async () => {
    const { cookie } = await signIn();
    const res = await browse("/rent", {
      cookie,
      form: submitted(await pinnedForm(cookie, await offer("4090")), { gpu: "4090", vram_gb: "200" }),
    });
    const html = await res.text();
    expect(res.status).toBe(409);
    expect(html).toMatch(/No offer matches: provider sim, GPU 4090, at least 200 GB of VRAM/);
  });
});
