import type { Services } from "../services";

/** Cron `*\/10 * * * *`: finds and kills machines that slipped through. */
export async function runReaper(_services: Services): Promise<void> {}
