import { applyD1Migrations } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { installInstantSleep } from "./support/timing";

await applyD1Migrations(env.DB, env.TEST_MIGRATIONS);
installInstantSleep();
