import type { Services } from "../services";

/** Cron `* * * * *`: starts every schedule whose next run is due. */
export async function runDispatcher(_services: Services, _scheduledTime: number): Promise<void> {}
