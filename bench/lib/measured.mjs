// A bench figure over zero samples ("median undefined over 0") is no figure: a bench that measured
// nothing must fail, not print it and exit 0.
import { stats } from "../../scripts/lib/local-worker.mjs";

/** stats() of `values`; throws when there are none, naming what was not measured. */
export function measured(what, values) {
  if (values.length === 0) throw new Error(`measured nothing: zero samples of ${what}`);
  return stats(values);
}
