import { hasScope } from "../../auth/middleware";
import type { Offer, ProviderFailure } from "../../offers/schemas";
import { providerNames } from "../../providers/types";
import type { Caller } from "../../services";
import type { ApiProblem } from "../api";
import { money } from "../format";
import { ActionsHeader, CsrfField, Empty, ErrorPanel } from "../ui";
import type { WorstCase } from "../worst-case";

export interface OfferFilters {
  gpu?: string;
  vram_gb?: string;
  provider?: string;
  max_price?: string;
}

/** The rent form's values, named as the POST /v1/leases body fields. */
export interface RentFields {
  offer_id?: string;
  /** the choice an offer was pinned with (from the offers list): editing it releases the pin */
  pin_provider?: string;
  pin_gpu?: string;
  pin_vram_gb?: string;
  name?: string;
  provider?: string;
  gpu?: string;
  vram_gb?: string;
  template?: string;
  image?: string;
  cmd?: string;
  model?: string;
  max_minutes?: string;
  max_cost?: string;
}

const gbs = (value: number | null) => (value === null ? "—" : `${value.toLocaleString("en-US")} GB/s`);

/** What metered leases of this card got, and how many there were: the figure that ranks once there are enough. */
function Measured(props: { offer: Offer }) {
  const { measured_bandwidth_gbs: value, measured_samples: samples } = props.offer;
  if (value === null) return <span class="muted">—</span>;
  return (
    <>
      {gbs(value)}
      <span class="muted small">
        {" "}
        ({samples} {samples === 1 ? "lease" : "leases"})
      </span>
    </>
  );
}

function rentHref(offer: Offer): string {
  const q = new URLSearchParams({
    offer_id: offer.offer_id,
    provider: offer.provider,
    gpu: offer.gpu,
    vram_gb: String(offer.vram_gb),
  });
  return `/rent?${q}`;
}

