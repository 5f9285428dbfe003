import type { Currency } from "../providers/types";

/** Money with its currency sign; `digits` 4 for running costs so a ticking figure visibly moves. */
export function money(amount: number | null | undefined, currency: Currency | null | undefined, digits = 2): string {
  if (amount === null || amount === undefined) return "—";
  return new Intl.NumberFormat("en-US", {
    style: "currency",
    currency: currency ?? "USD",
    minimumFractionDigits: digits,
    maximumFractionDigits: digits,
  }).format(amount);
}

/** "2 h 05 min", "4 min 09 s", "12 s": a span a person reads at a glance. */
export function duration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (h >= 48) return `${Math.floor(h / 24)} d ${h % 24} h`;
  if (h > 0) return `${h} h ${String(m).padStart(2, "0")} min`;
  if (m > 0) return `${m} min ${String(sec).padStart(2, "0")} s`;
  return `${sec} s`;
}

/** "2026-11-29 02:00 UTC": what a time shows before the script turns it into the viewer's zone. */
export function utcText(isoTime: string): string {
  return `${isoTime.slice(0, 10)} ${isoTime.slice(11, 19)} UTC`;
}
