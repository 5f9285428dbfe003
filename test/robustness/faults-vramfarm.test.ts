import { faultMatrix } from "./fault-matrix";

// The fault matrix (fault-matrix.ts) for vramfarm; one file per provider so that vitest runs them side by side.
faultMatrix("vramfarm");
