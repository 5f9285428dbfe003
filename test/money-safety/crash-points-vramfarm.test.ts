import { crashMatrix } from "./crash-matrix";

// The crash-point matrix (crash-matrix.ts) of the vramfarm rent path; one file per provider so that vitest runs them side by side.
crashMatrix("vramfarm");
