import { version } from "../package.json";

export const VERSION: string = version;
export const USER_AGENT = `gpulease/${version}`;