export function OffersPage(props: {
  filters: OfferFilters;
  offers: Offer[] | null;
  errors: ProviderFailure[];
  problem: ApiProblem | null;
  caller: Caller;
}) {
  const f = props.filters;
  const canRent = hasScope(props.caller, "rent");
  return (
    <>
      <form method="get" action="/offers" class="panel" aria-label="Filter offers">
        <div class="grid">
          <div>
            <label for="f-gpu">GPU</label>
            <input id="f-gpu" name="gpu" value={f.gpu ?? ""} placeholder="4090, H100…" />
          </div>
          <div>
            <label for="f-vram">Min. VRAM (GB)</label>
            <input
              id="f-vram"
              name="vram_gb"
              type="number"
              min="1"
              step="1"
              inputmode="numeric"
              value={f.vram_gb ?? ""}
            />
          </div>
          <div>
            <label for="f-provider">Provider</label>
            <select id="f-provider" name="provider">
              <option value="">any</option>
              {providerNames.map((p) => (
                <option value={p} selected={f.provider === p}>
                  {p}
                </option>
              ))}
            </select>
          </div>
          <div>
            <label for="f-price">Max. price (USD/h)</label>
            <input
              id="f-price"
              name="max_price"
              type="number"
              min="0"
              step="0.01"
              inputmode="decimal"
              value={f.max_price ?? ""}
            />
          </div>
          <div>
            <button type="submit" class="primary">
              Show offers
            </button>
          </div>
        </div>
      </form>
      {props.problem ? <ErrorPanel problem={props.problem} title="Offers could not be listed" /> : null}
      {props.errors.length ? (
        <ul class="panel small" aria-label="Providers that did not answer">
          {props.errors.map((e) => (
            <li>
              <strong>{e.provider}</strong>: {e.code === "not_configured" ? "not configured (no API key set)" : e.error}
            </li>
          ))}
        </ul>
      ) : null}
      {props.offers === null ? null : props.offers.length === 0 ? (
        <Empty>No offer matches these filters right now. Widen them (less VRAM, any provider) and try again.</Empty>
      ) : (
        <div class="table-wrap">
          <table class="cards">
            <caption class="visually-hidden">Offers, best value first</caption>
            <thead>
              <tr>
                <th scope="col">GPU</th>
                <th scope="col">Provider</th>
                <th scope="col" class="r">
                  VRAM
                </th>
                <th scope="col" class="r">
                  Price
                </th>
                <th scope="col" class="r">
                  First hour
                </th>
                <th scope="col" class="r">
                  Vendor bandwidth
                </th>
                <th scope="col" class="r">
                  Measured
                </th>
                <th scope="col">Availability</th>
                {canRent ? <ActionsHeader /> : null}
              </tr>
            </thead>
            <tbody>
              {props.offers.map((o) => (
                <tr data-offer-id={o.offer_id}>
                  <td data-label="GPU">
                    {o.gpu_count > 1 ? `${o.gpu_count}× ` : ""}
                    {o.gpu}
                  </td>
                  <td data-label="Provider">
                    {o.provider}
                    {o.cloud && o.cloud.toLowerCase() !== o.provider ? (
                      <span class="muted small"> {o.cloud.toLowerCase()}</span>
                    ) : null}
                  </td>
                  <td data-label="VRAM" class="r">
                    {o.vram_gb} GB{" "}
                    <span
                      class="muted small"
                      title="the cards' memory as the driver reports it; a model must fit in this"
                    >
                      {o.memory_gib} GiB usable
                    </span>
                  </td>
                  <td data-label="Price" class="r">
                    {money(o.price_per_hour, o.currency)}/h
                  </td>
                  <td data-label="First hour" class="r">
                    {money(o.first_hour_cost, o.currency)}
                  </td>
                  <td data-label="Vendor bandwidth" class="r">
                    {gbs(o.bandwidth_gbs)}
                  </td>
                  <td data-label="Measured" class="r">
                    <Measured offer={o} />
                  </td>
                  <td data-label="Availability">{o.availability ?? "—"}</td>
                  {canRent ? (
                    <td data-label="Actions" class="actions">
                      <a class="button" href={rentHref(o)} aria-label={`Rent ${o.gpu} at ${o.provider}`}>
                        Rent…
                      </a>
                    </td>
                  ) : null}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

function Field(props: {
  id: string;
  name: keyof RentFields;
  label: string;
  hint?: string;
  value?: string;
  type?: string;
  required?: boolean;
  min?: string;
  step?: string;
}) {
  return (
    <div>
      <label for={props.id}>
        {props.label}
        {props.hint ? <span class="hint">{props.hint}</span> : null}
      </label>
      <input
        id={props.id}
        name={props.name}
        type={props.type ?? "text"}
        value={props.value ?? ""}
        required={props.required}
        min={props.min}
        step={props.step}
      />
    </div>
  );
}

/** Step one: what to rent and its caps. Submitting it shows the worst case before anything is rented. */
export function RentForm(props: { fields: RentFields; csrf: string; problem: ApiProblem | null }) {
  const v = props.fields;
  return (
    <>
      {props.problem ? <ErrorPanel problem={props.problem} title="Nothing was rented" /> : null}
      <form method="post" action="/rent" class="panel stack">
        <CsrfField csrf={props.csrf} />
        {v.offer_id ? (
          <>
            <input type="hidden" name="offer_id" value={v.offer_id} />
            <input type="hidden" name="pin_provider" value={v.pin_provider ?? v.provider ?? ""} />
            <input type="hidden" name="pin_gpu" value={v.pin_gpu ?? v.gpu ?? ""} />
            <input type="hidden" name="pin_vram_gb" value={v.pin_vram_gb ?? v.vram_gb ?? ""} />
          </>
        ) : null}
        <p class="muted small">
          {v.offer_id ? (
            <>
              Offer <code>{v.offer_id}</code> is picked: changing the provider, GPU or VRAM releases it, and the best
              offer for the new choice is taken.{" "}
            </>
          ) : null}
          You will see the worst-case cost and confirm before anything is rented.
        </p>
        <Field id="r-name" name="name" label="Name" hint="optional, shown in lists" value={v.name} />
        <div class="grid">
          <div>
            <label for="r-provider">Provider</label>
            <select id="r-provider" name="provider">
              <option value="">best value</option>
              {providerNames.map((p) => (
                <option value={p} selected={v.provider === p}>
                  {p}
                </option>
              ))}
            </select>
          </div>
          <Field id="r-gpu" name="gpu" label="GPU" hint="name or part of it" value={v.gpu} />
          <Field id="r-vram" name="vram_gb" label="Min. VRAM (GB)" type="number" min="1" step="any" value={v.vram_gb} />
        </div>
        <div>
          <label for="r-template">
            Template
            <span class="hint">ollama: an Ollama server on port 11434; custom: your image and command</span>
          </label>
          <select id="r-template" name="template">
            <option value="ollama" selected={v.template !== "custom"}>
              ollama
            </option>
            <option value="custom" selected={v.template === "custom"}>
              custom
            </option>
          </select>
        </div>
        <Field
          id="r-image"
          name="image"
          label="Image"
          hint="custom only, e.g. ghcr.io/you/batch:2026-11-12"
          value={v.image}
        />
        <Field id="r-cmd" name="cmd" label="Command" hint="custom only, optional" value={v.cmd} />
        <Field
          id="r-model"
          name="model"
          label="Model"
          hint="ollama only, optional: pulled, loaded and answering before the lease runs, e.g. qwen2.5:32b"
          value={v.model}
        />
        <div class="grid">
          <Field
            id="r-minutes"
            name="max_minutes"
            label="Max. minutes"
            hint="stopped this long after it runs"
            type="number"
            min="1"
            step="1"
            required
            value={v.max_minutes ?? "60"}
          />
          <Field
            id="r-cost"
            name="max_cost"
            label="Max. cost (USD)"
            hint="optional; stopped when reached"
            type="number"
            min="0.01"
            step="0.01"
            value={v.max_cost}
          />
        </div>
        <div>
          <button type="submit" class="primary">
            Review cost
          </button>
        </div>
      </form>
    </>
  );
}

/** Step two: the worst case for the offer that will be rented, and the button that rents it. */
export function RentConfirm(props: {
  fields: RentFields;
  offer: Offer;
  worst: WorstCase;
  startTimeoutMin: number;
  billingStartsAt: "accepted" | "running";
  idempotencyKey: string;
  csrf: string;
  /** the picked offer this choice released, and which fields changed */
  released?: { offerId: string; changed: string[] } | null;
}) {
  const { offer, worst, fields } = props;
  const hidden = Object.entries({ ...fields, offer_id: offer.offer_id }).filter(
    ([name, value]) => value !== undefined && value !== "" && !name.startsWith("pin_"),
  );
  return (
    <section class="panel" aria-labelledby="confirm-title">
      <h2 id="confirm-title">Confirm the rental</h2>
      {props.released ? (
        <p class="panel panel-notice" role="status">
          You changed the {props.released.changed.join(" and ")}, so this released the offer you picked (
          <code>{props.released.offerId}</code>): below is the best offer for the new choice.
        </p>
      ) : null}
      <dl class="facts">
        <dt>Machine</dt>
        <dd>
          {offer.gpu_count > 1 ? `${offer.gpu_count}× ` : ""}
          {offer.gpu} at {offer.provider} <code class="muted small">{offer.offer_id}</code>
        </dd>
        <dt>Price</dt>
        <dd class="num">{money(offer.price_per_hour, offer.currency)}/h</dd>
        <dt>Caps</dt>
        <dd class="num">
          {fields.max_minutes} min{fields.max_cost ? ` · ${money(Number(fields.max_cost), "USD")}` : ""}
        </dd>
        <dt>Worst case</dt>
        <dd>
          <strong class="worst num" id="worst-case">
            {money(worst.usd, "USD")}
          </strong>
          <span class="hint">
            {worst.cappedByMaxCost
              ? "bounded by max_cost"
              : props.billingStartsAt === "accepted"
                ? `${offer.provider} bills while the machine boots: price × (${props.startTimeoutMin} min start timeout + ${fields.max_minutes} min)`
                : `price × ${worst.billedMinutes} min (billing starts when it runs, minimum ${offer.min_billed_minutes} min)`}
          </span>
        </dd>
      </dl>
      <form method="post" action="/rent" class="stack">
        <CsrfField csrf={props.csrf} />
        {hidden.map(([name, value]) => (
          <input type="hidden" name={name} value={value} />
        ))}
        <input type="hidden" name="confirm" value="1" />
        <input type="hidden" name="idempotency_key" value={props.idempotencyKey} />
        <p>
          <button type="submit" class="primary">
            Rent for up to {money(worst.usd, "USD")}
          </button>{" "}
          <a href="/offers">Cancel</a>
        </p>
      </form>
    </section>
  );
}
