import { describe, expect, it } from "vitest";
import type { Offer } from "../../src/offers/schemas";
import { api } from "../helpers";
import { browse, signIn } from "./support";

// The offers page shows beside the sold size (`vram_gb`) the memory the cards' driver reports
// (`memory_gib`), the figure a model must fit in: an L40S sold as 48 GB has 44.99 GiB.

/** The table row of one offer on the offers page. */
function rowOf(html: string, offerId: string): string {
  return new RegExp(`<tr data-offer-id="${offerId}">[\\s\\S]*?</tr>`).exec(html)?.[0] ?? "";
}

/** The text of a row's cell, tags taken out. */
function cell(row: string, label: string): string {
  const inner = new RegExp(`<td data-label="${label}"[^>]*>([\\s\\S]*?)</td>`).exec(row)?.[1] ?? "";
  return inner
    .replace(/<[^>]+>/g, "")
    .replace(/\s+/g, " ")
    .trim();
}

describe("the offers page's memory", () => {
  it("shows memory_gib (the driver's figure) beside vram_gb for every offer", async () => {
    const listed = ((await (await api("/v1/offers?provider=sim&limit=50")).json()) as { offers: Offer[] }).offers;
    const l40s = listed.find((o) => o.gpu === "L40S" && o.gpu_count === 2);
    expect(l40s, "a 2× L40S sim offer").toBeDefined();
    expect(l40s!.memory_gib).toBe(89.98);

    const { cookie } = await signIn();
    const res = await browse("/offers?provider=sim", { cookie });
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toMatch(/<th scope="col" class="r">\s*VRAM/);
    expect(cell(rowOf(html, l40s!.offer_id), "VRAM")).toBe("96 GB 89.98 GiB usable");
    for (const offer of listed.slice(0, 10)) {
      const row = rowOf(html, offer.offer_id);
      if (!row) continue;
      expect(cell(row, "VRAM")).toBe(`${offer.vram_gb} GB ${offer.memory_gib} GiB usable`);
    }
  });
});
