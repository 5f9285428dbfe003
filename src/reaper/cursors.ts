import { z } from "zod";
import { type ProviderName, ProviderNameSchema } from "../providers/types";
import type { Listing } from "./listings";

const CursorRowSchema = z.object({ provider: ProviderNameSchema, cursor: z.string() });

/** The cursor each provider's listing stopped at in an earlier run (table listing_cursors). */
export const cursorsStatement = (db: D1Database): D1PreparedStatement =>
  db.prepare("SELECT provider, cursor FROM listing_cursors");

export function parseCursors(rows: readonly unknown[]): Map<ProviderName, string> {
  return new Map(rows.map((row) => CursorRowSchema.parse(row)).map((row) => [row.provider, row.cursor] as const));
}

/**
 * For the run's closing batch: a listing cut short saves where it goes on; one that reached the
 * end clears its provider's cursor, so the next run lists from page 1. A failed listing leaves
 * the saved cursor alone: the next run tries it again.
 */
export function cursorStatements(db: D1Database, listings: readonly Listing[], at: string): D1PreparedStatement[] {
  return listings.flatMap((listing) => {
    if (!listing.ok) return [];
    const provider = listing.provider.name;
    return listing.next === null
      ? [db.prepare("DELETE FROM listing_cursors WHERE provider = ?").bind(provider)]
      : [
          db
            .prepare(
              `INSERT INTO listing_cursors (provider, cursor, saved_at) VALUES (?, ?, ?)
                 ON CONFLICT (provider) DO UPDATE SET cursor = excluded.cursor, saved_at = excluded.saved_at`,
            )
            .bind(provider, listing.next, at),
        ];
  });
}
