/**
 * Stands in for zod's `locales/index.js` in the deployed script (wrangler.toml `[alias]`): the
 * worker's messages are zod's English ones, which zod imports on its own (`locales/en.js`), so
 * the other 63 languages (about 40 KiB gzipped) never ship. `z.locales` is empty here.
 */
export {};
