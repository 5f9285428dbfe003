import { CLIENT_SCRIPT } from "./assets/client";
import { STYLE } from "./assets/style";

/** Bumped by content: a changed asset gets a new URL, so it can be cached for a long time. */
function fingerprint(text: string): string {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return (h >>> 0).toString(36);
}

export const ASSET_VERSION = fingerprint(STYLE + CLIENT_SCRIPT);
export { CLIENT_SCRIPT, STYLE };
