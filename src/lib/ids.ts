const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"; // Crockford base32, lower case

function encodeTime(ms: number, length: number): string {
  let out = "";
  for (let i = 0; i < length; i++) {
    out = alphabet[ms % 32] + out;
    ms = Math.floor(ms / 32);
  }
  return out;
}

function randomPart(length: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(length));
  return Array.from(bytes, (b) => alphabet[b % 32]).join("");
}

/** A time-sortable id with a prefix, e.g. `lse_01jb3k...`: newer ids sort after older ones. */
export function newId(prefix: string, now = Date.now()): string {
  return `${prefix}_${encodeTime(now, 10)}${randomPart(12)}`;
}

/** Ids that appear in URLs: prefix, underscore, base32. Anything else is a 404, not a query. */
export const idPattern = /^[a-z]{2,4}_[0-9a-z]{22}$/;
