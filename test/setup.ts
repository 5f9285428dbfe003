import { freshState } from "./support/fresh";
import { installInstantSleep } from "./support/timing";

await freshState();
installInstantSleep();
