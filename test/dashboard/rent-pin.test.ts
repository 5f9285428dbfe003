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

async function offer(gpu: string): Promise<Offer> {
  const offers = ((await (await api(`/v1/offers?provider=sim&gpu=${gpu}`)).json()) as { offers: Offer[] }).offers;
  const found = offers.find((o) => o.gpu_count === 1);
  if (!found) throw new Error(`no sim ${gpu} offer`);
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
});
