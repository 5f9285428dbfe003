#!/usr/bin/env node
// @ts-check
import { run } from "../cli/main.mjs";

process.exitCode = await run(process.argv.slice(2));
