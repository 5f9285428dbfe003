import type { Offer } from "../offers/schemas";
import { ProviderNameSchema } from "../providers/types";
import type { ApiAnswer, ApiProblem } from "./api";
import type { RentFields } from "./pages/offers";

// The rent form's logic (src/dashboard/pages/offers.tsx draws it): which fields it sends, when a
// picked offer's pin is let go, the POST /v1/leases body, and the offer a rental would take.

const RENT_FIELD_NAMES = [
  "offer_id",
  "pin_provider",
  "pin_gpu",
  "pin_vram_gb",
  "name",
  "provider",
  "gpu",
  "vram_gb",
  "template",
  "image",
  "cmd",
  "model",
  "max_minutes",
  "max_cost",
] as const satisfies readonly (keyof RentFields)[];

export function pickRentFields(source: Record<string, unknown>): RentFields {
  const fields: RentFields = {};
  for (const name of RENT_FIELD_NAMES) {
    const value = source[name];
    if (typeof value === "string" && value.trim() !== "") fields[name] = value.trim();
  }
  return fields;
}

const PINNED_CHOICE = [
  ["provider", "pin_provider", "provider"],
  ["gpu", "pin_gpu", "GPU"],
  ["vram_gb", "pin_vram_gb", "VRAM"],
] as const;

/**
 * A picked offer is pinned with the provider, GPU and VRAM it was picked with. When the form's
 * choice no longer matches them, the user chose something else: the pin is dropped (here, from
 * `fields`) so the offer is picked for the new choice. The VRAM the offer prefilled goes with it
 * unless the user typed another: a Vast.ai RTX 4090's 24.6 GB is no floor for another provider's
 * 24 GB card (it would rent two). Which offer was released and why, or null.
 */
export function releasePin(
  fields: RentFields,
  form: Record<string, unknown>,
): { offerId: string; changed: string[] } | null {
  const offerId = fields.offer_id;
  // A form without the pinned choice (a bare link with the offer alone) keeps the offer.
  const pinned = PINNED_CHOICE.some(([, pin]) => typeof form[pin] === "string");
  const same = (a: string | undefined, b: string | undefined) => (a ?? "").toLowerCase() === (b ?? "").toLowerCase();
  const changed = PINNED_CHOICE.filter(([field, pin]) => !same(fields[field], fields[pin])).map(([, , label]) => label);
  const vramFromOffer = fields.vram_gb !== undefined && same(fields.vram_gb, fields.pin_vram_gb);
  for (const [, pin] of PINNED_CHOICE) delete fields[pin];
  if (!offerId || !pinned || !changed.length) return null;
  delete fields.offer_id;
  if (vramFromOffer) delete fields.vram_gb;
  return { offerId, changed };
}

/** The POST /v1/leases body of the form: numbers as numbers, empty fields left out (the API validates). */
export function leaseBody(fields: RentFields): Record<string, unknown> {
  const number = (v: string | undefined) => (v === undefined ? undefined : Number(v));
  const body: Record<string, unknown> = {
    name: fields.name,
    offer_id: fields.offer_id,
    provider: fields.provider,
    gpu: fields.gpu,
    vram_gb: number(fields.vram_gb),
    template: fields.template,
    image: fields.image,
    cmd: fields.cmd,
    model: fields.model,
    max_minutes: number(fields.max_minutes),
    max_cost: number(fields.max_cost),
  };
  for (const key of Object.keys(body)) if (body[key] === undefined) delete body[key];
  return body;
}

/** The offer a rental would take: the named one, else the best value for the filters (as the API picks). */
export async function chooseOffer(
  fields: RentFields,
  listOffers: (path: string) => Promise<ApiAnswer<{ offers: Offer[] }>>,
): Promise<{ offer: Offer } | { problem: ApiProblem }> {
  const invalid = (path: string, message: string) => ({
    problem: { status: 400, code: "invalid_request", error: `${path}: ${message}`, issues: [{ path, message }] },
  });
  const minutes = Number(fields.max_minutes);
  if (!Number.isInteger(minutes) || minutes < 1 || minutes > 10080) {
    return invalid("max_minutes", "a whole number of minutes from 1 to 10080");
  }
  if (fields.max_cost !== undefined && !(Number(fields.max_cost) > 0)) return invalid("max_cost", "a positive amount");
  if (fields.template === "custom" && !fields.image) return invalid("image", "a custom lease needs an image");
  const query = new URLSearchParams({ limit: "200" });
  if (fields.provider) {
    if (!ProviderNameSchema.safeParse(fields.provider).success) return invalid("provider", "unknown provider");
    query.set("provider", fields.provider);
  }
  if (fields.gpu && !fields.offer_id) query.set("gpu", fields.gpu);
  if (fields.vram_gb && !fields.offer_id) query.set("vram_gb", fields.vram_gb);
  // A model narrows the offers to those it fits (and a malformed or unknown one is said here).
  if (fields.model && fields.template !== "custom") query.set("model", fields.model);
  const answer = await listOffers(`/v1/offers?${query}`);
  if (!answer.ok) return { problem: answer.problem };
  const template = fields.template === "custom" ? "custom" : "ollama";
  const offer = answer.data.offers.find(
    (o) => (fields.offer_id ? o.offer_id === fields.offer_id : true) && o.templates.includes(template),
  );
  if (!offer) {
    return {
      problem: {
        status: 409,
        code: "no_capacity",
        error: fields.offer_id
          ? "That offer is no longer available (or cannot run this template). Pick another from the offers list."
          : `No offer matches: ${choiceWords(fields, template)}. Widen them and try again.`,
      },
    };
  }
  return { offer };
}

/** The choices a rental was narrowed by, in words ("provider sim, GPU 4090, at least 80 GB of VRAM"). */
function choiceWords(fields: RentFields, template: "ollama" | "custom"): string {
  const words = [
    fields.provider ? `provider ${fields.provider}` : "any provider",
    fields.gpu ? `GPU ${fields.gpu}` : null,
    fields.vram_gb ? `at least ${fields.vram_gb} GB of VRAM` : null,
    fields.model && template !== "custom" ? `room for ${fields.model}` : null,
    template === "custom" ? "a custom image" : null,
  ];
  return words.filter((w) => w !== null).join(", ");
}
